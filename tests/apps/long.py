"""A job that runs until it is aborted, then writes down why (shutdown and lock-lost tests)."""

from __future__ import annotations

from cron_bridge import JobContext, cluster_task
from tests.apps import journal


@cluster_task(every="2s", name="long.run", target="inline", lock_ttl="3s")
def long_run(ctx: JobContext) -> None:
    journal.write("start", ctx)
    if ctx.signal.wait(60):
        journal.write("aborted", ctx, reason=ctx.signal.reason)
        ctx.signal.raise_if_aborted()
    journal.write("end", ctx)
