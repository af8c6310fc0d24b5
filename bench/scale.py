"""A beat with 100,000 jobs (RQ target: a job is a name, a schedule and a queue).

- ``idle``: every job hourly, all due half an hour from now: how long from the process start
  to "started" (import, declaration, arming), its RSS, and its CPU per minute while nothing
  is due.
- ``join``: three replicas with the jobs spread evenly over the hour (about 28 occurrences a
  second); a fourth starts: how long until it wins its first claim, and until it wins its
  share (a quarter, within half) over a 5 s window.
"""

from __future__ import annotations

import re
import time
import uuid
from datetime import datetime
from typing import Any

from bench.harness import Proc, env

_STARTED = "started with"
# A record logged alone, or a batch of them logged as one line (cron_bridge.recording).
_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO cron_bridge\.\w+: "
    r"enqueued (?:\S+|(\d+) occurrence\(s\)) on \S+?,?(?: from .*)?$",
    re.M,
)


def _enqueued(output: str) -> list[tuple[float, int]]:
    """When the beat logged enqueued records, and how many each line counts."""
    return [
        (datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp(), int(many or 1))
        for stamp, many in _LINE.findall(output)
    ]


def _values(jobs: int, store: str, broker: str, at: float, spread: bool) -> dict[str, str]:
    values = {
        "BENCH_LIB": "rq",
        "BENCH_N": str(jobs),
        "BENCH_QUEUE": f"scale-{uuid.uuid4().hex[:6]}",
        "BENCH_BROKER": broker,
        "BENCH_AT": str(at),
        "CRON_BRIDGE_STORE": store,
        "RQ_REDIS_URL": broker,
    }
    if spread:
        values["BENCH_SPREAD"] = "1"
    return values


def _wait_started(proc: Proc, timeout: float) -> float:
    began = time.monotonic()
    while _STARTED not in proc.output():
        if time.monotonic() - began > timeout or (proc.process and proc.process.poll() is not None):
            raise RuntimeError(f"{proc.name} did not start: {proc.output()[-2000:]}")
        time.sleep(0.05)
    return time.monotonic() - began


def idle(jobs: int, store: str, broker: str, seconds: float = 60) -> dict[str, Any]:
    from bench.run import beat_argv, log_dir

    folder = log_dir()
    values = _values(jobs, store, broker, time.time() + 1800, spread=False)
    beat = Proc("scale", [*beat_argv(), "--replica-id", "big"], env(**values), folder / "scale.log")
    try:
        beat.start()
        started = _wait_started(beat, 600)
        time.sleep(10)  # the catalog and the ledger written, settled
        rss = beat.peak_rss
        before = beat.cpu_seconds
        time.sleep(seconds)
        cpu = beat.cpu_seconds - before
    finally:
        beat.stop()
    return {
        "jobs": jobs,
        "start_s": round(started, 2),
        "rss_mb": round(rss / 2**20, 1),
        "peak_rss_mb": round(beat.peak_rss / 2**20, 1),
        "cpu_s_per_min": round(cpu * 60 / seconds, 3),
    }


def join(jobs: int, store: str, broker: str) -> dict[str, Any]:
    from bench.run import beat_argv, log_dir

    folder = log_dir()
    values = _values(jobs, store, broker, time.time(), spread=True)
    beats = [
        Proc(
            f"beat{i}",
            [*beat_argv(), "--replica-id", f"beat{i}"],
            env(**values),
            folder / f"beat{i}.log",
        )
        for i in range(4)
    ]
    try:
        for beat in beats[:3]:
            beat.start()
        for beat in beats[:3]:
            _wait_started(beat, 600)
        time.sleep(10)
        launched = time.time()
        beats[3].start()
        started = _wait_started(beats[3], 600)
        time.sleep(30)
    finally:
        for beat in beats:
            beat.stop()
    wins = _enqueued(beats[3].output())
    first = min((t for t, _ in wins), default=None)
    share_at = None
    everyone = [event for beat in beats for event in _enqueued(beat.output())]
    # The end of the first 2 s window after the start in which it won at least half its
    # fair share (a quarter of the occurrences).
    step = 0.5
    for k in range(int(60 / step)):
        window = (launched + k * step, launched + k * step + 2)
        total = sum(n for t, n in everyone if window[0] <= t < window[1])
        ours = sum(n for t, n in wins if window[0] <= t < window[1])
        if total and ours / total >= 0.125:
            share_at = window[1] - launched
            break
    return {
        "jobs": jobs,
        "joiner_start_s": round(started, 2),
        "first_win_s": None if first is None else round(first - launched, 2),
        "share_s": None if share_at is None else round(share_at, 2),
        "enqueued_per_replica": [sum(n for _, n in _enqueued(b.output())) for b in beats],
    }
