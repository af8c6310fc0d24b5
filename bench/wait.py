"""What ``wait_replicas`` costs: claim batches against a primary with two replicas, with and
without ``WAIT``, on loopback (the store a beat asks once per burst slice)."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

from bench.harness import quantile
from cron_bridge.jobs import Occurrence
from cron_bridge.stores import store_from_url
from tests.servers import RedisSentinel

BATCHES = (1, 100, 1000)


def wait_cost(rounds: int = 200) -> list[dict[str, object]]:
    """Per batch size and ``wait_replicas`` (0, 1, 2): median and p99 ms per claim batch."""
    group = RedisSentinel()
    group.start()
    found = []
    try:
        for size in BATCHES:
            for wait in (0, 1, 2):
                store = store_from_url(
                    f"{group.url}?prefix=w{uuid.uuid4().hex[:6]}:&wait_replicas={wait}"
                )
                base = datetime(2026, 1, 1, tzinfo=UTC)
                took = []
                count = max(20, rounds // max(1, size // 10))
                store.ping()
                for n in range(count):
                    batch = [
                        Occurrence(job=f"job{i}", scheduled_at=base + timedelta(seconds=n))
                        for i in range(size)
                    ]
                    began = time.perf_counter()
                    store.claim_many(batch, "bench")
                    took.append((time.perf_counter() - began) * 1000)
                store.close()
                found.append(
                    {
                        "batch": size,
                        "wait_replicas": wait,
                        "batches": count,
                        "median_ms": round(quantile(took, 0.5), 3),
                        "p99_ms": round(quantile(took, 0.99), 3),
                    }
                )
                print("wait", found[-1], flush=True)
    finally:
        group.remove()
    return found
