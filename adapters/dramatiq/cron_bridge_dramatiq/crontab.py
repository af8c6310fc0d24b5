"""``cron-bridge dramatiq-crontab``: dramatiq-crontab's ``@cron(...)`` and ``@interval(...)``
actors, run unchanged on any number of replicas, each occurrence claimed once (instead of one
``manage.py crontab`` behind a Redis lock while the others wait).

It sets Django up and loads the tasks as ``manage.py crontab`` does (each installed app's
``tasks`` module, and dramatiq-crontab's heartbeat unless ``--no-heartbeat``), then reads the
registrations from dramatiq-crontab's own scheduler (an APScheduler ``BlockingScheduler`` it
never starts here): each job's trigger and the actor whose ``send`` it calls. A ``CronTrigger``
becomes a cron job in the trigger's zone (Django's ``TIME_ZONE``), an ``IntervalTrigger`` an
``every`` job; the replica that wins an occurrence calls ``actor.send()``, as APScheduler does
(with the ``args`` and ``kwargs`` a registration added by hand was given). A trigger's
``start_date``, ``end_date`` and ``jitter`` are read too; what cannot be is refused alone.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import click
import dramatiq

from cron_bridge.adapters import (
    ConfigError,
    Cron,
    Dispatch,
    DropInSender,
    Every,
    Job,
    Window,
    name_for,
    override,
    refuse,
    register,
)
from cron_bridge.commands import (
    beat_options,
    one_line_errors,
    run_beat,
)
from cron_bridge_dramatiq.fields import cron_field

__all__ = ["Call", "CrontabSender", "crontab_jobs", "declared", "dramatiq_crontab", "registrations"]

log = logging.getLogger(__name__)

SENDER = "dramatiq-crontab"
MAX_JITTER_SECONDS = 86400  # the job's jitter: up to a day

# A datetime whose field ``name`` is ``value`` (Monday 3 January 2000 for weekday 0, as
# APScheduler 3 counts: Monday is 0, Sunday 6), for asking a field whether it matches it.
_PROBES: dict[str, Any] = {
    "second": lambda v: datetime(2000, 1, 1, 0, 0, v),
    "minute": lambda v: datetime(2000, 1, 1, 0, v),
    "hour": lambda v: datetime(2000, 1, 1, v),
    "day": lambda v: datetime(2000, 1, v),  # January: 31 days
    "month": lambda v: datetime(2000, v, 1),
    "day_of_week": lambda v: datetime(2000, 1, 3 + v),
}
_RANGES = {
    "second": (0, 59),
    "minute": (0, 59),
    "hour": (0, 23),
    "day": (1, 31),
    "month": (1, 12),
    "day_of_week": (0, 6),
}


def _matched(field: Any) -> set[int]:
    """The values an APScheduler field matches, asked of its own expressions (so ``0`` in a
    weekday field is Monday, a name is that day, ``mon/2`` is Monday as APScheduler reads
    it); ``last`` in the day field is left to the caller.

    Raises:
        ConfigError: an expression that depends on the month other than ``last`` (``2nd mon``).
    """
    low, high = _RANGES[field.name]
    for expression in field.expressions:
        kind = type(expression).__name__
        if kind not in (
            "AllExpression",
            "RangeExpression",
            "MonthRangeExpression",
            "WeekdayRangeExpression",
            "LastDayOfMonthExpression",
        ):
            raise ConfigError(f"a {field.name} field of {str(field)!r} cannot be read")
    probe = _PROBES[field.name]
    return {
        value
        for value in range(low, high + 1)
        for expression in field.expressions
        if type(expression).__name__ != "LastDayOfMonthExpression"
        and expression.get_next_value(probe(value), field) == value
    }


def _days(field: Any) -> str:
    """The day-of-month field, APScheduler's ``last`` written as croniter's ``L``."""
    if not any(type(e).__name__ == "LastDayOfMonthExpression" for e in field.expressions):
        return cron_field(_matched(field), 1, 31)
    dates = _matched(field)
    if not dates:
        return "L"
    written = cron_field(dates, 1, 31)
    return written if written == "*" else f"{written},L"


def _cron(trigger: Any) -> Cron:
    """The cron schedule firing when an APScheduler 3 ``CronTrigger`` does: every field must
    match, the day of month *and* the day of week (``day_or=False``: ``0 9 1-7 * mon`` is the
    first Monday), weekdays counted from Monday (0) as ``from_crontab`` reads them, ``last``
    the month's last day (croniter's ``L``), in the trigger's zone.

    Raises:
        ConfigError: seconds, years or weeks, a weekday position (``2nd mon``), or a trigger
            that never fires (``0 0 30 2 *``).
    """
    fields = {field.name: field for field in trigger.fields}
    if _matched(fields["second"]) != {0} or not all(
        str(fields[name]) == "*" for name in ("year", "week")
    ):
        raise ConfigError("only crontab-style triggers (no seconds, years or weeks) can be read")
    weekdays = {(day + 1) % 7 for day in _matched(fields["day_of_week"])}  # cron: Sunday 0
    expr = " ".join(
        [
            cron_field(_matched(fields["minute"]), 0, 59),
            cron_field(_matched(fields["hour"]), 0, 23),
            _days(fields["day"]),
            cron_field(_matched(fields["month"]), 1, 12),
            cron_field(weekdays, 0, 6),
        ]
    )
    return Cron(expr, tz=str(getattr(trigger.timezone, "key", trigger.timezone)), day_or=False)


def _schedule(trigger: Any) -> Cron | Every | Window:
    """The schedule of an APScheduler trigger, within its ``start_date`` and ``end_date`` (both
    included, as APScheduler reads them) for a ``CronTrigger``, its ``end_date`` for an
    ``IntervalTrigger``: that one's ``start_date`` is no phase the replicas share
    (dramatiq-crontab's ``@interval`` gives every trigger its process's start), so its sends
    fall on multiples of the interval since the Unix epoch.

    Raises:
        ConfigError: a trigger that cannot be read, naming the option and the value.
    """
    kind = type(trigger).__name__
    schedule: Cron | Every
    try:
        if kind == "CronTrigger":
            schedule = _cron(trigger)
            start = trigger.start_date
        elif kind == "IntervalTrigger":
            schedule, start = Every(trigger.interval.total_seconds()), None
        else:
            raise ConfigError(f"a {kind} cannot be read")
    except ConfigError as exc:
        raise ConfigError(exc.reason, option="trigger", value=str(trigger)) from None
    if start is None and trigger.end_date is None:
        return schedule
    try:
        return Window(schedule, start=start, end=trigger.end_date)
    except ConfigError as exc:  # the end before the start
        raise ConfigError(exc.reason, option="end_date", value=str(trigger.end_date)) from None


def _jitter(trigger: Any) -> timedelta:
    """The trigger's ``jitter`` as the job's: APScheduler delays each fire by a random share of
    it, the job by a share every replica draws alike from the occurrence id (up to a day).

    Raises:
        ConfigError: a jitter that is not a number of seconds from 0 to a day.
    """
    jitter = getattr(trigger, "jitter", None) or 0
    if (
        isinstance(jitter, bool)
        or not isinstance(jitter, int | float)
        or not 0 <= jitter <= MAX_JITTER_SECONDS
    ):
        raise ConfigError(
            "expected a number of seconds from 0 to 86400", option="jitter", value=jitter
        )
    return timedelta(seconds=jitter)


class Call(NamedTuple):
    """What a registration's scheduler calls: ``actor.send(*args, **kwargs)``."""

    actor: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def _call(entry: Any, actor: Any) -> Call:
    """The actor and the arguments ``add_job(args=..., kwargs=...)`` gave, which dramatiq sends
    as JSON: the replicas send the same message.

    Raises:
        ConfigError: arguments JSON cannot carry, naming them.
    """
    args, kwargs = tuple(entry.args), dict(entry.kwargs)
    for option, value in (("args", list(args)), ("kwargs", kwargs)):
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"dramatiq sends JSON ({exc})", option=option, value=repr(value)
            ) from None
    return Call(actor, args, kwargs)


