"""The jobs of the chaos run: every second, each run written down by its handler.

``CHAOS_JOBS`` inline jobs (default 12) and ``CHAOS_QUEUED`` jobs on the RQ queue ``chaos``
(default 0, at most 4; its Redis from ``RQ_REDIS_URL``), each run taking a few hundred milliseconds
(seeded from the occurrence), so overlap locks are held while replicas and workers die and
freeze around them. Each line carries the monotonic time too: the replicas whose wall clock
is set off (libfaketime) share it with the checker.
"""

from __future__ import annotations

import hashlib
import json
import os
import time

from cron_bridge import JobContext, cluster_task

JOURNAL = os.environ.get("CHAOS_JOURNAL", "chaos-journal.jsonl")
COUNT = int(os.environ.get("CHAOS_JOBS", "12"))
QUEUED = int(os.environ.get("CHAOS_QUEUED", "0"))


def write(event: str, ctx: JobContext, **extra: object) -> None:
    line = {"event": event, "job": ctx.name, "occurrence_id": ctx.occurrence_id,
            "replica": ctx.replica, "at": time.time(), "mono": time.monotonic(),
            **extra}  # fmt: skip
    fd = os.open(JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def handler(ctx: JobContext) -> None:
    """Looks at the signal before its first unit of work, as a handler with side effects
    should: a freeze between the guard's last look and this line is seen here. Each line
    carries the time of the look that let the work start and of the end of the work, taken
    before the look that follows it, so a freeze after either moves no line."""
    looked = time.monotonic()
    ctx.signal.raise_if_aborted()
    write("start", ctx, mono=looked)
    digest = hashlib.sha1(ctx.occurrence_id.encode(), usedforsecurity=False).digest()
    ctx.signal.wait(0.05 + digest[0] / 255 * 0.4)
    done = time.monotonic()
    aborted = ctx.signal.aborted
    write("end", ctx, mono=done, aborted=aborted, reason=ctx.signal.reason)


for number in range(COUNT):
    cluster_task(every="1s", name=f"chaos.job{number:02d}", target="inline", lock_ttl="3s",
                 misfire_grace="10s")(handler)  # fmt: skip


# RQ runs a job by its function's dotted path: one module-level function per queued job.
def queued00(ctx: JobContext) -> None:
    handler(ctx)


def queued01(ctx: JobContext) -> None:
    handler(ctx)


def queued02(ctx: JobContext) -> None:
    handler(ctx)


def queued03(ctx: JobContext) -> None:
    handler(ctx)


QUEUED_MAX = 4
for number in range(min(QUEUED, QUEUED_MAX)):
    name = f"queued{number:02d}"
    globals()[name] = cluster_task(every="1s", name=f"chaos.{name}", queue="chaos",
                                   lock_ttl="3s", misfire_grace="10s")(globals()[name])  # fmt: skip
