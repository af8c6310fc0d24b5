"""Bulk writes of stored schedules: 100,000 tenants added with ``StoredSchedules.add_many``,
then changed with ``update_many`` and removed with ``remove_many``.

On a Redis and a PostgreSQL store on loopback, the tenants (each its own cron and
arguments, on one task: a signup service's) are added in one call; reported: the seconds
it took, of which checking them, the store round trips, and a replica's full read
afterwards (every schedule, as a beat starting reads them). Then every one of them is changed
(another zone and queue) in one call, and removed in one more: the seconds and round trips
of each.

    make bench 'BENCH_ARGS=--only bulk'
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from typing import Any

from cron_bridge.control.bulk import checked_adds
from cron_bridge.control.schedules import StoredSchedules
from cron_bridge.stores import store_from_url
from tests.servers import PostgresServer, RedisServer

COUNT = 100_000
TASK = "bench.apps.task_body"


def _tenants(count: int) -> list[dict[str, Any]]:
    return [
        {
            "name": f"tenant-{n}.report",
            "library": "rq",
            "task": TASK,
            "cron": f"{n % 60} {n % 24} * * *",
            "tz": "Europe/Warsaw",
            "kwargs": {"tenant": n},
            "queue": "reports",
        }
        for n in range(count)
    ]


def bulk(kind: str, url: str, count: int = COUNT) -> dict[str, Any]:
    store = store_from_url(url)
    try:
        schedules = StoredSchedules(store)
        entries = _tenants(count)
        started = time.perf_counter()
        checked_adds(entries)
        checked_s = time.perf_counter() - started
        before = store.stats.round_trips
        started = time.perf_counter()
        schedules.add_many(entries, by="bench")
        added_s = time.perf_counter() - started
        trips = store.stats.round_trips - before
        started = time.perf_counter()
        read = len(schedules.list())
        read_s = time.perf_counter() - started
        changes = [
            {"name": entry["name"], "tz": "America/New_York", "queue": "reports-2"}
            for entry in entries
        ]
        before = store.stats.round_trips
        started = time.perf_counter()
        updated = len(schedules.update_many(changes, by="bench"))
        updated_s = time.perf_counter() - started
        update_trips = store.stats.round_trips - before
        before = store.stats.round_trips
        started = time.perf_counter()
        gone = schedules.remove_many([entry["name"] for entry in entries], by="bench")
        removed_s = time.perf_counter() - started
        remove_trips = store.stats.round_trips - before
        return {
            "store": kind,
            "schedules": count,
            "add_many_s": round(added_s, 2),
            "of_which_checking_s": round(checked_s, 2),
            "round_trips": trips,
            "read_back": read,
            "full_read_s": round(read_s, 2),
            "updated": updated,
            "update_many_s": round(updated_s, 2),
            "update_round_trips": update_trips,
            "removed": sum(spec is not None for spec in gone.values()),
            "remove_many_s": round(removed_s, 2),
            "remove_round_trips": remove_trips,
            "left": len(schedules.names()),
        }
    finally:
        store.close()


def measure(count: int = COUNT) -> list[dict[str, Any]]:
    os.environ.setdefault("CRON_BRIDGE_STORED_TASKS", "bench.apps.*")
    rows = []
    with contextlib.ExitStack() as stack:
        redis_store = RedisServer()
        redis_store.start()
        stack.callback(redis_store.remove)
        postgres = PostgresServer()
        postgres.start()
        stack.callback(postgres.remove)
        for kind, url in (
            ("redis", f"{redis_store.url}?prefix=b{uuid.uuid4().hex[:6]}:"),
            ("postgres", f"{postgres.url}?schema=b_{uuid.uuid4().hex[:6]}"),
        ):
            row = bulk(kind, url, count)
            print("bulk", row, flush=True)
            rows.append(row)
    return rows
