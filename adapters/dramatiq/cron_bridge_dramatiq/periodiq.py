"""``cron-bridge periodiq BROKER [MODULE...]``: periodiq's ``@dramatiq.actor(periodic=cron(...))``
actors, run unchanged on any number of replicas, each occurrence claimed once.

It imports the broker and the modules as ``periodiq`` does, takes every actor with a
``periodic`` option, and reads each ``CronSpec`` as periodiq reads it: the five fields it
expanded (its ``@hourly``-style aliases and day names included) in the local time of the
process (pendulum's ``now()``: ``TZ``, else ``/etc/localtime``). The replica that wins an
occurrence sends the actor as periodiq does, ``actor.send_with_options(scheduled_at=...)``,
with ``scheduled_at`` written as periodiq writes it, so the ``PeriodiqMiddleware`` on the
workers skips a message older than its ``skip_delay`` as before; the beat does not send one
that late either (``misfire_grace`` is the middleware's ``skip_delay``).

periodiq itself is not needed here, only the actors' ``periodic`` values: a spec is read by
its expanded fields (``minute``, ``hour``, ``dom``, ``month``, ``dow``).
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import click
import dramatiq
import dramatiq.broker

from cron_bridge.adapters import (
    ConfigError,
    Cron,
    Dispatch,
    DropInSender,
    Job,
    local_zone_name,
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

__all__ = [
    "PeriodiqSender",
    "cron_expression",
    "declared",
    "declared_actors",
    "periodic_jobs",
    "periodiq",
    "periodiq_schedule",
]

log = logging.getLogger(__name__)

SOURCE = "periodiq"  # where a refused actor was declared, for listings

SENDER = "periodiq"
SKIP_DELAY = 30  # PeriodiqMiddleware's default skip_delay, in seconds


def cron_expression(spec: Any) -> str:
    """The cron expression of a periodiq ``CronSpec``, from the values periodiq expanded (a
    value periodiq can never match, such as minute 60, left out).

    periodiq reads day-of-week 0 to 7 and matches it against ISO weekdays (Sunday is 7);
    the expression here has 0 for Sunday, so ``0``, ``7`` and ``sun`` all fire on Sundays.

    Raises:
        ConfigError: a field periodiq never matches.
    """
    return " ".join(
        [
            cron_field(spec.minute, 0, 59),
            cron_field(spec.hour, 0, 23),
            cron_field(spec.dom, 1, 31),
            cron_field(spec.month, 1, 12),
            cron_field({value % 7 for value in spec.dow if 0 <= value <= 7}, 0, 6),
        ]
    )


def periodiq_schedule(spec: Any, zone: str) -> Cron:
    """The schedule of a periodiq ``CronSpec`` in ``zone``, as periodiq's ``validate`` reads
    it: a day matches either day field only when periodiq calls both restricted (fewer than
    31 days of the month, fewer than 7 weekday values), else both.

    Raises:
        ConfigError: a field periodiq never matches, or a spec that never fires (``0 0 30 2 *``).
    """
    day_or = bool(spec.is_dom_restricted and spec.is_dow_restricted)
    return Cron(cron_expression(spec), tz=zone, day_or=day_or)


def skip_delay(broker: Any) -> int:
    """The ``skip_delay`` of the broker's ``PeriodiqMiddleware`` (30 s when it has none)."""
    for middleware in broker.middleware:
        if type(middleware).__name__ == "PeriodiqMiddleware":
            return int(getattr(middleware, "skip_delay", SKIP_DELAY))
    return SKIP_DELAY


def periodic_actors(broker: Any) -> list[Any]:
    """The broker's actors with a ``periodic`` option, in the order periodiq lists them."""
    return [actor for actor in broker.actors.values() if "periodic" in actor.options]


def periodic_jobs(
    actors: Sequence[Any], zone: str, grace: int
) -> tuple[dict[str, tuple[Job, Any]], dict[str, ConfigError]]:
    """The cluster job of each periodic actor, named after the actor (a name that is no job
    name, ``nightly report``, mapped by ``name_for``, the same on every replica), and apart
    the actors that cannot run (a spec that never fires, such as ``0 0 30 2 *``), each
    refused alone: periodiq keeps sending the other actors then, and so does the beat.

    Returns:
        The jobs with their actors, by job name, and each refused actor's error (naming the
        actor, the option and the value), by actor name.
    """
    found: dict[str, tuple[Job, Any]] = {}
    refused: dict[str, ConfigError] = {}
    for actor in actors:
        shown = actor.actor_name
        spec = actor.options["periodic"]
        name = name_for(shown, fallback=SENDER)
        try:
            if name in found:  # an actor named as another's mapped name: never by chance
                raise ConfigError(
                    "its job name is another actor's", job=shown, option="name", value=name
                )
            try:
                schedule = periodiq_schedule(spec, zone)
            except (ConfigError, AttributeError, TypeError) as exc:
                reason = exc.reason if isinstance(exc, ConfigError) else "not a periodiq cron(...)"
                raise ConfigError(reason, job=shown, option="periodic", value=str(spec)) from None
            job = Job(
                name=name,
                schedule=schedule,
                adapter=SENDER,
                task=shown,
                queue=actor.queue_name,
                misfire_grace=timedelta(seconds=grace),
            )
        except ConfigError as exc:  # the others are still sent
            refused[shown] = ConfigError(exc.reason, job=shown, option=exc.option, value=exc.value)
            continue
        if name != shown:
            log.info("periodiq actor %r runs as job %s", shown, name)
        found[name] = (job, actor)
    return found, refused


