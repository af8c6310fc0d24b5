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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from celery import Celery
from celery.beat import ScheduleEntry, Scheduler
from celery.schedules import crontab, schedule, solar

from cron_bridge.adapters import Dispatch, TaskRef, register
from cron_bridge.beat import Beat
from cron_bridge.errors import ConfigError, StoreUnavailable
from cron_bridge.jobs import NAME_PATTERN, Job, declare
from cron_bridge.registry import default_registry
from cron_bridge.stores import store_from_url
from cron_bridge.worker import META_KEY

__all__ = ["ClusterScheduler", "job_name", "to_schedule"]

log = logging.getLogger(__name__)

SENDER = "celery-beat-schedule"
_INVALID = re.compile(r"[^A-Za-z0-9._-]+")
_SEND_OPTIONS = ("queue", "routing_key", "exchange", "priority", "expires", "headers",
                 "countdown", "eta", "time_limit", "soft_time_limit", "serializer")  # fmt: skip


def job_name(entry: str) -> str:
    """A job name for a ``beat_schedule`` key: the key itself when it is a valid name, else
    the key with other characters replaced and a short digest, so two keys never collide."""
    if NAME_PATTERN.fullmatch(entry):
        return entry
    digest = hashlib.sha1(entry.encode(), usedforsecurity=False).hexdigest()[:6]
    cleaned = _INVALID.sub("-", entry).strip("-._")[:180] or "entry"
    return f"{cleaned}-{digest}"


class SolarSchedule:
    """A Celery ``solar`` schedule as a cron-bridge schedule (needs ``ephem``)."""

    tz = "UTC"

    def __init__(self, source: solar) -> None:
        self.source = source

    def describe(self) -> str:
        return f"solar {self.source.event} {self.source.lat},{self.source.lon}"

    def next_after(self, dt: datetime) -> datetime:
        sun = self.source.ephem.Sun()
        self.source.cal.date = dt.astimezone(UTC).replace(tzinfo=None)
        method = getattr(self.source.cal, self.source.method)
        found = method(sun, start=self.source.cal.date, use_center=self.source.use_center)
        return found.datetime().replace(tzinfo=UTC, microsecond=0)  # type: ignore[no-any-return]

    def occurrences(self, start: datetime, end: datetime) -> Iterator[datetime]:
        current = self.next_after(start)
        while current <= end:
            yield current
            current = self.next_after(current + timedelta(seconds=1))


def to_schedule(value: Any) -> tuple[str, Any]:
    """The ``declare()`` options for a ``beat_schedule`` entry's schedule.

    Raises:
        ConfigError: a schedule kind cron-bridge cannot read.
    """
    if isinstance(value, crontab):
        fields = " ".join(
            str(part)
            for part in (
                value._orig_minute,
                value._orig_hour,
                value._orig_day_of_month,
                value._orig_month_of_year,
                value._orig_day_of_week,
            )
        )
        return "cron", fields
    if isinstance(value, timedelta | int | float) and not isinstance(value, bool):
        return "every", value
    if isinstance(value, schedule) and type(value) is schedule:
        return "every", value.run_every
    if isinstance(value, solar):
        return "solar", SolarSchedule(value)
    raise ConfigError("cron-bridge reads crontab, timedelta, numbers and solar", option="schedule",
                      value=repr(value))  # fmt: skip


