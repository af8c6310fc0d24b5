"""Sending a ``beat_schedule`` entry exactly as ``celery beat`` sends it.

``celery.beat.Scheduler.apply_async`` calls the registered task's own ``apply_async`` (which
applies the task's queue, routing, ``expires``, priority and serializer), or ``send_task`` by
name for a task this process does not know, with every option of the entry and, from Celery
5.7 on, a ``celery_beat_task`` header. This does the same, on one producer per batch, and adds
only the ``cron_bridge`` header that carries the occurrence.

Under ``celery beat -S cron_bridge`` each send goes through ``Scheduler.apply_entry`` as
celery beat's own do, with a copy of the entry (its options its own), so that what tools
patch there (sentry-sdk's cron monitoring with ``monitor_beat_tasks=True``, APM tracing) sees
and changes what it does under stock celery beat: the entry's name, schedule and options. It
is called once per occurrence, by the replica that won it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import celery
from celery import Celery
from celery.beat import BeatLazyFunc, ScheduleEntry
from packaging.version import Version

from cron_bridge.adapters import META_KEY, Dispatch, DropInSender, override

__all__ = ["SENDER", "BeatScheduleSender", "beat_headers", "for_occurrence"]

SENDER = "celery-beat-schedule"

# celery beat marks what it sends from this version on (celery.beat.Scheduler.apply_async).
_MARKS_BEAT_TASKS = Version(celery.__version__).release >= (5, 7)


def beat_headers(options: Mapping[str, Any], dispatch: Dispatch) -> dict[str, Any]:
    """The entry's own headers, celery beat's mark, and the occurrence."""
    headers = dict(options.get("headers") or {})
    if _MARKS_BEAT_TASKS:
        headers["celery_beat_task"] = True
    headers[META_KEY] = dispatch.meta()
    return headers


def _evaluate(value: Any) -> Any:
    return value() if isinstance(value, BeatLazyFunc) else value


class BeatScheduleSender(DropInSender, name=SENDER, what="beat_schedule entries"):
    """The adapter that sends ``beat_schedule`` entries: task, args, kwargs and options."""

    def __init__(self, app: Celery, entries: Mapping[str, ScheduleEntry]) -> None:
        self.app = app
        self.entries = dict(entries)
        # The celery beat scheduler whose apply_entry each send goes through (set by it).
        self.scheduler: Any = None
        self._sent = threading.local()  # what publish() met: apply_entry swallows errors

    @override
    def enqueue_many(self, dispatches: Sequence[Dispatch]) -> list[Exception | None]:
        try:
            with self.app.connection_for_write() as connection:
                connection.ensure_connection(max_retries=1, interval_start=0, interval_step=0)
                with self.app.amqp.Producer(connection) as producer:
                    return [self._send(producer, dispatch) for dispatch in dispatches]
        except Exception as exc:  # noqa: BLE001 - no connection: every send failed
            return [exc] * len(dispatches)

    def _send(self, producer: Any, dispatch: Dispatch) -> Exception | None:
        entry = self.entries.get(dispatch.job.name)
        if entry is None:  # removed (a deleted row) between the claim and the send
            return KeyError(f"no entry {dispatch.job.name!r} any more")
        sending = for_occurrence(entry, dispatch)
        self._sent.error = _NOT_SENT
        try:
            if self.scheduler is None:
                self.publish(sending, producer)
            else:  # apply_entry calls the scheduler's apply_async, which calls publish
                self.scheduler.apply_entry(sending, producer=producer)
        except Exception as exc:  # noqa: BLE001 - the broker's error is the occurrence's outcome
            return exc
        error = self._sent.error
        if error is _NOT_SENT:
            return RuntimeError(f"Scheduler.apply_entry did not send {entry.name!r}")
        return error  # type: ignore[no-any-return]

    def publish(self, entry: ScheduleEntry, producer: Any) -> Any:
        """Send one occurrence's copy of ``entry`` as celery beat's ``apply_async`` does, and
        keep what it met for the send that asked (raising it too, as celery beat's does)."""
        args = [_evaluate(value) for value in entry.args or ()]
        kwargs = {key: _evaluate(value) for key, value in (entry.kwargs or {}).items()}
        # Publish retries as the app configures them (task_publish_retry, its policy), as
        # under celery beat: the beat does not send a failed entry again, its task meeting no
        # guard on the worker that would refuse a second copy.
        try:
            task = self.app.tasks.get(entry.task)
            if task is not None:
                result = task.apply_async(args, kwargs, producer=producer, **entry.options)
            else:
                result = self.app.send_task(
                    entry.task, args, kwargs, producer=producer, **entry.options
                )
        except Exception as exc:
            self._sent.error = exc
            raise
        self._sent.error = None
        return result


_NOT_SENT = object()


def for_occurrence(entry: ScheduleEntry, dispatch: Dispatch) -> ScheduleEntry:
    """A copy of ``entry`` for one occurrence's send, as celery beat passes its entry to
    ``apply_entry``: the same name, task, schedule, args and kwargs; options of its own, with
    the ``cron_bridge`` header (a hook may change them, as sentry-sdk adds its headers, without
    touching the next send). Copied attribute by attribute: a ``ModelEntry`` (django-celery-
    beat's) cannot be rebuilt from ``ScheduleEntry.__reduce__``."""
    copy = object.__new__(type(entry))
    copy.__dict__.update(entry.__dict__)
    options = dict(entry.options or {})
    options["headers"] = beat_headers(options, dispatch)
    copy.options = options
    return copy
