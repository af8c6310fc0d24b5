"""What a replica pays for the occurrences it loses: one beat, a burst every occurrence of which
another replica has already claimed. Its CPU from just before the burst until it has stood
aside on all of them, per occurrence, against what a lone beat pays per occurrence it wins."""

from __future__ import annotations

import re
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from bench.harness import AtDue, Proc, env
from cron_bridge.jobs import Occurrence
from cron_bridge.stores import store_from_url


def burst_lost(library: str, jobs: int, store: str, broker: str) -> dict[str, Any]:
    """``jobs`` occurrences due at one second, each already claimed by ``elsewhere``."""
    from bench.run import beat_argv, log_dir

    queue = f"lost-{uuid.uuid4().hex[:6]}"
    folder = log_dir()
    due = float(int(time.time() + 4 + jobs / 2500) + 2)
    at = datetime.fromtimestamp(due, UTC)
    opened = store_from_url(store)
    try:
        names = [f"bench.job{n:05d}" for n in range(jobs)]
        for start in range(0, jobs, 1000):
            won = opened.claim_many(
                [Occurrence(job=name, scheduled_at=at) for name in names[start : start + 1000]],
                "elsewhere",
            )
            assert all(won), "the store already held a claim of this burst"
    finally:
        opened.close()
    values = {
        "BENCH_LIB": library,
        "BENCH_N": str(jobs),
        "BENCH_QUEUE": queue,
        "BENCH_BROKER": broker,
        "BENCH_AT": str(due),
        "CRON_BRIDGE_STORE": store,
        "RQ_REDIS_URL": broker,
    }
    beat = Proc("lost", [*beat_argv(), "--replica-id", "loser"], env(**values), folder / "lost.log")
    at_due = AtDue([beat], store, due)
    try:
        beat.start()
        at_due.start()
        deadline = due + 60
        while time.time() < deadline and _stood_aside(beat.output()) < jobs:
            time.sleep(0.05)
        time.sleep(0.3)
        (cpu,) = at_due.cpu_since()
    finally:
        beat.stop()
    return {
        "library": library,
        "jobs": jobs,
        "stood_aside": _stood_aside(beat.output()),
        "burst_cpu_s": round(cpu, 3),
        "store_calls": at_due.store_calls_since(),
    }


def _stood_aside(output: str) -> int:
    many = sum(int(n) for n in re.findall(r"skipped-claimed (\d+) occurrences", output))
    return many + len(re.findall(r"skipped-claimed \S+@\S+ on", output))
