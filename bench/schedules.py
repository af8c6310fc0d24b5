"""What looking at a schedule costs: ``next_after`` per call, the memory a declared schedule
keeps, and the dashboard's walk over a job's last 50 occurrences. Times are the process's CPU
time (single-threaded work; what the hypervisor takes away from a shared VM does not count).

    make bench 'BENCH_ARGS=--only schedules'
    python -m bench.schedules    # the same figures as JSON, for any checkout on PYTHONPATH
"""

from __future__ import annotations

import json
import random
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from typing import Any

from cron_bridge.schedules import Cron, Every, Schedule

CALLS = 1000  # next_after calls per measurement
RUNS = 7  # measurements per figure: the fastest is kept (a shared VM only slows a run down)
DECLARED = 20_000  # daily schedules declared for the memory figure


def _schedules() -> list[tuple[str, Schedule]]:
    return [
        ("*/5 * * * * UTC", Cron("*/5 * * * *")),
        ("30 2 * * * Europe/Warsaw", Cron("30 2 * * *", tz="Europe/Warsaw")),
        ("0 9 * * 1-5 America/New_York", Cron("0 9 * * 1-5", tz="America/New_York")),
        ("every 5m", Every("5m")),
    ]


def next_after_us(schedule: Schedule) -> float:
    """µs per ``next_after``, walking forward from 2026-01-01 (DST changes included for the
    zoned ones); the fastest of ``RUNS`` measurements of ``CALLS`` calls."""
    runs = []
    for _ in range(RUNS):
        at = datetime(2026, 1, 1, tzinfo=UTC)
        started = time.process_time()
        for _ in range(CALLS):
            at = schedule.next_after(at)
        runs.append((time.process_time() - started) / CALLS * 1e6)
    return round(min(runs), 1)


def bytes_per_schedule() -> float:
    """Memory kept per ``Cron`` for ``DECLARED`` random daily schedules (``M H * * *``, at
    most 1,440 distinct), as tracemalloc counts it."""
    rng = random.Random(7)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        kept = [Cron(f"{rng.randrange(60)} {rng.randrange(24)} * * *") for _ in range(DECLARED)]
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert len(kept) == DECLARED
    return round(grown / DECLARED)


def strip_walk_ms() -> float:
    """The occurrences of a minutely cron job's last 50 minutes, read back from now as a
    job's page does for its strip (``latest_occurrences``); the fastest of ``RUNS``."""
    try:
        from cron_bridge.schedules import latest_occurrences
    except ImportError:  # a checkout from before the strip drew unrecorded occurrences
        return float("nan")
    cron = Cron("* * * * *")
    end = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)
    runs = []
    for _ in range(RUNS):
        started = time.process_time()
        for _ in range(10):
            latest_occurrences(cron, end - timedelta(minutes=50), end, 50)
        runs.append((time.process_time() - started) / 10 * 1000)
    return round(min(runs), 2)


def measure() -> dict[str, Any]:
    return {
        "next_after_us": {name: next_after_us(schedule) for name, schedule in _schedules()},
        "bytes_per_cron": bytes_per_schedule(),
        "strip_walk_ms": strip_walk_ms(),
    }


if __name__ == "__main__":
    print(json.dumps(measure()))
