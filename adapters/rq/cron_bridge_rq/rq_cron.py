"""``cron-bridge rq-cron CONFIG``: an ``rq cron`` config file, run unchanged on any number of
replicas, each registration's occurrence claimed once.

The config is loaded by RQ's own loader (``CronScheduler.load_config_from_file``: a dotted
path, or a relative or absolute file), so it finds what ``rq cron`` finds. Each registration
becomes a cluster job; the replica that wins an occurrence sends it through the
registration's own ``CronJob.enqueue``, which applies every job option and keeps RQ's own
bookkeeping (the cron job's history and registry where the installed RQ has them), with two
additions: a job id made from the occurrence, and ``unique=True``, so that a send again after
a lost answer is refused by RQ instead of landing twice.

It runs what ``rq cron`` runs: croniter's 6-field strings (seconds), any name (kept in RQ,
mapped to a job name), and a registration RQ refuses is refused alone, as stock refuses it
(``--strict``: the command does not start). An interval registration is anchored to the
moment the cluster first saw it, kept in the store, so it first runs at its first deploy as
stock's first start does, then every interval, on every replica alike and across restarts.

What differs from ``rq cron`` on purpose is in docs/migrating.md's table and named in
adapters/rq/tests/differential/test_rqcron.py.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import logging.config
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from typing import Any

import click
import rq.cron
from redis import Redis
from rq.cli.helpers import pass_cli_config, read_config_file
from rq.cron import CronJob, CronScheduler
from rq.exceptions import DuplicateJobError

from cron_bridge.adapters import (
    EPOCH,
    ConfigError,
    Cron,
    Dispatch,
    DropInSender,
    Every,
    Job,
    Store,
    local_zone_name,
    name_for,
    override,
    redact_url,
    refuse,
    register,
)
from cron_bridge.commands import (
    beat_options,
    one_line_errors,
    run_beat,
)
from cron_bridge_rq.ids import rq_job_id

__all__ = ["RQCronSender", "anchored", "job_name", "jobs_of", "listed", "rq_cron", "rq_cron_zone"]

log = logging.getLogger(__name__)

SENDER = "rq-cron"
DECLARED_AS = "rq cron"  # where a refused registration was declared, for listings
ANCHORS = "rq-cron-anchor"  # the store's control group of the interval anchors
_MS = timedelta(milliseconds=1)
_RQ_MAJOR = int(version("rq").split(".")[0])


def rq_cron_zone() -> str:
    """The zone ``rq cron`` reads cron fields in: UTC before RQ 3, the local time of its
    process from RQ 3 on (``TZ``, else the machine's ``/etc/localtime``).

    Raises:
        ConfigError: the local zone has no name this process can tell (set ``TZ``).
    """
    return "UTC" if _RQ_MAJOR < 3 else local_zone_name(why="rq cron")


def job_name(shown: str) -> str:
    """The cron-bridge job name of an RQ registration named ``shown`` (RQ takes any text):
    ``name_for``'s, ``rq-cron-<digest>`` when nothing of it is left."""
    return name_for(shown, fallback="rq-cron")


def _shown_name(registration: CronJob) -> str:
    """The registration's name as RQ shows it: its ``name`` (RQ 2.9 on), else the function's
    dotted path."""
    return str(getattr(registration, "name", "") or registration.func_name)


def _named(registration: CronJob) -> bool:
    """Whether the registration was given a name (RQ makes its function's path the name of
    one that was not)."""
    return getattr(registration, "name", "") not in ("", registration.func_name)


def _unique(name: str, taken: set[str]) -> str:
    """``name`` made unique in the config's order: a function registered twice (other args,
    another schedule) is ``-2``."""
    found, count = name, 1
    while found in taken:
        count += 1
        found = f"{name}-{count}"
    taken.add(found)
    return found


def _schedule(registration: CronJob, name: str, zone: str) -> Cron | Every:
    """The registration's schedule: its croniter string (5 or 6 fields) in ``zone``, else its
    interval (anchored later, by ``anchored``).

    Raises:
        ConfigError: naming the job, ``cron`` or ``interval``, and the value.
    """
    option, value = (
        ("cron", registration.cron) if registration.cron else ("interval", registration.interval)
    )
    try:
        if registration.cron:
            return Cron(registration.cron, tz=zone, seconds=True)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            # RQ takes a negative interval and then sends it in every loop, without a pause.
            raise ConfigError("expected a positive number of seconds")
        return Every(float(value))
    except ConfigError as exc:  # named as register() names it
        raise ConfigError(exc.reason, job=name, option=option, value=value) from None


def jobs_of(
    registrations: Sequence[CronJob], zone: str, *, strict: bool = True
) -> dict[str, tuple[Job, CronJob]]:
    """The cluster job of each registration, by job name; a registration that cannot be one
    is a ``ConfigError`` (``strict``) or refused alone, logged and listed
    (``cron_bridge.adapters.refuse``), as ``rq cron`` refuses what RQ refuses.

    Raises:
        ConfigError: with ``strict``, naming the registration, the option and the value.
    """
    found: dict[str, tuple[Job, CronJob]] = {}
    # A name given with name= is its registration's whatever its place in the config: the
    # functions registered twice without one take -2, -3 around them. A refused registration
    # takes no name, so fixing it later renames nothing (nor moves an interval's anchor).
    reserved = {job_name(_shown_name(r)) for r in registrations if _named(r)}
    taken: set[str] = set()
    for registration in registrations:
        shown = _shown_name(registration)
        explicit = _named(registration)
        try:
            schedule = _schedule(registration, shown, zone)
            avoid = set(taken) if explicit else taken | reserved
            name = _unique(job_name(shown), avoid)
            job = Job(
                name=name,
                schedule=schedule,
                adapter=SENDER,
                task=registration.func_name,
                queue=registration.queue_name,
            )
        except ConfigError as exc:
            if strict:
                raise
            refuse(shown, DECLARED_AS, f"{exc.option}={exc.value!r}: {exc.reason}")
            continue
        taken.add(name)
        if name != shown:
            log.info("rq cron registration %r runs as job %s", shown, name)
        found[name] = (job, registration)
    return found


def registered_jobs() -> list[Job]:
    """The jobs of the ``rq.cron.register(...)`` calls this process has made and no
    scheduler has taken yet (a config imported with ``cron-bridge list -A``), for listings: a
    registration RQ or cron-bridge refuses is refused (logged, and listed as refused)."""
    pending = list(getattr(rq.cron, "_job_data_registry", None) or [])
    registrations = []
    for data in pending:
        try:
            registrations.append(CronJob(**data))
        except Exception as exc:  # noqa: BLE001 - rq cron refuses it too
            refuse(_data_name(data), DECLARED_AS, f"RQ refuses it: {exc}")
    try:
        zone = rq_cron_zone()
    except ConfigError as exc:
        log.warning("the rq cron registrations cannot be listed: %s", exc)
        return []
    return [job for job, _ in jobs_of(registrations, zone, strict=False).values()]


def _data_name(data: dict[str, Any]) -> str:
    """A registration's name before RQ made it a ``CronJob``: its ``name``, else its
    function's dotted path."""
    func = data.get("func")
    return str(
        data.get("name") or f"{getattr(func, '__module__', '?')}.{getattr(func, '__name__', '?')}"
    )


def anchored(
    store: Store, jobs: list[Job], registrations: Mapping[str, CronJob], now: datetime
) -> tuple[list[Job], dict[str, datetime]]:
    """The jobs with each interval registration anchored to the moment the cluster first
    saw it (that registration under its name and interval): the first replica to start
    writes ``now`` to the store if no anchor is there (``add_control``: one writer wins),
    and every replica reads the one kept. The registration then fires at the anchor, then
    every interval from it; a replica that starts within the job's ``misfire_grace`` of the
    anchor arms from it (the first send, claimed once), a later start or a restart from its
    own start, so nothing is sent again. Returns the jobs and the times to arm from.

    Raises:
        StoreUnavailable: the store could not be reached.
    """
    found, since = [], {}
    for job in jobs:
        registration = registrations.get(job.name)
        if not isinstance(job.schedule, Every) or registration is None:
            found.append(job)
            continue
        interval = job.schedule.interval
        key = _anchor_key(job.name, interval)
        stamp = now.astimezone(UTC).replace(microsecond=now.microsecond // 1000 * 1000)
        store.add_control(ANCHORS, key, json.dumps({"at": stamp.isoformat()}))
        kept = store.control(ANCHORS, key)
        anchor = _read_anchor(kept)
        if anchor is None:
            log.warning("the stored anchor of %s is unreadable (%r); it starts now", job.name, kept)
            store.put_control(ANCHORS, key, json.dumps({"at": stamp.isoformat()}))
            anchor = stamp
        found.append(dataclasses.replace(job, schedule=_from(anchor, interval)))
        if timedelta(0) <= now - anchor <= job.misfire_grace:
            since[job.name] = anchor - _MS
    return found, since


def listed(store: Store | None, jobs: Sequence[Job]) -> dict[str, Job | str]:
    """What ``cron-bridge list`` shows of the interval registrations among ``jobs``: the job
    anchored where the store keeps its anchor (read, never written: a listing is no
    deploy), else that it first runs at its first deploy (no store given, or none kept)."""
    found: dict[str, Job | str] = {}
    for job in jobs:
        if job.adapter != SENDER or not isinstance(job.schedule, Every):
            continue
        interval = job.schedule.interval
        kept = store.control(ANCHORS, _anchor_key(job.name, interval)) if store else None
        anchor = _read_anchor(kept)
        found[job.name] = (
            f"at its first deploy, then {job.schedule.describe()}"
            if anchor is None
            else dataclasses.replace(job, schedule=_from(anchor, interval))
        )
    return found


def _anchor_key(name: str, interval: timedelta) -> str:
    return f"{name}:{interval // _MS}"


def _read_anchor(kept: str | None) -> datetime | None:
    """The anchor a store keeps (``{"at": ISO time}``); None when none or unreadable."""
    try:
        return datetime.fromisoformat(json.loads(kept or "")["at"]).astimezone(UTC)
    except (ValueError, KeyError, TypeError):
        return None


def _from(anchor: datetime, interval: timedelta) -> Every:
    """Every ``interval`` from ``anchor``: the epoch multiples shifted onto it."""
    return Every(interval, offset=((anchor - EPOCH) // _MS) % (interval // _MS) * _MS)


class _Loading(CronScheduler):
    """RQ's scheduler, for its config loader only: keeps the registrations it refuses."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refused: list[tuple[str, Exception]] = []

    @override
    def register(self, *args: Any, **kwargs: Any) -> CronJob:
        try:
            return super().register(*args, **kwargs)
        except Exception as exc:
            func = kwargs.get("func", args[0] if args else None)
            self.refused.append((_data_name({**kwargs, "func": func}), exc))
            raise


class _NoTraceback(logging.Filter):
    """Keeps a record's message, drops its traceback: a bad config is said in one line. RQ's
    own line for a registration it refuses is dropped: ``refuse`` says it, once, by name."""

    @override
    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("Failed to register job"):
            return False
        record.exc_info = None
        record.exc_text = None
        return True


class RQCronSender(DropInSender, name=SENDER, what="rq cron registrations", refuses_copies=True):
    """Sends the registrations of an ``rq cron`` config, each through its own ``CronJob``. RQ
    refuses a second copy (``refuses_copies``): every send is ``unique=True`` with the
    occurrence's job id."""

    def __init__(self, connection: Redis, registrations: dict[str, CronJob]) -> None:
        self.connection = connection
        self.registrations = registrations
        self.sent = threading.Event()  # set after each batch: the registry is saved then

    @override
    def enqueue_many(self, dispatches: Sequence[Dispatch]) -> list[Exception | None]:
        results = [self._send(dispatch) for dispatch in dispatches]
        self.sent.set()
        return results

    def _send(self, dispatch: Dispatch) -> Exception | None:
        registration = self.registrations.get(dispatch.job.name)
        if registration is None:
            return KeyError(f"no registration {dispatch.job.name!r}")
        # The registration's own enqueue, with the occurrence's job id: RQ refuses a second
        # job of that id (a send again after a lost answer) instead of enqueueing it twice.
        once = copy.copy(registration)
        once.job_options = {
            **registration.job_options,
            "job_id": rq_job_id(dispatch.occurrence),
            "unique": True,
        }
        try:
            once.enqueue(self.connection)
        except DuplicateJobError:
            return None  # in RQ already: sent once, not twice
        except Exception as exc:  # noqa: BLE001 - the broker's error is the outcome
            return exc
        registration.set_enqueue_time(dispatch.occurrence.scheduled_at)
        return None


class Registered:
    """This replica in RQ's own registry of cron schedulers (``rq:cron_schedulers``), as
    ``rq cron`` keeps it, so RQ's tools list it with its registrations and their last sends:
    born at start, a heartbeat every ``HEARTBEAT`` seconds, saved after sends, gone at exit."""

    HEARTBEAT = 15.0

    def __init__(self, scheduler: CronScheduler, sender: RQCronSender) -> None:
        self.scheduler = scheduler
        self.sender = sender
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True, name="cron-bridge-rq")

    def __enter__(self) -> Registered:
        try:
            self.scheduler.register_birth()
        except Exception as exc:  # noqa: BLE001 - the registry is for RQ's tools: never fatal
            log.warning("could not register in RQ's cron scheduler registry: %s", exc)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        try:
            self.scheduler.register_death()
        except Exception as exc:  # noqa: BLE001
            log.warning("could not leave RQ's cron scheduler registry: %s", exc)

    def _beat(self) -> None:
        next_heartbeat = 0.0
        while not self._stop.is_set():
            try:
                if self.sender.sent.is_set():
                    self.sender.sent.clear()
                    self.scheduler.save()
                if time.monotonic() >= next_heartbeat:
                    self.scheduler.heartbeat()
                    next_heartbeat = time.monotonic() + self.HEARTBEAT
            except Exception as exc:  # noqa: BLE001 - tried again next time
                log.debug("RQ cron scheduler registry: %s", exc)
            self._stop.wait(1.0)


@click.command("rq-cron")
@click.option(
    "--logging-level",
    "-l",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False),
    default="INFO",
    show_default=True,
    help="Set logging level.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Refuse to start when a registration is refused, instead of running the others.",
)
@click.option(
    "--interval-anchor",
    type=click.Choice(["first-seen", "epoch"]),
    default="first-seen",
    show_default=True,
    help="Interval registrations: from the moment the cluster first saw them (the first send "
    "at the first deploy), or on multiples of the interval since the Unix epoch.",
)
@click.argument("config_path")
@beat_options
@pass_cli_config  # type: ignore[untyped-decorator]
def rq_cron(
    cli_config: Any,
    logging_level: str,
    strict: bool,
    interval_anchor: str,
    config_path: str,
    **options: Any,
) -> None:
    """Run an `rq cron` config (a dotted path or a file) on any number of replicas: each
    registration's occurrence is claimed once in the store and enqueued by one replica.

    Takes what `rq cron` takes (-u/--url, -c/--config, -P/--path, -l/--logging-level) and the
    options of `cron-bridge beat`. A registration RQ refuses is logged and listed as refused
    while the others run, as `rq cron` does (--strict: the command does not start).
    """
    logging.getLogger().setLevel(logging_level.upper())
    settings = read_config_file(cli_config.config) if cli_config.config else {}  # type: ignore[no-untyped-call]
    if settings.get("DICT_CONFIG"):  # as rq cron applies the settings module's logging
        logging.config.dictConfig(settings["DICT_CONFIG"])
    with one_line_errors():
        zone = rq_cron_zone()
        connection = cli_config.connection
        try:
            connection.ping()
        except Exception as exc:  # noqa: BLE001 - said in one line, as for the store
            kwargs = connection.connection_pool.connection_kwargs
            where = f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"
            raise ConfigError(
                f"cannot reach RQ's Redis at {where}: {exc}",
                option="--url",
                value=redact_url(cli_config.url or ""),
            ) from None
        scheduler = _Loading(connection=connection, logging_level=logging_level.upper())
        quiet = _NoTraceback()  # RQ's loader logs a refused registration with its traceback
        scheduler.log.addFilter(quiet)
        try:
            scheduler.load_config_from_file(config_path)
        except Exception as exc:  # noqa: BLE001 - the user's config, said in one line
            raise ConfigError(str(exc), option="CONFIG", value=config_path) from None
        finally:
            scheduler.log.removeFilter(quiet)
        for name, error in scheduler.refused:
            # rq cron logs these and runs the others: so does this, and lists them as refused
            # (list, /healthz, the dashboard); --strict does not start instead.
            if strict:
                raise ConfigError(
                    f"rq.cron.register refused it: {error}",
                    job=name,
                    option="CONFIG",
                    value=config_path,
                )
            refuse(name, DECLARED_AS, f"RQ refuses it: {error}")
        jobs = jobs_of(scheduler.get_jobs(), zone, strict=strict)
        if not jobs:
            log.warning("%s registers no job with rq.cron.register(...)", config_path)
        sender = RQCronSender(connection, {name: reg for name, (_, reg) in jobs.items()})
        register(sender)
        log.info(
            "rq cron config %s: %d registration(s), cron fields in %s", config_path, len(jobs), zone
        )
    registrations = {name: registration for name, (_, registration) in jobs.items()}

    def arm(store: Store, loaded: list[Job]) -> tuple[list[Job], Mapping[str, datetime]]:
        return anchored(store, loaded, registrations, datetime.now(UTC))

    with Registered(scheduler, sender):
        run_beat(
            lambda: [job for job, _ in jobs.values()],
            options,
            arm=arm if interval_anchor == "first-seen" else None,
        )
