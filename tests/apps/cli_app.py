"""Jobs for the CLI and HTTP tests: an on-demand minutely job, a failing one, a scheduled one."""

from __future__ import annotations

from cron_bridge import JobContext, cluster_task
from tests.apps import journal


@cluster_task(cron="* * * * *", name="reports.minutely", on_demand=True, target="inline")
def minutely(ctx: JobContext) -> None:
    journal.write("ran", ctx)


@cluster_task(cron="0 3 * * *", tz="Europe/Warsaw", name="billing.broken", target="inline")
def broken(ctx: JobContext) -> None:
    raise RuntimeError("the ledger is locked")


@cluster_task(every="1h", name="cache.warm", target="inline")
def warm(ctx: JobContext) -> None:
    journal.write("ran", ctx)
