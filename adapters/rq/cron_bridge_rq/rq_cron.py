"""``cron-bridge rq-cron CONFIG``: an ``rq cron`` config file, run unchanged on any number of
replicas, each registration's occurrence claimed once.

The config is loaded by RQ's own loader (``CronScheduler.load_config_from_file``: a dotted
path, or a relative or absolute file), so it finds what ``rq cron`` finds. Each registration
becomes a cluster job; the replica that wins an occurrence sends it through the
registration's own ``CronJob.enqueue``, which applies every job option and keeps RQ's own
bookkeeping (the cron job's history and registry where the installed RQ has them), with two
additions: a job id made from the occurrence, and ``unique=True``, so that a send again after
a lost answer is refused by RQ instead of landing twice.

What differs from ``rq cron`` on purpose (docs/migrating.md has the table): interval
registrations fire on multiples of the interval since the epoch, shared by the replicas,
instead of at each process's start and every interval after it; the job id is the
occurrence's; occurrences missed while no replica ran are not sent late (``misfire_grace``).
"""

from __future__ import annotations

import copy
import logging
import logging.config
import threading
import time
from collections.abc import Sequence
from importlib.metadata import version
from typing import Any

import click
import rq.cron
from redis import Redis
from rq.cli.helpers import pass_cli_config, read_config_file
from rq.cron import CronJob, CronScheduler
from rq.exceptions import DuplicateJobError

from cron_bridge.adapters import (
    NAME_PATTERN,
    ConfigError,
    Cron,
    Dispatch,
    Every,
    Job,
    Sender,
    beat_options,
    local_zone_name,
    one_line_errors,
    redact_url,
    register,
    run_beat,
)
from cron_bridge_rq.ids import rq_job_id

__all__ = ["RQCronSender", "jobs_of", "rq_cron", "rq_cron_zone"]

log = logging.getLogger(__name__)

SENDER = "rq-cron"
_RQ_MAJOR = int(version("rq").split(".")[0])


def rq_cron_zone() -> str:
    """The zone ``rq cron`` reads cron fields in: UTC before RQ 3, the local time of its
    process from RQ 3 on (``TZ``, else the machine's ``/etc/localtime``).

    Raises:
        ConfigError: the local zone has no name this process can tell (set ``TZ``).
    """
    return "UTC" if _RQ_MAJOR < 3 else local_zone_name(why="rq cron")


def _job_name(registration: CronJob, taken: set[str]) -> str:
    """The registration's name (its function's dotted path unless named), made unique in the
    config's order: a function registered twice (other args, another schedule) is ``-2``."""
    base = str(getattr(registration, "name", "") or registration.func_name)
    if not NAME_PATTERN.fullmatch(base):
        raise ConfigError("expected a name of letters, digits, '.', '_' and '-'",
                          job=base, option="name", value=base)  # fmt: skip
    name, count = base, 1
    while name in taken:
        count += 1
        name = f"{base}-{count}"
    taken.add(name)
    return name


def jobs_of(registrations: Sequence[CronJob], zone: str) -> dict[str, tuple[Job, CronJob]]:
    """The cluster job of each registration, by job name.

    Raises:
        ConfigError: naming the registration, the option and the value.
    """
    found: dict[str, tuple[Job, CronJob]] = {}
    taken: set[str] = set()
    for registration in registrations:
        name = _job_name(registration, taken)
        try:
            if registration.cron:
                schedule: Any = Cron(registration.cron, tz=zone)
            else:
                schedule = Every(float(registration.interval or 0))
        except ConfigError as exc:  # named as register() names it
            option, value = ("cron", registration.cron) if registration.cron else (
                "interval", registration.interval)  # fmt: skip
            raise ConfigError(exc.reason, job=name, option=option, value=value) from None
        job = Job(name=name, schedule=schedule, adapter=SENDER, task=registration.func_name,
                  queue=registration.queue_name)  # fmt: skip
        found[name] = (job, registration)
    return found


