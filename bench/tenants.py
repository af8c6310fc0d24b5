"""Stored schedules at tenant scale: what one change costs each replica.

10,000 and 100,000 stored schedules (one per tenant, yearly, so none comes due) on a Redis
and on a PostgreSQL store, 3 beat replicas following them. The bench first lets the replicas
load every schedule and settle, then measures 30 s with no change (idle) and 30 s with one
change a second (a tenant's schedule updated through ``StoredSchedules.update``, as a signup
service does), and reports per replica:

- CPU per change: (CPU during the changes - idle CPU over as long) / changes;
- bytes read per change: the same difference in what the store sent the replica, counted by
  a loopback proxy in front of the store for each replica;
- follow time: from the change written to the line in each replica's log that it scheduled
  the changed tenant, the slowest replica of each change.

    make bench 'BENCH_ARGS=--only tenants'
"""

from __future__ import annotations

import contextlib
import json
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bench.harness import CountingProxy, Proc, env, quantile
from cron_bridge.control.schedules import GROUP, ScheduleEntry, StoredSchedules
from cron_bridge.stores import Store, store_from_url
from tests.servers import PostgresServer, RedisServer

SIZES = (10_000, 100_000)
REPLICAS = 3
PHASE = 30.0  # seconds idle, then seconds of one change a second
TASK = "bench.apps.task_body"
_FOLLOWED = re.compile(r"^(\S+ \S+) INFO cron_bridge\.beat\.replica: stored schedule (\S+): ")


def _specs(count: int) -> Iterator[tuple[str, str]]:
    for n in range(count):
        spec = ScheduleEntry(
            name=f"tenant-{n}.report",
            library="rq",
            task=TASK,
            options={"cron": f"{n % 60} {n % 24} 1 1 *"},
            kwargs={"tenant": n},
            queue="reports",
        )
        yield spec.name, json.dumps(spec.to_json())


def _populate(store: Store, count: int) -> None:
    """Every tenant's schedule written in batches, past the feed: replicas read them all at
    start anyway."""
    batch: dict[str, str] = {}
    for name, raw in _specs(count):
        batch[name] = raw
        if len(batch) == 1000:
            store.put_controls(GROUP, batch)
            batch = {}
    if batch:
        store.put_controls(GROUP, batch)


def _loaded(proc: Proc, count: int) -> bool:
    return f"; {count} in all" in proc.output()


def _followed_at(proc: Proc, name: str, after: float) -> float | None:
    """When the replica logged that it scheduled ``name``, the first time after ``after``."""
    for line in proc.output().splitlines():
        found = _FOLLOWED.match(line)
        if found and found.group(2) == name:
            at = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if at >= after - 0.01:
                return at
    return None


def _snapshot(procs: list[Proc], proxies: list[CountingProxy]) -> list[tuple[float, int]]:
    return [(p.cpu_seconds, proxy.received) for p, proxy in zip(procs, proxies, strict=True)]


