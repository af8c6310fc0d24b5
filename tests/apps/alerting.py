"""Two inline jobs every second for the alerting rules' test: one completes, one fails."""

from __future__ import annotations

from cron_bridge import JobContext, cluster_task


@cluster_task(every="1s", name="alerting.ok", target="inline")
def ok(ctx: JobContext) -> None:
    """Completes."""


@cluster_task(every="1s", name="alerting.fails", target="inline")
def fails(ctx: JobContext) -> None:
    raise RuntimeError("the mail relay refused the message")