def registered_jobs() -> list[Job]:
    """The jobs of the ``rq.cron.register(...)`` calls this process has made and no
    scheduler has taken yet (a config imported with ``cron-bridge list -A``); for listings, so
    one that cannot be read is left out with a warning."""
    pending = list(getattr(rq.cron, "_job_data_registry", None) or [])
    registrations = []
    for data in pending:
        try:
            registrations.append(CronJob(**data))
        except Exception as exc:  # noqa: BLE001 - rq cron would refuse it too
            log.warning("an rq cron registration cannot be listed: %s", exc)
    try:
        return [job for job, _ in jobs_of(registrations, rq_cron_zone()).values()]
    except ConfigError as exc:
        log.warning("the rq cron registrations cannot be listed: %s", exc)
        return []


class _Loading(CronScheduler):
    """RQ's scheduler, for its config loader only: keeps the registrations it refuses."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refused: list[tuple[str, Exception]] = []

    def register(self, *args: Any, **kwargs: Any) -> CronJob:
        try:
            return super().register(*args, **kwargs)
        except Exception as exc:
            func = kwargs.get("func", args[0] if args else None)
            shown = (
                kwargs.get("name")
                or f"{getattr(func, '__module__', '?')}.{getattr(func, '__name__', '?')}"
            )
            self.refused.append((str(shown), exc))
            raise


class _NoTraceback(logging.Filter):
    """Keeps a record's message, drops its traceback: a bad config is said in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info = None
        record.exc_text = None
        return True


class RQCronSender(Sender):
    """Sends the registrations of an ``rq cron`` config, each through its own ``CronJob``."""

    name = SENDER
    what = "rq cron registrations"
    refuses_copies = True  # every send is unique=True with the occurrence's job id

    def __init__(self, connection: Redis, registrations: dict[str, CronJob]) -> None:
        self.connection = connection
        self.registrations = registrations
        self.sent = threading.Event()  # set after each batch: the registry is saved then

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
        once.job_options = {**registration.job_options, "job_id": rq_job_id(dispatch.occurrence),
                            "unique": True}  # fmt: skip
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
@click.argument("config_path")
@beat_options
@pass_cli_config  # type: ignore[untyped-decorator]
def rq_cron(cli_config: Any, logging_level: str, config_path: str, **options: Any) -> None:
    """Run an `rq cron` config (a dotted path or a file) on any number of replicas: each
    registration's occurrence is claimed once in the store and enqueued by one replica.

    Takes what `rq cron` takes (-u/--url, -c/--config, -P/--path, -l/--logging-level) and the
    options of `cron-bridge beat`.
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
            raise ConfigError(f"cannot reach RQ's Redis at {where}: {exc}", option="--url",
                              value=redact_url(cli_config.url or "")) from None  # fmt: skip
        scheduler = _Loading(connection=connection, logging_level=logging_level.upper())
        quiet = _NoTraceback()  # RQ's loader logs a refused registration with its traceback
        scheduler.log.addFilter(quiet)
        try:
            scheduler.load_config_from_file(config_path)
        except Exception as exc:  # noqa: BLE001 - the user's config, said in one line
            raise ConfigError(str(exc), option="CONFIG", value=config_path) from None
        finally:
            scheduler.log.removeFilter(quiet)
        if scheduler.refused:
            # rq cron logs these and runs without them; a job that silently never runs is
            # worse than a beat that does not start.
            name, error = scheduler.refused[0]
            raise ConfigError(f"rq.cron.register refused it: {error}", job=name,
                              option="CONFIG", value=config_path)  # fmt: skip
        jobs = jobs_of(scheduler.get_jobs(), zone)
        if not jobs:
            log.warning("%s registers no job with rq.cron.register(...)", config_path)
        sender = RQCronSender(connection, {name: reg for name, (_, reg) in jobs.items()})
        register(sender)
        log.info("rq cron config %s: %d registration(s), cron fields in %s", config_path,
                 len(jobs), zone)  # fmt: skip
    with Registered(scheduler, sender):
        run_beat(lambda: [job for job, _ in jobs.values()], options)
