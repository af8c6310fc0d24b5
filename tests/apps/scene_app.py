"""Jobs as an operator's dashboard shows them: one that fails now and then, a slow one, a
quick one, and a daily one in Warsaw that the scene pauses."""

from __future__ import annotations

import time

from cron_bridge import JobContext, cluster_task


@cluster_task(every="3s", name="billing.settle", target="inline", attempts=2)
def settle(ctx: JobContext) -> None:
    """Fails both attempts of every third occurrence (by its due second), with a traceback."""
    if int(ctx.scheduled_at.timestamp()) % 9 == 0:
        raise ConnectionError("the ledger at postgresql://app:hunter2@ledger/db refused")


@cluster_task(every="4s", name="reports.export", target="inline", timeout="30s", lock_ttl="5s")
def export(ctx: JobContext) -> None:
    """Runs a while: in flight when the page is read, so the next occurrence may skip."""
    ctx.signal.wait(5)


@cluster_task(every="2s", name="cache.warm", target="inline")
def warm(ctx: JobContext) -> None:
    time.sleep(0.05)


@cluster_task(cron="0 8 * * *", tz="Europe/Warsaw", name="emails.digest", target="inline")
def digest(ctx: JobContext) -> None:
    """Never due while the scene runs: paused by it, to show a paused job."""