def crontab_jobs(
    registered: Sequence[Any],
) -> tuple[dict[str, tuple[Job, Call]], dict[str, ConfigError]]:
    """The cluster job of each dramatiq-crontab registration (an APScheduler job calling an
    actor's ``send``), named after the actor (``-2`` for a second one of the same actor; a
    name that is no job name, ``nightly report``, mapped by ``name_for``, the same on every
    replica), and apart those that cannot run, each refused alone: the others still run.

    Returns:
        The jobs with what each sends, and each refused registration's error (naming it, the
        option and the value), both by job name.
    """
    found: dict[str, tuple[Job, Call]] = {}
    refused: dict[str, ConfigError] = {}
    for entry in registered:
        actor = getattr(entry.func, "__self__", None)
        if not isinstance(actor, dramatiq.Actor) or entry.func.__name__ != "send":
            name = name_for(str(entry.name), fallback=SENDER)
            refused[name] = ConfigError(
                "not an actor's send: dramatiq-crontab's @cron and @interval add only those",
                job=name,
                option="func",
                value=repr(entry.func),
            )
            continue
        base = name_for(actor.actor_name, fallback=SENDER)
        name, count = base, 1
        while name in found or name in refused:
            count += 1
            name = name_for(f"{base}-{count}", fallback=SENDER)  # a long base: within 200
        try:
            call = _call(entry, actor)
            job = Job(
                name=name,
                schedule=_schedule(entry.trigger),
                adapter=SENDER,
                task=actor.actor_name,
                queue=actor.queue_name,
                jitter=_jitter(entry.trigger),
                kwargs=call.kwargs,
            )
        except ConfigError as exc:  # the others still run
            refused[name] = ConfigError(exc.reason, job=name, option=exc.option, value=exc.value)
            continue
        if base != actor.actor_name:
            log.info("dramatiq-crontab actor %r runs as job %s", actor.actor_name, name)
        found[name] = (job, call)
    return found, refused