def scheduled_at(dispatch: Dispatch, zone: str) -> str:
    """The ``scheduled_at`` option as periodiq writes it: ``str()`` of a pendulum time in
    the local zone (ISO 8601 with a space), which its middleware parses back."""
    at = dispatch.occurrence.scheduled_at.astimezone(_zone(zone))
    return at.isoformat(" ")


def _zone(name: str) -> Any:
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


class PeriodiqSender(DropInSender, name=SENDER, what="periodiq's periodic= actors"):
    """Sends periodic actors as periodiq does."""

    def __init__(self, actors: dict[str, Any], zone: str) -> None:
        self.actors = actors
        self.zone = zone

    @override
    def enqueue_many(self, dispatches: Sequence[Dispatch]) -> list[Exception | None]:
        results: list[Exception | None] = []
        for dispatch in dispatches:
            actor = self.actors.get(dispatch.job.name)
            if actor is None:
                results.append(KeyError(f"no periodic actor {dispatch.job.name!r}"))
                continue
            try:
                log.info("Scheduling %s at %s.", actor, scheduled_at(dispatch, self.zone))
                actor.send_with_options(scheduled_at=scheduled_at(dispatch, self.zone))
            except Exception as exc:  # noqa: BLE001 - the broker's error is the outcome
                results.append(exc)
                continue
            results.append(None)
        return results


def declared_actors() -> list[Any]:
    """The periodic actors of the broker imported modules set, if any (``get_broker()``
    would make one where none is)."""
    broker = getattr(dramatiq.broker, "global_broker", None)
    return periodic_actors(broker) if broker is not None else []


def declared(modules: Sequence[Any]) -> list[Job]:
    """The periodic actors of the current broker once ``modules`` are imported (``cron-bridge
    list -A`` and the beat's start), as ``cron-bridge periodiq`` would run them."""
    del modules  # the actors are on the broker the modules declared them on
    actors = declared_actors()
    if not actors:
        return []
    broker = dramatiq.get_broker()
    try:
        zone = local_zone_name(why="periodiq")
    except ConfigError as exc:
        log.warning("the periodiq actors cannot be listed: %s", exc)
        return []
    jobs, refused = periodic_jobs(actors, zone, skip_delay(broker))
    for name, error in refused.items():  # listed as refused by `list`, /healthz, the dashboard
        refuse(name, SOURCE, str(error))
    return [job for job, _ in jobs.values()]


@click.command("periodiq")
@click.argument("broker")
@click.argument("modules", nargs=-1)
@click.option(
    "--path",
    "-P",
    "paths",
    multiple=True,
    default=["."],
    show_default=True,
    help="The module import path; repeat it for several.",
)
@click.option("--verbose", "-v", count=True, help="Turn on verbose log output.")
@beat_options
def periodiq(
    broker: str, modules: tuple[str, ...], paths: tuple[str, ...], verbose: int, **options: Any
) -> None:
    """Run periodiq's periodic actors (BROKER is 'module' or 'module:a_broker', then the
    modules to import) on any number of replicas: each occurrence is claimed once in the
    store and sent by one replica, as periodiq sends it.

    Takes what `periodiq` takes (BROKER, MODULE..., -P/--path, -v) and the options of
    `cron-bridge beat`.
    """
    logging.getLogger().setLevel(logging.DEBUG if verbose else logging.INFO)
    with one_line_errors():
        for path in paths:
            sys.path.insert(0, path)
        from dramatiq.cli import import_broker

        try:
            _, found = import_broker(broker)  # type: ignore[no-untyped-call]
            for module in modules:
                importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - the user's modules, said in one line
            raise ConfigError(
                f"{type(exc).__name__}: {exc}", option="BROKER", value=broker
            ) from None
        actors = periodic_actors(found)
        if not actors:
            raise ConfigError(
                "No periodic actor to schedule.",
                option="MODULE",
                value=" ".join((broker, *modules)),
            )
        zone = local_zone_name(why="periodiq")
        jobs, refused = periodic_jobs(actors, zone, skip_delay(found))
        _print_periodic_actors(actors, zone, refused)
        for name, error in refused.items():  # logged at ERROR once; the others are sent
            refuse(name, SOURCE, str(error))
        if not jobs:
            raise ConfigError(
                "No periodic actor can be scheduled.", option="periodic", value=", ".join(refused)
            )
        register(PeriodiqSender({name: actor for name, (_, actor) in jobs.items()}, zone))
    run_beat(lambda: [job for job, _ in jobs.values()], options)


def _print_periodic_actors(
    actors: Sequence[Any], zone: str, refused: dict[str, ConfigError]
) -> None:
    """periodiq's own table of the actors it schedules, a refused one marked so."""
    log.info("Registered periodic actors (cron fields in %s):", zone)
    log.info("")
    log.info("    %-24s module:actor@queue", "m h dom mon dow")
    log.info("    %-24s ------------------", "-" * 24)
    for actor in actors:
        mark = " (refused: see below)" if actor.actor_name in refused else ""
        log.info(
            "    %-24s %s:%s@%s%s",
            str(actor.options["periodic"]),
            actor.fn.__module__,
            actor.actor_name,
            actor.queue_name,
            mark,
        )
    log.info("")