class BeatScheduleSender:
    """Sends ``beat_schedule`` entries as the entry says: task, args, kwargs and options."""

    name = SENDER

    def __init__(self, app: Celery, entries: Mapping[str, ScheduleEntry]) -> None:
        self.app = app
        self.entries = dict(entries)

    def accepts(self, obj: object, queue: object | None) -> bool:
        return False

    def describe(self, obj: object, queue: object | None) -> TaskRef:
        raise ConfigError("beat_schedule entries are not declared with @cluster_task")

    def wrap(self, obj: Any, job: Job) -> Any:
        return obj

    def enqueue_many(self, dispatches: Sequence[Dispatch]) -> list[Exception | None]:
        results: list[Exception | None] = []
        try:
            with self.app.connection_for_write() as connection:
                connection.ensure_connection(max_retries=1, interval_start=0, interval_step=0)
                with self.app.amqp.Producer(connection) as producer:
                    for dispatch in dispatches:
                        results.append(self._send(producer, dispatch))
        except Exception as exc:  # noqa: BLE001 - no connection: every send failed
            return [exc] * len(dispatches)
        return results

    def _send(self, producer: Any, dispatch: Dispatch) -> Exception | None:
        entry = self.entries[dispatch.job.name]
        options = {k: v for k, v in (entry.options or {}).items() if k in _SEND_OPTIONS}
        headers = {**(options.pop("headers", None) or {}), META_KEY: dispatch.meta()}
        try:
            self.app.send_task(
                entry.task,
                args=list(entry.args or ()),
                kwargs=dict(entry.kwargs or {}),
                headers=headers,
                producer=producer,
                retry=False,
                **options,
            )
        except Exception as exc:  # noqa: BLE001 - the broker's error is the occurrence's outcome
            return exc
        return None


class ClusterScheduler(Scheduler):  # type: ignore[misc]
    """A ``celery.beat.Scheduler`` whose every replica is active and sends each occurrence once.

    The store comes from ``app.conf.cron_bridge_store`` or ``CRON_BRIDGE_STORE``. No shelve
    file is used: the store holds what was sent.
    """

    def __init__(self, app: Celery, *args: Any, lazy: bool = False, **kwargs: Any) -> None:
        self._beat: Beat | None = None
        self._store_url = app.conf.get("cron_bridge_store") or os.environ.get("CRON_BRIDGE_STORE")
        if not self._store_url:
            _exit("set app.conf.cron_bridge_store or CRON_BRIDGE_STORE to the store URL, "
                  "e.g. redis://localhost:6379/0")  # fmt: skip
        super().__init__(app, *args, lazy=lazy, **kwargs)

    def setup_schedule(self) -> None:
        self.merge_inplace(self.app.conf.beat_schedule)
        entries = {job_name(name): entry for name, entry in self.schedule.items()}
        tz = str(self.app.conf.timezone or "UTC")
        try:
            jobs = [self._job(name, entry, tz) for name, entry in entries.items()]
            jobs += [j for j in default_registry.jobs() if j.adapter == "celery" and self._ours(j)]
            register(BeatScheduleSender(self.app, entries))
            store = store_from_url(str(self._store_url))
            store.ping()
        except (ConfigError, StoreUnavailable, ImportError) as exc:
            _exit(str(exc))
        self._beat = Beat(store, jobs)
        log.info("cron-bridge: %d entries on %s as replica %s", len(jobs), store.url,
                 self._beat.replica_id)  # fmt: skip

    def _job(self, name: str, entry: ScheduleEntry, tz: str) -> Job:
        kind, value = to_schedule(entry.schedule)
        if kind == "cron":
            return declare(name, cron=value, tz=tz, adapter=SENDER, task=entry.task)
        if kind == "every":
            return declare(name, every=value, adapter=SENDER, task=entry.task)
        # solar: declared with a stand-in interval, then given its own schedule.
        return replace(declare(name, every="1d", adapter=SENDER, task=entry.task), schedule=value)

    def _ours(self, job: Job) -> bool:
        handler: Any = job.handler
        try:
            return bool(handler._get_app() is self.app)
        except AttributeError:
            return getattr(handler, "app", None) is self.app

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
        if self._beat is not None:
            self._beat.stop()
            self._beat.store.close()

    @property
    def info(self) -> str:
        return f"    . cron-bridge store -> {self._store_url}"


def _exit(message: str) -> NoReturn:
    print(f"cron-bridge: {message}", file=sys.stderr)  # noqa: T201 - the one line users see
    sys.exit(2)
