"""A beat with 100,000 and 1,000,000 stored schedules: what it holds, and what it costs.

In-process, on a Redis store on loopback: the tenants' schedules written (one per tenant,
yearly, one of 120 crons each, so none comes due), then a ``Beat`` following them:

- the first read of every schedule (on its thread: the loop goes on): wall and CPU seconds
  until every schedule is scheduled;
- memory: the process's RSS before and after, per schedule;
- the safety net (every schedule read again, every 10 minutes): wall and CPU seconds;
- a change (one tenant's schedule updated, as a signup service does), followed by the next
  look: CPU ms, the median of 20;
- a look while nothing changes (once a second): CPU ms, the median of 50.

    make bench 'BENCH_ARGS=--only stored_scale'
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from bench.harness import TREE, env
from bench.tenants import _populate
from cron_bridge.beat.replica import Beat
from cron_bridge.control.schedules import StoredSchedules
from cron_bridge.stores import store_from_url
from tests.servers import RedisServer

SIZES = (100_000, 1_000_000)


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _cpu_ms(call: Any) -> float:
    started = time.process_time()
    call()
    return (time.process_time() - started) * 1000


def _one(url: str, size: int) -> dict[str, Any]:
    """The beat's part, in a process of its own (``python -m bench.stored_scale URL N``):
    its memory is the beat's, not what writing the schedules left behind."""
    logging.getLogger("cron_bridge").setLevel(logging.WARNING)
    os.environ.setdefault("CRON_BRIDGE_STORED_TASKS", "bench.apps.*")
    import bench.apps  # noqa: F401 - the tasks, as a worker would have them

    store = store_from_url(url)
    gc.collect()
    beat = Beat(store, [], stored_schedules=True)
    sync = beat._stored
    assert sync is not None
    before = _rss_mb()
    wall, cpu = time.perf_counter(), time.process_time()
    beat._sync_stored()  # begins the read
    assert sync.wait_read(3600)
    beat._sync_stored()  # takes it: every schedule armed
    first_s, first_cpu = time.perf_counter() - wall, time.process_time() - cpu
    gc.collect()
    after = _rss_mb()
    assert len(beat.jobs()) == size, len(beat.jobs())
    wall, cpu = time.perf_counter(), time.process_time()
    sync._start_read(time.monotonic())  # the safety net, now
    assert sync.wait_read(3600)
    beat._sync_stored()
    again_s, again_cpu = time.perf_counter() - wall, time.process_time() - cpu
    schedules = StoredSchedules(store)
    changes = []
    for n in range(20):
        schedules.update(f"tenant-{n}.report", cron=f"{n} 4 2 1 *", by="bench")
        changes.append(_cpu_ms(beat._sync_stored))
    looks = [_cpu_ms(beat._sync_stored) for _ in range(50)]
    store.close()
    return {
        "schedules": size,
        "first_read_s": round(first_s, 1),
        "first_read_cpu_s": round(first_cpu, 1),
        "rss_mb": round(after),
        "bytes_per_schedule": round((after - before) * 2**20 / size),
        "safety_net_s": round(again_s, 1),
        "safety_net_cpu_s": round(again_cpu, 1),
        "change_cpu_ms": round(statistics.median(changes), 2),
        "look_cpu_ms": round(statistics.median(looks), 3),
    }


def measure(sizes: tuple[int, ...] = SIZES) -> list[dict[str, Any]]:
    rows = []
    for size in sizes:
        with contextlib.ExitStack() as stack:
            server = RedisServer()
            server.start()
            stack.callback(server.remove)
            url = f"{server.url}?prefix=scale:"
            store = store_from_url(url)
            _populate(store, size)
            store.close()
            done = subprocess.run(
                [sys.executable, "-m", "bench.stored_scale", url, str(size)],
                capture_output=True,
                text=True,
                timeout=3600,
                check=True,
                cwd=TREE,
                env=env(),
            )
            row = json.loads(done.stdout.splitlines()[-1])
            print("stored_scale", row, flush=True)
            rows.append(row)
    return rows


if __name__ == "__main__":
    print(json.dumps(_one(sys.argv[1], int(sys.argv[2]))))
