"""Sending a ``beat_schedule`` entry exactly as ``celery beat`` sends it.

``celery.beat.Scheduler.apply_async`` calls the registered task's own ``apply_async`` (which
applies the task's queue, routing, ``expires``, priority and serializer), or ``send_task`` by
name for a task this process does not know, with every option of the entry and, from Celery
5.7 on, a ``celery_beat_task`` header. This does the same, on one producer per batch, and adds
only the ``cron_bridge`` header that carries the occurrence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import celery
from celery import Celery
from celery.beat import BeatLazyFunc, ScheduleEntry
from packaging.version import Version

from cron_bridge.adapters import META_KEY, Dispatch, Sender

__all__ = ["SENDER", "BeatScheduleSender", "beat_headers"]

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


class BeatScheduleSender(Sender):
    """The adapter that sends ``beat_schedule`` entries: task, args, kwargs and options."""

    name = SENDER
    what = "beat_schedule entries"

    def __init__(self, app: Celery, entries: Mapping[str, ScheduleEntry]) -> None:
        self.app = app
        self.entries = dict(entries)

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
        options = dict(entry.options or {})
        options["headers"] = beat_headers(options, dispatch)
        # Publish retries as the app configures them (task_publish_retry, its policy), as
        # under celery beat: the beat does not send a failed entry again, its task meeting no
        # guard on the worker that would refuse a second copy.
        args = [_evaluate(value) for value in entry.args or ()]
        kwargs = {key: _evaluate(value) for key, value in (entry.kwargs or {}).items()}
        try:
            task = self.app.tasks.get(entry.task)
            if task is not None:
                task.apply_async(args, kwargs, producer=producer, **options)
            else:
                self.app.send_task(entry.task, args, kwargs, producer=producer, **options)
        except Exception as exc:  # noqa: BLE001 - the broker's error is the occurrence's outcome
            return exc
        return None
