"""``celery beat -S cron_bridge``: an existing ``beat_schedule``, sent once per occurrence.

Every entry of ``app.conf.beat_schedule`` (and of ``add_periodic_task``) becomes a cluster job
named after the entry; every ``@cluster_task`` task of the app is scheduled too. Each tick
claims all due occurrences in one batch in the shared store, and only the replica that won an
occurrence sends it, so any number of unmodified beat replicas send each occurrence once.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, tzinfo
from types import ModuleType
from typing import Any, NoReturn

from celery import Celery
from celery.beat import ScheduleEntry, Scheduler

from cron_bridge.adapters import (
    NAME_PATTERN,
    Beat,
    ConfigError,
    Job,
    StoreUnavailable,
    default_registry,
    redact_url,
    register,
    store_from_url,
)
from cron_bridge.commands import HostedEndpoints, HostedOptions
from cron_bridge_celery import worker_check
from cron_bridge_celery.schedules import to_schedule
from cron_bridge_celery.sender import SENDER, BeatScheduleSender

__all__ = ["ClusterScheduler", "beat_schedule_jobs", "entry_job", "job_name"]

log = logging.getLogger(__name__)

_INVALID = re.compile(r"[^A-Za-z0-9._-]+")


def job_name(entry: str) -> str:
    """A job name for a ``beat_schedule`` key: the key itself when it is a valid name, else
    the key with other characters replaced and a short digest, so two keys never collide."""
    if NAME_PATTERN.fullmatch(entry):
        return entry
    digest = hashlib.sha1(entry.encode(), usedforsecurity=False).hexdigest()[:6]
    cleaned = _INVALID.sub("-", entry).strip("-._")[:180] or "entry"
    return f"{cleaned}-{digest}"


def entry_job(name: str, entry: ScheduleEntry, app_zone: tzinfo | None) -> Job:
    """The cluster job for one ``beat_schedule`` entry.

    Raises:
        ConfigError: naming the entry, the field and the value.
    """
    if not isinstance(entry.task, str) or not entry.task:
        raise ConfigError(
            "expected the task's name", job=entry.name, option="task", value=entry.task
        )
    try:
        schedule = to_schedule(entry.schedule, app_zone=app_zone)
        return Job(name=name, schedule=schedule, adapter=SENDER, task=entry.task)
    except ConfigError as exc:
        raise ConfigError(
            exc.reason, job=entry.name, option=exc.option or "schedule", value=entry.schedule
        ) from None


def beat_schedule_jobs(modules: Sequence[ModuleType]) -> list[Job]:
    """The jobs ``celery beat -S cron_bridge`` makes of the ``beat_schedule`` of each Celery
    app these modules define, for listings (``cron-bridge list``); an entry that cannot be
    read is left out with a warning (``celery beat`` would refuse to start on it)."""
    apps: list[Celery] = []
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, Celery) and all(value is not app for app in apps):
                apps.append(value)
    jobs = []
    for app in apps:
        zone = app.timezone
        for key, raw in (app.conf.beat_schedule or {}).items():
            try:
                task = raw["task"]
                schedule = to_schedule(raw["schedule"], app_zone=zone)
                queue = (raw.get("options") or {}).get("queue")
                queue = queue if isinstance(queue, str) else None
                job = Job(
                    name=job_name(str(key)),
                    schedule=schedule,
                    adapter=SENDER,
                    task=task,
                    queue=queue,
                )
                jobs.append(job)
            except (ConfigError, KeyError, TypeError, AttributeError) as exc:
                log.warning("beat_schedule entry %.200r cannot be listed: %s", key, exc)
    return jobs


class ClusterScheduler(Scheduler):  # type: ignore[misc]
    """A ``celery.beat.Scheduler`` whose every replica is active and sends each occurrence once.

    Its options are those of ``cron-bridge beat``, each from the app's setting
    ``cron_bridge_<option>`` or else ``CRON_BRIDGE_<OPTION>`` (``HostedOptions``): the store
    (``cron_bridge_store``), the replica id, the HTTP trigger with its ``/healthz``, metrics. No
    shelve file is used: the store holds what was sent.

    Under ``celery beat`` a store that does not answer at start is one line and exit 2, as for
    ``cron-bridge beat``. Embedded in a worker (``celery worker --beat --scheduler
    cron_bridge``) it is not: the worker lives on, so its beat starts anyway, claims nothing
    until the store answers, asks it again at every tick and says so at WARNING every minute;
    its ``/healthz`` says ``"claiming": false`` meanwhile.
    """

    cron_bridge_scheduler = True  # what the worker check knows cron-bridge's schedulers by

    def __init__(self, app: Celery, *args: Any, lazy: bool = False, **kwargs: Any) -> None:
        self._beat: Beat | None = None
        self._endpoints: Any = None
        try:
            self._options = HostedOptions.read(app.conf.get, os.environ)
        except ConfigError as exc:
            _exit(str(exc))
        self._store_url = self._options.store or self._default_store_url()
        if not self._store_url:
            _exit(
                "set app.conf.cron_bridge_store or CRON_BRIDGE_STORE to the store URL, "
                "e.g. redis://localhost:6379/0"
            )
        super().__init__(app, *args, lazy=lazy, **kwargs)

    def _default_store_url(self) -> str | None:
        """The store when none is configured: none (the Django scheduler has one)."""
        return None

    def setup_schedule(self) -> None:
        zone = self.app.timezone
        for key, raw in (self.app.conf.beat_schedule or {}).items():
            _check_entry(key, raw, zone)
            try:
                self.Entry(**dict(raw, name=key, app=self.app))
            except Exception as exc:  # noqa: BLE001 - an entry Celery cannot read: say which
                _exit(f"beat_schedule entry {key!r}: {exc}")
        # As PersistentScheduler (celery beat's default) does: the app's entries, then
        # Celery's own (celery.backend_cleanup where results would otherwise pile up).
        self.merge_inplace(self.app.conf.beat_schedule)
        self.install_default_entries(self.schedule)
        entries = {job_name(name): entry for name, entry in self.schedule.items()}
        try:
            jobs = [entry_job(name, entry, zone) for name, entry in entries.items()]
        except ConfigError as exc:
            _exit(_entry_error(exc))
        self._start(jobs, BeatScheduleSender(self.app, entries))

    def _start(self, jobs: list[Job], sender: BeatScheduleSender, *, announce: bool = True) -> None:
        """Open the store and build the beat: ``jobs``, and the app's ``@cluster_task``
        tasks, sent through ``sender``, each send through this scheduler's ``apply_entry``.
        Exits with one line when the store is not there."""
        sender.scheduler = self
        self._entry_sender = sender
        jobs += [j for j in default_registry.jobs() if j.adapter == "celery" and self._ours(j)]
        try:
            register(sender)
            store = store_from_url(str(self._store_url))
            store.ping()
        except ConfigError as exc:
            _exit(_entry_error(exc))
        except ImportError as exc:
            _exit(str(exc))
        except StoreUnavailable as exc:
            if not worker_check.embedded():
                _exit(str(exc))
            log.warning(
                "cron-bridge: the store does not answer (%s); this worker's beat claims "
                "nothing until it does, and asks it again at every tick",
                exc,
            )
        self._beat = Beat(
            store,
            jobs,
            replica_id=self._options.replica_id,
            shutdown_timeout=self._options.shutdown_timeout,
            take_over=self._options.take_over,
        )
        try:
            self._options.apply_monitor()
            self._endpoints = HostedEndpoints(self._beat, store, self._options)
        except ConfigError as exc:
            _exit(str(exc))
        if announce:
            log.info(
                "cron-bridge: %d entr%s on %s as replica %s",
                len(jobs),
                "y" if len(jobs) == 1 else "ies",
                store.url,
                self._beat.replica_id,
            )

    def _ours(self, job: Job) -> bool:
        handler: Any = job.handler
        try:
            return bool(handler._get_app() is self.app)
        except AttributeError:
            return getattr(handler, "app", None) is self.app

    def apply_async(
        self, entry: ScheduleEntry, producer: Any = None, advance: bool = True, **kwargs: Any
    ) -> Any:
        """What ``Scheduler.apply_entry`` calls to send, as under celery beat: here with one
        occurrence's copy of the entry, sent by the sender (never reserved: the store keeps
        what was sent, not ``last_run_at``)."""
        return self._entry_sender.publish(entry, producer)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        if self._beat is None:
            return float(self.max_interval)
        wake_at = self._beat.run_pending()
        if wake_at is None:
            return 0.0
        wait = (wake_at - datetime.now(UTC)).total_seconds()
        return max(0.0, min(wait, float(self.max_interval)))

    def sync(self) -> None:
        """Nothing to write: the store keeps what was claimed and sent."""

    def close(self) -> None:
        if self._endpoints is not None:
            self._endpoints.shutdown()
        if self._beat is not None:
            self._beat.stop()
            self._beat.store.close()

    @property
    def info(self) -> str:
        return f"    . cron-bridge store -> {redact_url(str(self._store_url))}"


def _check_entry(key: str, raw: Any, zone: tzinfo | None) -> None:
    """Exit with one line naming the entry, the field and the value Celery cannot run."""
    if not isinstance(raw, dict):
        _exit(f"beat_schedule entry {key!r}: expected a dict with task and schedule, got {raw!r}")
    task = raw.get("task")
    if not isinstance(task, str) or not task:
        _exit(f"beat_schedule entry {key!r}: task={task!r}: expected the task's name")
    try:
        to_schedule(raw.get("schedule"), app_zone=zone)
    except ConfigError as exc:
        _exit(f"beat_schedule entry {key!r}: schedule={raw.get('schedule')!r}: {exc.reason}")


def _entry_error(exc: ConfigError) -> str:
    if exc.job and exc.option:
        return f"beat_schedule entry {exc.job!r}: {exc.option}={exc.value!r}: {exc.reason}"
    return str(exc)


def _exit(message: str) -> NoReturn:
    # celery beat sends sys.stderr to its logger at WARNING, which `-l error` hides: the
    # reason goes to the real stderr, whatever the log level.
    stream = sys.__stderr__ or sys.stderr
    stream.write(f"cron-bridge: {message}\n")
    stream.flush()
    sys.exit(2)
