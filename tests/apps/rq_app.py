"""An RQ app for the end-to-end tests: a queue by name, its Redis from RQ_REDIS_URL."""

from __future__ import annotations

from typing import Any

from cron_bridge import JobContext, cluster_task
from tests.apps import direct, journal, scenarios, stored_tasks

__all__ = ["stored_tasks"]  # imported for its @storable task, as a worker preloads it

if scenarios.SCENARIO == "async":

    @cluster_task(
        name=scenarios.JOB, queue=scenarios.QUEUE, kwargs={"source": "beat"}, **scenarios.options()
    )
    async def job(ctx: JobContext, **kwargs: Any) -> str:
        return await scenarios.handle_async(ctx, **kwargs)

else:

    @cluster_task(
        name=scenarios.JOB, queue=scenarios.QUEUE, kwargs={"source": "beat"}, **scenarios.options()
    )
    def job(ctx: JobContext, **kwargs: Any) -> str:
        return scenarios.handle(ctx, **kwargs)


# A function with a schedule of its own (yearly, never armed here) that stored schedules also
# run, per tenant: called with ctx under the stored schedule's own guard.
@cluster_task(
    name=f"{scenarios.JOB}.yearly", cron="0 0 1 1 *", on_demand=True, queue=scenarios.QUEUE
)
def decorated_report(ctx: JobContext, **kwargs: Any) -> str:
    journal.write("ran", ctx, kwargs=kwargs, decorated=True)
    return "done"


def unmarked(*args: Any, **kwargs: Any) -> str:
    """A function of the app, loaded in the worker, that nobody agreed stored schedules may
    run."""
    stored_tasks.write({"occurrence_id": "unmarked"}, args, kwargs)
    return "ran"


# Twins enqueued directly (queue.enqueue(..., retry=Retry(...))): decorating one must change
# nothing for such callers.
def twin_plain(label: str) -> None:
    direct.fail("plain", label)


@cluster_task(name=f"{scenarios.JOB}.twin", every="1h", on_demand=True, queue=scenarios.QUEUE)
def twin_decorated(ctx: JobContext, label: str) -> None:
    direct.fail("decorated", label)
