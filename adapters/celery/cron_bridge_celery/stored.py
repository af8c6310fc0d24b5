"""The Celery task of stored schedules, ``cron_bridge.stored``: the beat sends it by name with
the schedule's name; the worker reads the schedule from the store and, when stored schedules
may name its task (``cron_bridge.storable``), runs the task's body under the guard, with
Celery's own retries, as a decorated task's wrapper does.

The worker must import this module (``include=["cron_bridge_celery.stored"]`` in the app, or
an import next to the app): it registers the task on every app, as ``@shared_task`` does.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task

from cron_bridge.adapters import META_KEY, run_stored_schedule

__all__ = ["TASK_NAME", "run_stored"]

TASK_NAME = "cron_bridge.stored"


@shared_task(name=TASK_NAME, bind=True)  # type: ignore[untyped-decorator]
def run_stored(self: Any, schedule: str) -> Any:
    """Run the stored schedule called ``schedule`` for the occurrence in the message header.

    Raises:
        RefusedTask: no such schedule (removed since it was sent), not a Celery one, or a task
            stored schedules may not name or this worker does not know (recorded ``failed``).
    """
    request = self.request
    meta = (getattr(request, "headers", None) or {}).get(META_KEY)
    if meta is None:
        meta = getattr(request, META_KEY, None)
    retries = (getattr(request, "retries", 0) or 0) + 1

    def resolve(name: str) -> Any:
        target = self.app.tasks.get(name)
        if target is None:
            raise LookupError(f"this worker has no task {name!r:.200}")
        return target.run

    def unloaded(name: str) -> str | None:
        if name in self.app.tasks:
            return None
        return (
            f"this worker's app has no task {name!r:.200}: import the module that declares it in "
            "the worker (the app's include=[...] or imports, or autodiscover_tasks)"
        )

    job, delivery = run_stored_schedule(
        "celery", schedule, meta, attempt=lambda job: retries, resolve=resolve, unloaded=unloaded
    )
    if delivery.retry_in is not None:
        raise self.retry(
            countdown=delivery.retry_in, max_retries=job.attempts - 1, exc=delivery.error
        )
    delivery.raise_if_failed()
    return delivery.value
