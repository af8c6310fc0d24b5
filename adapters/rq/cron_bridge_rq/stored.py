"""The RQ task of stored schedules: the beat enqueues ``run_stored(schedule=<name>)``; the
worker reads the schedule from the store, imports its function by dotted path and runs it
under the guard, as a decorated job's wrapper does."""

from __future__ import annotations

from typing import Any

from rq import get_current_job
from rq.utils import import_attribute

from cron_bridge.errors import InvalidMessage
from cron_bridge.stored import Schedules
from cron_bridge.worker import META_KEY, run_delivery, worker_store

__all__ = ["run_stored"]


def run_stored(schedule: str) -> Any:
    """Run the stored schedule called ``schedule`` for the occurrence in this job's meta.

    Raises:
        InvalidMessage: no such schedule (removed since it was enqueued), or not an RQ one.
    """
    if not isinstance(schedule, str):
        raise InvalidMessage("run_stored: the schedule name is not text")
    spec = Schedules(worker_store()).get(schedule)
    if spec is None or spec.library != "rq":
        raise InvalidMessage(f"{schedule!r:.200}: no stored RQ schedule of this name (removed?)")
    job = spec.job(worker=True)
    func = import_attribute(spec.task)
    current = get_current_job()
    meta = current.meta.get(META_KEY) if current is not None else None
    retries_left = current.retries_left if current is not None else None
    attempt = job.attempts - retries_left if retries_left is not None else 1
    delivery = run_delivery(job, meta, attempt=max(1, attempt),
                            call=lambda ctx: func(*spec.args, **spec.kwargs))  # fmt: skip
    delivery.raise_if_failed()
    return delivery.value
