"""Pauses at tenant scale: what 10,000 paused jobs cost a claim, and what a resume costs.

On a Redis store on loopback, with 0 and 10,000 paused jobs (other jobs than the ones that
run: a signup service pausing tenants that did not pay):

- the read before each claim: how a replica learnt the paused jobs before (every pause,
  ``control.paused``) and now (``PauseSync.current``, the pauses' feed), in ms and store
  round trips per look, the median of 200 looks;
- a resume (``control.resume`` of one of them): ms and round trips, the median of 50;
- a beat replica with 10 RQ jobs every second for 30 s: how late each occurrence was sent
  (the ``enqueued`` record's time less the scheduled time), p50 and p99, and its CPU.

    make bench 'BENCH_ARGS=--only pauses'
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness import Proc, env, quantile
from cron_bridge.beat.pause_sync import PauseSync
from cron_bridge.control import pause as control
from cron_bridge.stores import Store, store_from_url
from tests.servers import RedisServer

PAUSED = (0, 10_000)
JOBS = 10
PHASE = 30.0  # seconds of the beat's run measured
LOOKS = 200
RESUMES = 50


def _pause_many(store: Store, count: int) -> None:
    """``count`` tenants paused, as ``control.pause`` writes them, in batches."""
    record = json.dumps({"reason": "unpaid", "by": "billing", "since": "2026-12-01T00:00:00Z"})
    names = [f"tenant-{n}.report" for n in range(count)]
    for start in range(0, count, 1000):
        store.put_controls(control.PAUSES, dict.fromkeys(names[start : start + 1000], record))


def _median_cost(store: Store, call: Callable[[int], object], times: int) -> tuple[float, float]:
    """The median ms and round trips of ``call(n)`` over ``times`` calls."""
    ms, trips = [], []
    for n in range(times):
        before = store.stats.round_trips
        started = time.perf_counter()
        call(n)
        ms.append((time.perf_counter() - started) * 1000)
        trips.append(store.stats.round_trips - before)
    return round(statistics.median(ms), 3), statistics.median(trips)


def _looks(url: str, paused: int) -> dict[str, Any]:
    store = store_from_url(url)
    try:
        _pause_many(store, paused)
        before = _median_cost(store, lambda _: control.paused(store), LOOKS)
        sync = PauseSync(store)
        sync.current(0.0)
        now = _median_cost(store, lambda n: sync.current(1.0 + n), LOOKS)
        resume = (0.0, 0.0)
        if paused:
            for n in range(RESUMES):  # the resumes' pauses, made as an operator makes them
                control.pause(store, f"tenant-{n}.report", reason="unpaid", by="bench")
            resume = _median_cost(
                store, lambda n: control.resume(store, f"tenant-{n}.report", by="bench"), RESUMES
            )
        return {
            "paused": paused,
            "look_before_ms": before[0],
            "look_before_trips": before[1],
            "look_ms": now[0],
            "look_trips": now[1],
            "resume_ms": resume[0] if paused else None,
            "resume_trips": resume[1] if paused else None,
        }
    finally:
        store.close()


def _lateness(url: str, broker: str, paused: int) -> dict[str, Any]:
    store = store_from_url(url)
    folder = Path(tempfile.mkdtemp(prefix="bench-pauses-"))
    proc = Proc(
        "beat",
        [sys.executable, "-m", "cron_bridge", "beat", "-A", "bench.apps", "--replica-id", "b0"],
        env(
            CRON_BRIDGE_STORE=url,
            BENCH_LIB="rq",
            BENCH_N=str(JOBS),
            BENCH_EVERY="1s",
            RQ_REDIS_URL=broker,
        ),
        folder / "beat.log",
    )
    try:
        _pause_many(store, paused)
        proc.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not store.history("bench.job00000", 1):
            time.sleep(0.2)
        time.sleep(3)  # the start's catalog publish settles
        cpu, started = proc.cpu_seconds, time.time()
        time.sleep(PHASE)
        cpu = proc.cpu_seconds - cpu
        late = [
            (record.started_at.timestamp() - _scheduled(record.occurrence_id)) * 1000
            for n in range(JOBS)
            for record in store.history(f"bench.job{n:05d}", 1000)
            if record.outcome == "enqueued" and _scheduled(record.occurrence_id) >= started
        ]
        return {
            "paused": paused,
            "sent": len(late),
            "late_p50_ms": round(statistics.median(late), 1) if late else None,
            "late_p99_ms": round(quantile(late, 0.99), 1) if late else None,
            "cpu_s": round(cpu, 2),
        }
    finally:
        proc.stop()
        store.close()


def _scheduled(occurrence_id: str) -> float:
    from cron_bridge.jobs import Occurrence

    return Occurrence.parse(occurrence_id).scheduled_at.timestamp()


def measure(paused: tuple[int, ...] = PAUSED) -> list[dict[str, Any]]:
    rows = []
    with contextlib.ExitStack() as stack:
        server = RedisServer()
        server.start()
        stack.callback(server.remove)
        for count in paused:
            url = f"{server.url}?prefix=p{uuid.uuid4().hex[:6]}:"
            row = {
                **_looks(url, count),
                **_lateness(f"{server.url}?prefix=l{uuid.uuid4().hex[:6]}:", server.url, count),
            }
            print("pauses", row, flush=True)
            rows.append(row)
    return rows
