"""django-celery-beat's ``PeriodicTask`` rows as cluster jobs.

Each enabled row becomes a job named after the row (``job_name``, as for ``beat_schedule``
keys) and the ``ModelEntry`` that ``DatabaseScheduler`` would send for it, so the message is
the one django-celery-beat sends: task, args, kwargs, queue, exchange, routing key, priority,
headers (with ``periodic_task_name``) and ``expires``.

The schedules, each with a time every replica computes alike from the row:

- ``interval``: every period, counted from ``start_time`` when the row has one, else from the
  Unix epoch (``DatabaseScheduler`` counts from the last run, which each replica would see
  differently).
- ``crontab``: Celery's crontab semantics in the row's own ``timezone``
  (``DJANGO_CELERY_BEAT_TZ_AWARE = False``: the app's zone).
- ``solar``: the event Celery computes, as for ``beat_schedule``.
- ``clocked``, and any row with ``one_off``: one occurrence: the clocked time, or the first
  time of the schedule, but never before the row's last edit (``date_changed``), so a row
  saved for "now" (or in the past) runs once at once. It runs late rather than never
  (``misfire="run-once"``) and the replica that sent it disables the row.
- ``start_time`` and ``expires`` bound the occurrences; ``expire_seconds`` and ``expires``
  also go in the message, as django-celery-beat puts them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from celery import Celery
from celery.schedules import crontab, solar

from cron_bridge.adapters import EPOCH, NEVER, At, ConfigError, Every, Job, Schedule, Window
from cron_bridge_celery.scheduler import job_name
from cron_bridge_celery.schedules import SolarSchedule, crontab_in
from cron_bridge_celery.sender import SENDER

__all__ = ["BadRow", "Row", "row_job"]

_KINDS = ("interval", "crontab", "solar", "clocked")
_ONE_MS = timedelta(milliseconds=1)


class BadRow(Exception):
    """A row that cannot be scheduled: why, for the log line that names the row."""


@dataclass(frozen=True, slots=True)
class Row:
    """One enabled row: its job, what is sent for it, and where its bookkeeping goes."""

    pk: int
    name: str
    job: Job
    entry: Any  # django_celery_beat.schedulers.ModelEntry
    one_off: bool
    since: datetime | None  # a one-off is armed from here: a time already past runs at once


def row_job(task: Any, app: Celery, *, tz_aware: bool = True) -> Row | None:
    """The job for one enabled ``PeriodicTask``; None when it has nothing left to run (its
    ``expires`` has passed, its one-off time is after it).

    Raises:
        BadRow: the task is unknown, the args, kwargs or headers are not JSON of the right
            shape, or the schedule is missing, several, or one Celery cannot run.
    """
    if not task.task or task.task not in app.tasks:
        raise BadRow(f"task {task.task!r} is not registered with the app")
    _json(task.args, "args", list, "[]")
    _json(task.kwargs, "kwargs", dict, "{}")
    _json(task.headers, "headers", dict, "{}")
    start = _aware(task.start_time)
    end = _aware(task.expires)
    try:
        schedule: Schedule = _schedule(task, app, tz_aware=tz_aware)
        if start is not None or end is not None:
            schedule = Window(schedule, start=start, end=end)
    except ConfigError as exc:
        raise BadRow(f"{exc.option or 'schedule'}={exc.value!r}: {exc.reason}") from None
    name = job_name(task.name)
    one_off = bool(task.one_off or task.clocked_id)
    since = None
    options: dict[str, Any] = {}
    if one_off:
        edited = _aware(task.date_changed) or datetime.now(UTC)
        if isinstance(schedule, At):  # clocked: its time, or at once when that has passed
            when = max(schedule.when, edited)
        elif isinstance(schedule, Window) and isinstance(schedule.inner, At):
            when = max(schedule.inner.when, edited, start or edited)
        else:
            when = schedule.next_after(edited - _ONE_MS)
        if when == NEVER or (end is not None and when > end):
            return None
        schedule = At(when)
        since = when - _ONE_MS
        options["misfire"] = "run-once"
    elif schedule.next_after(datetime.now(UTC)) == NEVER:
        return None
    from django_celery_beat.schedulers import ModelEntry

    job = Job(name=name, schedule=schedule, adapter=SENDER, task=task.task, **options)
    return Row(
        pk=task.pk,
        name=task.name,
        job=job,
        entry=ModelEntry(task, app=app),
        one_off=one_off,
        since=since,
    )


def _schedule(task: Any, app: Celery, *, tz_aware: bool) -> Schedule:
    kinds = [kind for kind in _KINDS if getattr(task, f"{kind}_id", None) is not None]
    if not kinds:
        raise BadRow("no schedule: one of interval, crontab, solar or clocked must be set")
    if len(kinds) > 1:
        raise BadRow(f"several schedules ({', '.join(kinds)}): exactly one must be set")
    kind = kinds[0]
    model = getattr(task, kind, None)
    if model is None:
        raise BadRow(f"its {kind} schedule row is gone")
    if kind == "interval":
        try:
            every = timedelta(**{model.period: model.every})
        except (TypeError, OverflowError):
            raise BadRow(f"interval {model.every!r} {model.period!r} is not a period") from None
        return _every(every, _aware(task.start_time))
    if kind == "crontab":
        try:
            value = crontab(
                minute=model.minute,
                hour=model.hour,
                day_of_week=model.day_of_week,
                day_of_month=model.day_of_month,
                month_of_year=model.month_of_year,
            )
        except (ValueError, TypeError) as exc:
            raise BadRow(f"crontab {model}: {exc}") from None
        zone: tzinfo | str | None = str(model.timezone) if tz_aware else app.timezone
        return crontab_in(value, zone)
    if kind == "solar":
        try:
            return SolarSchedule(solar(model.event, model.latitude, model.longitude))
        except (ValueError, TypeError) as exc:
            raise BadRow(f"solar {model.event!r}: {exc}") from None
    clocked = _aware(model.clocked_time)
    if clocked is None:
        raise BadRow("its clocked schedule has no time")
    return At(clocked)


def _every(period: timedelta, start: datetime | None) -> Every:
    """Every ``period``, falling on ``start`` when given (then every period after it)."""
    if period <= timedelta(0):
        raise ConfigError("expected a positive period", option="interval", value=period)
    offset = timedelta(0)
    if start is not None and period >= _ONE_MS:
        offset = (start - EPOCH) % period // _ONE_MS * _ONE_MS
    return Every(period, offset=offset)


def _json(text: str | None, field: str, kind: type, empty: str) -> Any:
    try:
        value = json.loads(text or empty)
    except ValueError as exc:
        raise BadRow(f"{field} is not JSON ({exc})") from None
    if not isinstance(value, kind):
        raise BadRow(f"{field} must be a JSON {'array' if kind is list else 'object'}")
    return value


def _aware(value: datetime | None) -> datetime | None:
    """A row's time as aware UTC: naive times (``USE_TZ = False``) are in Django's zone."""
    if value is None:
        return None
    if value.tzinfo is None:
        from django.utils import timezone

        value = timezone.make_aware(value)
    return value.astimezone(UTC)
