"""A Celery app for the end-to-end tests: JSON only, acks late, one scenario job."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from cron_bridge import JobContext, cluster_task, storable
from tests.apps import direct, scenarios

app = Celery("cbtest", broker=os.environ.get("CB_TEST_BROKER", "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    result_serializer="json",
    task_default_queue=scenarios.QUEUE,
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    # A killed worker's unacknowledged message comes back after this, not after an hour.
    broker_transport_options={
        "visibility_timeout": 10,
        "unacked_restore_interval": 2,
        "unacked_restore_throttle": 1,
    },
)


if scenarios.SCENARIO == "async":

    @cluster_task(name=scenarios.JOB, kwargs={"source": "beat"}, **scenarios.options())
    @app.task(name="cb.job")
    async def job(ctx: JobContext, **kwargs: Any) -> str:
        return await scenarios.handle_async(ctx, **kwargs)

else:

    @cluster_task(name=scenarios.JOB, kwargs={"source": "beat"}, **scenarios.options())
    @app.task(name="cb.job")
    def job(ctx: JobContext, **kwargs: Any) -> str:
        return scenarios.handle(ctx, **kwargs)


# Stored schedules: the task cron-bridge sends them to, and a plain task for them to run.
import cron_bridge_celery.stored  # noqa: E402, F401


@storable
@app.task(name="cb.stored_report")
def stored_report(*args: Any, **kwargs: Any) -> str:
    from celery import current_task

    from tests.apps.stored_tasks import write

    return write((current_task.request.headers or {}).get("cron_bridge"), args, kwargs)


# A task with a schedule of its own (yearly, never armed here) that stored schedules also run,
# per tenant: called with ctx under the stored schedule's own guard.
@cluster_task(name=f"{scenarios.JOB}.yearly", cron="0 0 1 1 *", on_demand=True)
@app.task(name="cb.decorated_report")
def decorated_report(ctx: JobContext, **kwargs: Any) -> str:
    from tests.apps import journal

    journal.write("ran", ctx, kwargs=kwargs, decorated=True)
    return "done"


@app.task(name="cb.unmarked")
def unmarked(*args: Any, **kwargs: Any) -> str:
    """A task of the app that nobody agreed stored schedules may run."""
    from tests.apps.stored_tasks import write

    write({"occurrence_id": "unmarked"}, args, kwargs)
    return "ran"


# Twins sent directly (.delay()), with Celery's own retry options: decorating one must change
# nothing for such callers.
_TWIN: dict[str, Any] = {
    "autoretry_for": (RuntimeError,),
    "max_retries": direct.RETRIES,
    "default_retry_delay": direct.DELAY_S,
    "retry_backoff": False,
    "acks_late": True,
}


@app.task(name="cb.twin_plain", **_TWIN)
def twin_plain(label: str) -> None:
    direct.fail("plain", label)


@cluster_task(name=f"{scenarios.JOB}.twin", every="1h", on_demand=True)
@app.task(name="cb.twin_decorated", **_TWIN)
def twin_decorated(ctx: JobContext, label: str) -> None:
    direct.fail("decorated", label)


# A task's own retries under the guard (tests/e2e/test_celery_retries.py): each try is an
# attempt as Celery counts it; both fail twice, then one gives up and one completes.
_OWN_RETRIES: dict[str, Any] = {"bind": True, "default_retry_delay": 0, "acks_late": True}


@cluster_task(name=f"{scenarios.JOB}.autoretry", every="1h", on_demand=True)
@app.task(
    name="cb.autoretry",
    autoretry_for=(RuntimeError,),
    retry_kwargs={"max_retries": 2},
    retry_backoff=False,
    **_OWN_RETRIES,
)
def autoretry(self: Any, ctx: JobContext) -> None:
    from tests.apps import journal

    journal.write("own-retry", ctx, task="autoretry", celery_retries=self.request.retries)
    raise RuntimeError(f"try {self.request.retries + 1} fails")


@cluster_task(name=f"{scenarios.JOB}.self-retry", every="1h", on_demand=True)
@app.task(name="cb.self_retry", max_retries=2, **_OWN_RETRIES)
def self_retry(self: Any, ctx: JobContext) -> str:
    from tests.apps import journal

    journal.write("own-retry", ctx, task="self-retry", celery_retries=self.request.retries)
    if self.request.retries < 2:
        raise self.retry(countdown=0, exc=RuntimeError(f"try {self.request.retries + 1} fails"))
    return "done on the third try"
