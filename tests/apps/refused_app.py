"""Two jobs and one declaration refused (as an rq cron registration RQ refuses), for the
pages of ``cron-bridge list``."""

from __future__ import annotations

from cron_bridge import JobContext, cluster_task, refusals


@cluster_task(every="1h", name="a.one", target="inline")
def one(ctx: JobContext) -> None:
    """Does nothing."""


@cluster_task(every="1h", name="b.two", target="inline")
def two(ctx: JobContext) -> None:
    """Does nothing."""


refusals.refuse("nightly-cleanup", "rq cron config", "a cron string RQ cannot parse")
