"""Where the CPU goes when three replicas share this machine's two cores for a burst.

One 10,000-job burst per library on 3 replicas, with each library's floor measured right
before it (median of five): the CPU seconds of the beats, of the store and broker Redis
servers and of the bench process (which polls the queue every millisecond), from 0.3 s
before the burst was due until its last message was in the queue, against what two cores
offer in that time.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

REPLICAS = 3
JOBS = 10000


def budget(
    store: str,
    broker: str,
    burst: Callable[..., dict[str, Any]],
    floor_runs: Callable[[str, str], list[float]],
    fresh: Callable[[str], str],
) -> list[dict[str, Any]]:
    rows = []
    for library in ("celery", "rq", "dramatiq"):
        floor_us = statistics.median(floor_runs(library, broker))
        found = burst(library, JOBS, REPLICAS, fresh(store), broker)
        rows.append(
            {
                "library": library,
                "jobs": JOBS,
                "replicas": REPLICAS,
                "floor_us": floor_us,
                "p99_ms": found["p99_ms"],
                "complete": found["complete"],
                "used": found["cpu_to_last_s"],
            }
        )
        print("budget", rows[-1], flush=True)
    return rows
