"""An inline job that may make two attempts, due once at ``CB_RETRIED_AT`` (epoch seconds):
its first attempt runs until it is aborted (its replica is killed in it), the second ends at
once. Each attempt's start and end are written down."""

from __future__ import annotations

import os

from cron_bridge import JobContext, cluster_task
from tests.apps import journal

AT = float(os.environ.get("CB_RETRIED_AT", "0"))


@cluster_task(
    every="1h",
    offset=f"{int(AT) % 3600}s",
    name="retried.run",
    target="inline",
    attempts=2,
    lock_ttl="10s",
    misfire_grace="5s",
)
def retried(ctx: JobContext) -> None:
    journal.write("start", ctx)
    if ctx.attempt == 1:
        ctx.signal.wait(60)
        ctx.signal.raise_if_aborted()
    journal.write("end", ctx)
