"""``cron-bridge dramatiq-crontab``: dramatiq-crontab's ``@cron(...)`` and ``@interval(...)``
actors, run unchanged on any number of replicas, each occurrence claimed once (instead of one
``manage.py crontab`` behind a Redis lock while the others wait).

It sets Django up and loads the tasks as ``manage.py crontab`` does (each installed app's
``tasks`` module, and dramatiq-crontab's heartbeat unless ``--no-heartbeat``), then reads the
registrations from dramatiq-crontab's own scheduler (an APScheduler ``BlockingScheduler`` it
never starts here): each job's trigger and the actor whose ``send`` it calls. A ``CronTrigger``
becomes a cron job in the trigger's zone (Django's ``TIME_ZONE``), an ``IntervalTrigger`` an
``every`` job; the replica that wins an occurrence calls ``actor.send()``, as APScheduler does.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

import click
import dramatiq

from cron_bridge.adapters import (
    NAME_PATTERN,
    ConfigError,
    Cron,
    Dispatch,
    Every,
    Job,
    Sender,
    beat_options,
    one_line_errors,
    register,
    run_beat,
)

__all__ = ["CrontabSender", "crontab_jobs", "dramatiq_crontab"]

log = logging.getLogger(__name__)

SENDER = "dramatiq-crontab"
_CRON_FIELDS = ("minute", "hour", "day", "month", "day_of_week")


def _schedule(trigger: Any) -> Any:
    """The schedule of an APScheduler trigger dramatiq-crontab made."""
    kind = type(trigger).__name__
    if kind == "CronTrigger":
        fields = {field.name: str(field) for field in trigger.fields}
        if fields.get("second", "0") != "0" or fields.get("year", "*") != "*":
            raise ConfigError("only crontab-style triggers (no seconds or years) can be read")
        expr = " ".join(fields[name] for name in _CRON_FIELDS)
        return Cron(expr, tz=str(getattr(trigger.timezone, "key", trigger.timezone)))
    if kind == "IntervalTrigger":
        return Every(trigger.interval.total_seconds())
    raise ConfigError(f"a {kind} cannot be read")


def crontab_jobs(registered: Sequence[Any]) -> dict[str, tuple[Job, Any]]:
    """The cluster job of each dramatiq-crontab registration (an APScheduler job calling an
    actor's ``send``), named after the actor (``-2`` for a second one of the same actor).

    Raises:
        ConfigError: naming the registration and why it cannot be read.
    """
    found: dict[str, tuple[Job, Any]] = {}
    for entry in registered:
        actor = getattr(entry.func, "__self__", None)
        if not isinstance(actor, dramatiq.Actor) or entry.func.__name__ != "send":
            raise ConfigError("not an actor's send: dramatiq-crontab's @cron and @interval add "
                              "only those", job=str(entry.name), option="func",
                              value=repr(entry.func))  # fmt: skip
        base = actor.actor_name
        if not NAME_PATTERN.fullmatch(base):
            raise ConfigError("expected a name of letters, digits, '.', '_' and '-'",
                              job=base, option="name", value=base)  # fmt: skip
        name, count = base, 1
        while name in found:
            count += 1
            name = f"{base}-{count}"
        try:
            schedule = _schedule(entry.trigger)
        except ConfigError as exc:
            raise ConfigError(exc.reason, job=name, option="trigger",
                              value=str(entry.trigger)) from None  # fmt: skip
        job = Job(name=name, schedule=schedule, adapter=SENDER, task=actor.actor_name,
                  queue=actor.queue_name)  # fmt: skip
        found[name] = (job, actor)
    return found


class CrontabSender(Sender):
    """Sends dramatiq-crontab's actors as its scheduler does: ``actor.send()``."""

    name = SENDER
    what = "dramatiq-crontab's @cron and @interval actors"

    def __init__(self, actors: dict[str, Any]) -> None:
        self.actors = actors

    def enqueue_many(self, dispatches: Sequence[Dispatch]) -> list[Exception | None]:
        results: list[Exception | None] = []
        for dispatch in dispatches:
            actor = self.actors.get(dispatch.job.name)
            try:
                if actor is None:
                    raise KeyError(f"no registration {dispatch.job.name!r}")
                actor.send()
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
@click.option("--settings", default=None, help="The Django settings module (default: "
              "$DJANGO_SETTINGS_MODULE), as manage.py takes it.")  # fmt: skip
@click.option("--pythonpath", default=None, help="A directory to add to the import path.")
@click.option("--no-task-loading", is_flag=True, help="Don't load tasks from installed apps.")
@click.option("--no-heartbeat", is_flag=True, help="Don't start the heartbeat actor.")
@beat_options
def dramatiq_crontab(
    settings: str | None, pythonpath: str | None, no_task_loading: bool, no_heartbeat: bool,
    **options: Any,
) -> None:  # fmt: skip
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
            raise ConfigError("give --settings or set DJANGO_SETTINGS_MODULE",
                              option="--settings", value=None)  # fmt: skip
        try:
            import django

            django.setup()
            _load_tasks(heartbeat=not no_heartbeat, load=not no_task_loading)
            from dramatiq_crontab import scheduler
        except Exception as exc:  # noqa: BLE001 - the user's project, said in one line
            raise ConfigError(f"{type(exc).__name__}: {exc}", option="--settings",
                              value=os.environ["DJANGO_SETTINGS_MODULE"]) from None  # fmt: skip
        jobs = crontab_jobs(scheduler.get_jobs())
        if not jobs:
            log.warning("no actor is registered with dramatiq-crontab's @cron or @interval")
        for name, (job, _) in jobs.items():
            log.info("    %-24s %s@%s (%s)", job.schedule.describe(), name, job.queue,
                     job.schedule.tz)  # fmt: skip
        register(CrontabSender({name: actor for name, (_, actor) in jobs.items()}))
    run_beat(lambda: [job for job, _ in jobs.values()], options)
