"""The Celery task of stored schedules, ``cron_bridge.stored``: the beat sends it by name with
the schedule's name; the worker reads the schedule from the store and runs the named task's
body under the guard, with Celery's own retries, as a decorated task's wrapper does.

The worker must import this module (``include=["cron_bridge_celery.stored"]`` in the app, or
an import next to the app): it registers the task on every app, as ``@shared_task`` does.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task

from cron_bridge.errors import InvalidMessage
from cron_bridge.stored import Schedules
from cron_bridge.worker import META_KEY, run_delivery, worker_store

__all__ = ["TASK_NAME", "run_stored"]

TASK_NAME = "cron_bridge.stored"


@shared_task(name=TASK_NAME, bind=True)  # type: ignore[untyped-decorator]
def run_stored(self: Any, schedule: str) -> Any:
    """Run the stored schedule called ``schedule`` for the occurrence in the message header.

    Raises:
        InvalidMessage: no such schedule (removed since it was sent), not a Celery one, or a
            task this worker does not know.
    """
    if not isinstance(schedule, str):
        raise InvalidMessage("cron_bridge.stored: the schedule name is not text")
    spec = Schedules(worker_store()).get(schedule)
    if spec is None or spec.library != "celery":
        raise InvalidMessage(f"{schedule!r:.200}: no stored Celery schedule of this name")
    target = self.app.tasks.get(spec.task)
    if target is None:
        raise InvalidMessage(f"{schedule!r:.200}: this worker has no task {spec.task!r:.200}")
    job = spec.job(worker=True)
    request = self.request
    meta = (getattr(request, "headers", None) or {}).get(META_KEY)
    if meta is None:
        meta = getattr(request, META_KEY, None)
    attempt = (getattr(request, "retries", 0) or 0) + 1
    delivery = run_delivery(job, meta, attempt=attempt,
                            call=lambda ctx: target.run(*spec.args, **spec.kwargs))  # fmt: skip
    if delivery.retry_in is not None:
        raise self.retry(countdown=delivery.retry_in, max_retries=job.attempts - 1,
                         exc=delivery.error)  # fmt: skip
    delivery.raise_if_failed()
    return delivery.value