def registrations() -> list[Any]:
    """The jobs on dramatiq-crontab's scheduler; none when dramatiq-crontab was not imported
    (importing it here would need Django's settings)."""
    scheduler = getattr(sys.modules.get("dramatiq_crontab"), "scheduler", None)
    return list(scheduler.get_jobs()) if scheduler is not None else []


def declared() -> list[Job]:
    """dramatiq-crontab's registrations once the modules holding them are imported
    (``cron-bridge list -A``, the beat's start), as ``cron-bridge dramatiq-crontab`` would run
    them; none when dramatiq-crontab was not imported."""
    jobs, refused = crontab_jobs(registrations())
    for name, error in refused.items():  # listed as refused by `list`, /healthz, the dashboard
        refuse(name, SENDER, str(error))
    return [job for job, _ in jobs.values()]


class CrontabSender(
    DropInSender, name=SENDER, what="dramatiq-crontab's @cron and @interval actors"
):
    """Sends dramatiq-crontab's actors as its scheduler does: ``actor.send(*args, **kwargs)``
    (none for ``@cron`` and ``@interval``; those ``add_job`` was given for one added by hand)."""

    def __init__(self, calls: dict[str, Call]) -> None:
        self.calls = calls

    @override
    def enqueue_many(self, dispatches: Sequence[Dispatch]) -> list[Exception | None]:
        results: list[Exception | None] = []
        for dispatch in dispatches:
            call = self.calls.get(dispatch.job.name)
            try:
                if call is None:
                    raise KeyError(f"no registration {dispatch.job.name!r}")
                call.actor.send(*call.args, **call.kwargs)
            except Exception as exc:  # noqa: BLE001 - the broker's error is the outcome
                results.append(exc)
                continue
            results.append(None)
        return results


def _load_tasks(heartbeat: bool, load: bool) -> None:
    """What ``manage.py crontab`` imports: each ready app's ``tasks`` module, then
    dramatiq-crontab's heartbeat actor."""
    from django.apps import apps

    if load:
        for app in apps.get_app_configs():
            if app.name == "dramatiq_crontab" or not app.ready:
                continue
            try:
                importlib.import_module(f"{app.name}.tasks")
            except ImportError:
                continue
            log.info("Loaded tasks from %s.", app.name)
    if heartbeat:
        importlib.import_module("dramatiq_crontab.tasks")
        log.info("Scheduling heartbeat.")


@click.command("dramatiq-crontab")
@click.option(
    "--settings",
    default=None,
    help="The Django settings module (default: $DJANGO_SETTINGS_MODULE), as manage.py takes it.",
)
@click.option("--pythonpath", default=None, help="A directory to add to the import path.")
@click.option("--no-task-loading", is_flag=True, help="Don't load tasks from installed apps.")
@click.option("--no-heartbeat", is_flag=True, help="Don't start the heartbeat actor.")
@beat_options
def dramatiq_crontab(
    settings: str | None,
    pythonpath: str | None,
    no_task_loading: bool,
    no_heartbeat: bool,
    **options: Any,
) -> None:
    """Run dramatiq-crontab's @cron and @interval actors (what `manage.py crontab` runs) on any
    number of replicas: each occurrence is claimed once in the store and sent by one replica.

    Takes what `manage.py crontab` takes and the options of `cron-bridge beat`.
    """
    with one_line_errors():
        if pythonpath:
            sys.path.insert(0, pythonpath)
        if settings:
            os.environ["DJANGO_SETTINGS_MODULE"] = settings
        if not os.environ.get("DJANGO_SETTINGS_MODULE"):
            raise ConfigError(
                "give --settings or set DJANGO_SETTINGS_MODULE", option="--settings", value=None
            )
        try:
            import django

            django.setup()
            _load_tasks(heartbeat=not no_heartbeat, load=not no_task_loading)
            from dramatiq_crontab import scheduler
        except Exception as exc:  # noqa: BLE001 - the user's project, said in one line
            raise ConfigError(
                f"{type(exc).__name__}: {exc}",
                option="--settings",
                value=os.environ["DJANGO_SETTINGS_MODULE"],
            ) from None
        jobs, refused = crontab_jobs(scheduler.get_jobs())
        for name, error in refused.items():  # logged at ERROR once; the others are sent
            refuse(name, SENDER, str(error))
        if not jobs:
            log.warning("no actor is registered with dramatiq-crontab's @cron or @interval")
        for name, (job, _) in jobs.items():
            log.info(
                "    %-24s %s@%s (%s)", job.schedule.describe(), name, job.queue, job.schedule.tz
            )
        register(CrontabSender({name: call for name, (_, call) in jobs.items()}))
    run_beat(lambda: [job for job, _ in jobs.values()], options)
