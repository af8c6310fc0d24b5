"""A job every second that takes 2.5 s: the overlap lock lets one run at a time."""

from __future__ import annotations

from cron_bridge import JobContext, cluster_task
from tests.apps import journal


@cluster_task(every="1s", name="slow.overlap", target="inline", lock_ttl="3s")
def overlap(ctx: JobContext) -> None:
    journal.write("start", ctx)
    ctx.signal.wait(2.5)
    journal.write("end", ctx)
