"""The worker side of a stored schedule, shared by the adapters' stored-schedule tasks.

Each adapter's task (``cron_bridge_rq.stored.run_stored``, Celery's ``cron_bridge.stored``,
Dramatiq's ``cron_bridge_stored``) hands over what its queue library says of the message and
how it finds a task by name. This reads the schedule from the store, refuses a task that
stored schedules may not name (``cron_bridge.storable``) before anything is looked up,
imported or called, and runs the task under the guard: a ``@cluster_task`` task's own
function with ``ctx``, any other task with the stored arguments alone.

A refused delivery is recorded ``failed`` with the reason ``refused`` (``history`` and the
audit show it) and raised as ``RefusedTask``, which the adapters keep from being retried.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from cron_bridge.clock import SystemClock
from cron_bridge.control.schedules import StoredSchedules
from cron_bridge.errors import ConfigError, InvalidMessage, RefusedTask, StoreUnavailable
from cron_bridge.jobs import NAME_PATTERN, Job, Occurrence
from cron_bridge.run.delivery import (
    Delivery,
    run_delivery,
    worker_recorder,
    worker_replica,
    worker_store,
)
from cron_bridge.storable import HANDLER_ATTR, refusal
from cron_bridge.stores.records import RunRecord

__all__ = ["REFUSED", "run_stored"]

log = logging.getLogger(__name__)

REFUSED = "refused"  # the reason of a refused delivery's failed record


def run_stored(
    library: str,
    schedule: object,
    meta: Mapping[str, Any] | None,
    *,
    attempt: Callable[[Job], int],
    resolve: Callable[[str], Callable[..., Any]],
    unloaded: Callable[[str], str | None] | None = None,
) -> tuple[Job, Delivery]:
    """Run one delivery of the stored schedule called ``schedule``.

    Args:
        library: the adapter's name; a schedule of another library is refused.
        schedule: the schedule name the message carries.
        meta: the occurrence metadata the beat sent.
        attempt: the try number the queue counts, given the schedule's job.
        resolve: the task of that name, as this worker knows it (called only for a task
            stored schedules may name); raises ``LookupError`` saying why when there is none.
        unloaded: for a refused task, how this worker would load it when it has not (None
            when it has): the refusal then says so (``cron_bridge.storable.refusal``). It
            must not import or call anything.

    Returns:
        The schedule's job and what the guard made of the delivery.

    Raises:
        RefusedTask: the schedule is gone, not of this library, not valid, or names a task
            that is not storable or that this worker does not have; recorded ``failed``.
        InvalidMessage: the message itself is malformed; nothing is recorded.
        StoreUnavailable: as for ``run_delivery``.
    """
    if not isinstance(schedule, str) or not NAME_PATTERN.fullmatch(schedule):
        raise InvalidMessage(f"{library} stored schedule: the name {schedule!r:.200} is not one")
    spec = StoredSchedules(worker_store()).get(schedule)
    if spec is None or spec.library != library:
        raise _refuse(schedule, meta, f"no stored {library} schedule of this name (removed?)")
    try:  # a spec written past the checks where schedules are added: nothing resolved yet
        job = spec.job(worker=True)
    except ConfigError as exc:
        raise _refuse(schedule, meta, f"the stored schedule is not valid: {exc}"[:500]) from None
    why = refusal(library, spec.task, unloaded=unloaded)
    target: Callable[..., Any] | None = None
    if why is None:
        try:
            target = resolve(spec.task)
        except LookupError as exc:
            why = str(exc)[:500]
    if why is not None or target is None:
        raise _refuse(schedule, meta, why or "no task")
    body = getattr(target, HANDLER_ATTR, None)
    args, kwargs = list(spec.args), dict(spec.kwargs)
    run: Callable[..., Any] = target

    def call(ctx: Any) -> Any:
        return body(ctx, *args, **kwargs) if body is not None else run(*args, **kwargs)

    return job, run_delivery(job, meta, attempt=attempt(job), call=call)


def _refuse(schedule: str, meta: Mapping[str, Any] | None, why: str) -> RefusedTask:
    """Record the refusal for the occurrence the message names (when it names one of this
    schedule), log it, and return the error to raise."""
    error = RefusedTask(f"stored schedule {schedule!r}: {why}")
    log.error("%s; nothing was run", error)
    occurrence_id = meta.get("occurrence_id") if isinstance(meta, Mapping) else None
    try:
        occurrence = Occurrence.parse(occurrence_id)  # type: ignore[arg-type]
    except ValueError:
        return error
    if occurrence.job != schedule:
        return error
    record = RunRecord(
        job=schedule,
        occurrence_id=occurrence.id,
        outcome="failed",
        trigger="queue",
        replica=worker_replica(),
        started_at=SystemClock().now(),
        reason=REFUSED,
        error=f"RefusedTask: {why}"[:1000],
    )
    try:
        worker_recorder().write([record])
    except StoreUnavailable as exc:
        log.warning(
            "the refusal of %s is not recorded yet (kept, written when the store answers): %s",
            occurrence.id,
            exc,
        )
    return error
