"""``celery beat -S cron_bridge_django``: django-celery-beat's rows, sent once per occurrence.

The same rows ``django_celery_beat.schedulers:DatabaseScheduler`` reads (``PeriodicTask`` with
its interval, crontab, solar or clocked schedule), edited in the Django admin as before, sent
by any number of active beat replicas, each occurrence once. Each replica looks at
django-celery-beat's change marker (``PeriodicTasks``) once a second and follows what changed.
The replica that won an occurrence updates the row's ``last_run_at`` and ``total_run_count``
(and disables a one-off), once. See ``cron_bridge_celery.django_rows`` for the schedules.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlunsplit

from celery import Celery

from cron_bridge.adapters import Dispatch, override
from cron_bridge_celery.django_rows import BadRow, Row, row_job
from cron_bridge_celery.scheduler import ClusterScheduler, _exit
from cron_bridge_celery.sender import BeatScheduleSender

__all__ = ["DjangoClusterScheduler", "DjangoSender", "Ledger", "Outage", "django_store_url"]

log = logging.getLogger(__name__)

_LOOK_EVERY = 1.0  # seconds between looks at the change marker
_FULL_READ_EVERY = 300.0  # and a full read anyway, as DatabaseScheduler does
_LEDGER_MAX = 10_000


def _setup_django() -> None:
    import django
    from django.apps import apps

    if not apps.ready:
        django.setup()


def django_store_url(db: Mapping[str, Any]) -> str | None:
    """The store URL of a Django database (an entry of ``settings.DATABASES``): PostgreSQL
    (the store's tables are prefixed ``cron_bridge_``) or the SQLite file; None for any other
    engine, or a database only one process can see."""
    engine = str(db.get("ENGINE", ""))
    name = str(db.get("NAME") or "")
    if engine.endswith("sqlite3"):
        if not name or name == ":memory:" or name.startswith("file:"):
            return None
        return f"sqlite:///{name}"
    if engine.endswith(("postgresql", "postgis")):
        user = quote(str(db.get("USER") or ""), safe="")
        password = quote(str(db.get("PASSWORD") or ""), safe="")
        auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
        host = str(db.get("HOST") or "localhost")
        host = f"[{host}]" if ":" in host else host
        port = f":{db['PORT']}" if db.get("PORT") else ""
        return urlunsplit(("postgresql", f"{auth}{host}{port}", f"/{quote(name)}", "", ""))
    return None


def _check_sqlite(db: Mapping[str, Any]) -> None:
    """Warn when several processes will write a SQLite file that makes writers fail at once."""
    options = db.get("OPTIONS") or {}
    if str(db.get("ENGINE", "")).endswith("sqlite3") and (
        str(options.get("transaction_mode", "")).upper() != "IMMEDIATE"
    ):
        log.warning(
            "cron-bridge: the beats and the admin write the same SQLite file: set "
            "DATABASES['default']['OPTIONS'] = {'transaction_mode': 'IMMEDIATE'} (Django 5.1+), "
            "or saves may fail with 'database is locked'"
        )


class Outage:
    """Says once that the database stopped answering for ``what``, and once that it is back."""

    def __init__(self, failing: str, back: str) -> None:
        self.failing, self.back = failing, back
        self.down = False

    def failed(self, exc: Exception) -> None:
        if not self.down:
            log.warning("cron-bridge: %s: %s", self.failing, exc)
        self.down = True

    def answered(self) -> None:
        if self.down:
            log.info("cron-bridge: %s", self.back)
        self.down = False


class Ledger:
    """``last_run_at`` and ``total_run_count`` of the rows this replica sent, written once per
    occurrence; a one-off is disabled in the same write. Kept while the database is down (up to
    10,000 sends) and written when it answers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[tuple[int, bool, datetime]] = []
        self._outage = Outage(
            "run counts wait for the database (written when it answers)", "run counts written again"
        )

    def note(self, row: Row) -> None:
        from django.utils import timezone

        with self._lock:
            if len(self._pending) < _LEDGER_MAX:
                self._pending.append((row.pk, row.one_off, timezone.now()))
            else:
                log.warning(
                    "cron-bridge: run count of %s not kept: %d sends wait for the database",
                    row.name,
                    _LEDGER_MAX,
                )

    def flush(self) -> None:
        from django.db import DatabaseError, InterfaceError, close_old_connections
        from django.db.models import F
        from django_celery_beat.models import PeriodicTask, PeriodicTasks

        with self._lock:
            waiting, self._pending = self._pending, []
            if not waiting:
                return
            written = 0
            disabled = False
            try:
                close_old_connections()
                for pk, one_off, sent_at in waiting:
                    # QuerySet.update sends no signal: the change marker moves only for what
                    # the schedule itself needs (a disabled one-off), as DatabaseScheduler's
                    # own bookkeeping (no_changes) does.
                    fields: dict[str, Any] = {
                        "last_run_at": sent_at,
                        "total_run_count": F("total_run_count") + 1,
                    }
                    if one_off:
                        fields["enabled"] = False
                    PeriodicTask.objects.filter(pk=pk).update(**fields)
                    disabled = disabled or one_off
                    written += 1
                if disabled:
                    PeriodicTasks.update_changed()
            except (DatabaseError, InterfaceError) as exc:
                self._pending = waiting[written:] + self._pending
                self._outage.failed(exc)
                return
            self._outage.answered()


class DjangoSender(BeatScheduleSender):
    """Sends each row's ``ModelEntry`` as ``DatabaseScheduler`` would, then notes the run."""

    def __init__(self, app: Celery, ledger: Ledger) -> None:
        super().__init__(app, {})
        self.rows: dict[str, Row] = {}
        self.ledger = ledger

    def set_rows(self, rows: dict[str, Row]) -> None:
        self.rows = rows
        self.entries = {name: row.entry for name, row in rows.items()}

    @override
    def enqueue_many(self, dispatches: Sequence[Dispatch]) -> list[Exception | None]:
        rows = self.rows
        results = super().enqueue_many(dispatches)
        for dispatch, error in zip(dispatches, results, strict=True):
            row = rows.get(dispatch.job.name)
            if error is None and row is not None:
                self.ledger.note(row)
        self.ledger.flush()
        return results


class DjangoClusterScheduler(ClusterScheduler):
    """``DatabaseScheduler``'s rows, every replica active, each occurrence sent once.

    The store comes from ``app.conf.cron_bridge_store`` (``CELERY_CRON_BRIDGE_STORE`` in
    Django settings) or ``CRON_BRIDGE_STORE``; without either, the project's own database.
    """

    def __init__(self, app: Celery, *args: Any, lazy: bool = False, **kwargs: Any) -> None:
        _setup_django()
        self._ledger = Ledger()
        self._sender = DjangoSender(app, self._ledger)
        self._rows: dict[str, Row] = {}
        self._bad: dict[int, str] = {}  # row id -> the reason already logged
        self._collided: set[str] = set()  # rows named like a @cluster_task job, logged
        self._marker: Any = None
        self._next_look = 0.0
        self._next_full_read = 0.0
        self._outage = Outage(
            "periodic tasks not read (the schedule read last stands until the database answers)",
            "periodic tasks read again",
        )
        super().__init__(app, *args, lazy=lazy, **kwargs)

    @override
    def _default_store_url(self) -> str | None:
        from django.conf import settings

        url = django_store_url(settings.DATABASES["default"])
        if url is None:
            _exit(
                "set CRON_BRIDGE_STORE (or CELERY_CRON_BRIDGE_STORE) to the store URL: the "
                "project's database is not PostgreSQL or a SQLite file"
            )
        return url

    @override
    def setup_schedule(self) -> None:
        from django.conf import settings

        _check_sqlite(settings.DATABASES["default"])
        self._sync_beat_schedule()
        self._start([], self._sender, announce=False)
        self._follow(force=True)
        assert self._beat is not None
        log.info(
            "cron-bridge: %d periodic tasks (%d skipped) and %d other jobs on %s as replica %s",
            len(self._rows),
            len(self._bad),
            len(self._beat.jobs()) - len(self._rows),
            self._beat.store.url,
            self._beat.replica_id,
        )

    def _sync_beat_schedule(self) -> None:
        """The app's ``beat_schedule`` (and Celery's ``celery.backend_cleanup``) written into
        the table, as ``DatabaseScheduler`` does at start."""
        from django.db import IntegrityError
        from django_celery_beat.schedulers import ModelEntry

        entries = dict(self.app.conf.beat_schedule or {})
        if self.app.conf.result_expires:
            entries.setdefault(
                "celery.backend_cleanup",
                {
                    "task": "celery.backend_cleanup",
                    "schedule": _cleanup_schedule(),
                    "options": {"expire_seconds": 12 * 3600},
                },
            )
        for name, fields in entries.items():
            for attempt in (1, 2):  # replicas starting together race to create the row
                try:
                    ModelEntry.from_entry(name, app=self.app, **fields)
                    break
                except IntegrityError:
                    if attempt == 2:
                        log.exception("cron-bridge: beat_schedule entry %r not written", name)
                except Exception:  # as DatabaseScheduler: say which, go on
                    log.exception("cron-bridge: beat_schedule entry %r not written", name)
                    break

    # -- following the table ------------------------------------------------------------

    @override
    def tick(self, *args: Any, **kwargs: Any) -> float:
        self._follow()
        self._ledger.flush()
        return min(super().tick(*args, **kwargs), _LOOK_EVERY)

    def _follow(self, *, force: bool = False) -> None:
        """Read the rows again when the change marker moved (looked at once a second)."""
        from django.db import DatabaseError, InterfaceError, close_old_connections, transaction
        from django_celery_beat.models import PeriodicTasks

        now = time.monotonic()
        if not force and now < self._next_look:
            return
        self._next_look = now + _LOOK_EVERY
        try:
            close_old_connections()
            # MySQL's REPEATABLE READ shows other commits only after our own.
            with contextlib.suppress(transaction.TransactionManagementError):
                transaction.commit()
            marker = PeriodicTasks.last_change()
            if not force and marker == self._marker and now < self._next_full_read:
                return
            rows = self._read_rows()
        except (DatabaseError, InterfaceError) as exc:
            self._outage.failed(exc)
            return
        self._outage.answered()
        self._marker = marker
        self._next_full_read = now + _FULL_READ_EVERY
        self._apply(rows)

    def _read_rows(self) -> dict[str, Row]:
        from django.conf import settings
        from django_celery_beat.models import PeriodicTask

        tz_aware = getattr(settings, "DJANGO_CELERY_BEAT_TZ_AWARE", True)
        rows: dict[str, Row] = {}
        bad: dict[int, str] = {}
        found = PeriodicTask.objects.filter(enabled=True).select_related(
            "interval", "crontab", "solar", "clocked"
        )
        for task in found:
            try:
                row = row_job(task, self.app, tz_aware=tz_aware)
            except BadRow as exc:
                bad[task.pk] = str(exc)
                if self._bad.get(task.pk) != str(exc):  # once, and again when it changes
                    log.error(
                        "cron-bridge: periodic task %r (id %s) skipped: %s", task.name, task.pk, exc
                    )
                continue
            if row is not None:
                rows[row.job.name] = row
        self._bad = bad
        return rows

    def _apply(self, rows: dict[str, Row]) -> None:
        beat = self._beat
        assert beat is not None  # set by setup_schedule
        declared = {job.name for job in beat.jobs()} - set(self._rows)
        collided = declared & set(rows)
        for name in collided - self._collided:  # once, like a bad row
            log.error(
                "cron-bridge: periodic task %r skipped: a @cluster_task job has its name %s",
                rows[name].name,
                name,
            )
        self._collided = collided
        for name in collided:
            del rows[name]
        for name in set(self._rows) - set(rows):
            beat.remove(name)
            log.info("cron-bridge: periodic task %s no longer scheduled", self._rows[name].name)
        for name, row in rows.items():
            old = self._rows.get(name)
            if old is None or _changed(old, row):
                beat.replace(row.job, since=row.since)
                schedule = row.job.schedule
                zone = f" in {schedule.tz}" if schedule.tz != "UTC" else ""
                log.info(
                    "cron-bridge: periodic task %r (job %s): %s%s",
                    row.name,
                    name,
                    schedule.describe(),
                    zone,
                )
        self._rows = rows
        self._sender.set_rows(rows)


def _changed(old: Row, new: Row) -> bool:
    """A different job, or a one-off armed from another time."""
    return old.job != new.job or old.since != new.since


def _cleanup_schedule() -> Any:
    from celery.schedules import crontab

    return crontab("0", "4", "*")