def _through(url: str, proxy: CountingProxy) -> str:
    """``url`` with its host and port replaced by the proxy's."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")
    host = f"127.0.0.1:{proxy.port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if netloc[1] else host))


def tenants(store_kind: str, url: str, count: int) -> dict[str, Any]:
    store = store_from_url(url)
    started = time.monotonic()
    _populate(store, count)
    populated_s = time.monotonic() - started
    folder = Path(tempfile.mkdtemp(prefix="bench-tenants-"))
    parts = urlsplit(url)
    proxies = [
        CountingProxy(parts.hostname or "127.0.0.1", parts.port or 0) for _ in range(REPLICAS)
    ]
    procs = [
        Proc(
            f"beat{i}",
            [
                sys.executable,
                "-m",
                "cron_bridge",
                "beat",
                "-A",
                "bench.apps",
                "--replica-id",
                f"beat{i}",
            ],
            env(
                CRON_BRIDGE_STORE=_through(url, proxies[i]),
                BENCH_N="0",
                CRON_BRIDGE_STORED_TASKS="bench.apps.*",
                RQ_REDIS_URL="redis://127.0.0.1:1/0",
            ),
            folder / f"beat{i}.log",
        )
        for i in range(REPLICAS)
    ]
    result: dict[str, Any] = {
        "store": store_kind,
        "schedules": count,
        "replicas": REPLICAS,
        "populate_s": round(populated_s, 1),
    }
    try:
        for proc in procs:
            proc.start()
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not all(_loaded(p, count) for p in procs):
            time.sleep(0.5)
        result["load_s"] = round(time.monotonic() - started - populated_s, 1)
        if not all(_loaded(p, count) for p in procs):
            result["complete"] = False
            return result
        time.sleep(10)  # the start's catalog publish and first ledger writes settle
        before = _snapshot(procs, proxies)
        time.sleep(PHASE)
        idle = _snapshot(procs, proxies)
        schedules = StoredSchedules(store)
        changes: list[tuple[str, float]] = []
        rng = uuid.uuid4().int
        for second in range(int(PHASE)):
            tick = time.monotonic()
            name = f"tenant-{(rng + second * 7919) % count}.report"
            changed_at = time.time()
            schedules.update(name, cron=f"{second % 60} 3 2 1 *", by="bench")
            changes.append((name, changed_at))
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        time.sleep(2)  # the last change is followed
        busy = _snapshot(procs, proxies)
        follow = []
        for name, at in changes:
            seen = [_followed_at(p, name, at) for p in procs]
            if all(s is not None for s in seen):
                follow.append(max(s for s in seen if s is not None) - at)
        n = len(changes)
        cpu_ms = [
            ((b[0] - i[0]) - (i[0] - s[0])) / n * 1000
            for s, i, b in zip(before, idle, busy, strict=True)
        ]
        read_b = [
            ((b[1] - i[1]) - (i[1] - s[1])) / n for s, i, b in zip(before, idle, busy, strict=True)
        ]
        result.update(
            complete=len(follow) == n,
            changes=n,
            idle_cpu_s=[round(i[0] - s[0], 2) for s, i in zip(before, idle, strict=True)],
            idle_read_kb=[
                round((i[1] - s[1]) / 1024, 1) for s, i in zip(before, idle, strict=True)
            ],
            cpu_ms_per_change=[round(v, 2) for v in cpu_ms],
            read_bytes_per_change=[round(v) for v in read_b],
            follow_p50_ms=round(statistics.median(follow) * 1000) if follow else None,
            follow_max_ms=round(max(follow) * 1000) if follow else None,
            follow_p90_ms=round(quantile(follow, 0.9) * 1000) if follow else None,
            peak_rss_mb=[round(p.peak_rss / 2**20) for p in procs],
        )
        return result
    finally:
        for proc in procs:
            proc.stop()
        for proxy in proxies:
            proxy.close()
        store.close()


def measure(sizes: tuple[int, ...] = SIZES) -> list[dict[str, Any]]:
    rows = []
    with contextlib.ExitStack() as stack:
        redis_store = RedisServer()
        redis_store.start()
        stack.callback(redis_store.remove)
        postgres = PostgresServer()
        postgres.start()
        stack.callback(postgres.remove)
        urls = {
            "redis": lambda: f"{redis_store.url}?prefix=t{uuid.uuid4().hex[:6]}:",
            "postgres": lambda: f"{postgres.url}?schema=t_{uuid.uuid4().hex[:6]}",
        }
        for kind, url in urls.items():
            for count in sizes:
                found = tenants(kind, url(), count)
                print("tenants", found, flush=True)
                rows.append(found)
    return rows


if __name__ == "__main__":
    counts = tuple(int(a) for a in sys.argv[1:]) or SIZES
    print(json.dumps(measure(counts), indent=2))
