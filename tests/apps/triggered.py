"""An instance-scope job run only by triggers: slow, and overlap="skip"."""

from __future__ import annotations

from cron_bridge import JobContext, cluster_task
from tests.apps import journal


@cluster_task(every="1h", name="cache.rebuild", target="inline", scope="instance", on_demand=True)
def rebuild(ctx: JobContext) -> None:
    journal.write("start", ctx)
    ctx.signal.wait(1.5)
    journal.write("end", ctx)
