"""The jobs of the chaos run: every second, inline, each run written down by its handler.

``CHAOS_JOBS`` jobs (default 12), each taking a few hundred milliseconds (seeded from the
occurrence), so overlap locks are held while replicas die and freeze around them.
"""

from __future__ import annotations

import hashlib
import json
import os
import time

from cron_bridge import JobContext, cluster_task

JOURNAL = os.environ.get("CHAOS_JOURNAL", "chaos-journal.jsonl")
COUNT = int(os.environ.get("CHAOS_JOBS", "12"))


def write(event: str, ctx: JobContext, **extra: object) -> None:
    line = {"event": event, "job": ctx.name, "occurrence_id": ctx.occurrence_id,
            "replica": ctx.replica, "at": time.time(), **extra}  # fmt: skip
    fd = os.open(JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def handler(ctx: JobContext) -> None:
    write("start", ctx)
    digest = hashlib.sha1(ctx.occurrence_id.encode(), usedforsecurity=False).digest()
    aborted = ctx.signal.wait(0.05 + digest[0] / 255 * 0.4)
    write("end", ctx, aborted=aborted, reason=ctx.signal.reason)


for number in range(COUNT):
    cluster_task(every="1s", name=f"chaos.job{number:02d}", target="inline", lock_ttl="3s",
                 misfire_grace="10s")(handler)  # fmt: skip
