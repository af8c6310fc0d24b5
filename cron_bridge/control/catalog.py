"""The jobs of a namespace, as its replicas declare them, kept in its store.

Each beat writes what it schedules into the control group ``jobs`` (one entry per job: the
schedule as listings show it, its zone, scope, target), so a dashboard that serves several
namespaces can show each namespace's jobs without importing their code. A replica writes only
the entries that differ from what the store has (its first look reads the group once), and
refreshes its own entries once a day so that ``seen`` says which jobs a live deployment still
declares. Entries are read as untrusted input: bounded and validated.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from cron_bridge.errors import StoreUnavailable
from cron_bridge.jobs import NAME_PATTERN, Job
from cron_bridge.plumbing import inbound
from cron_bridge.stores.base import Store
from cron_bridge.stores.records import CONTROLS_MAX

__all__ = [
    "GROUP",
    "JobInfo",
    "Publisher",
    "entry",
    "first_seen",
    "publish",
    "publish_some",
    "read",
]

log = logging.getLogger(__name__)

GROUP = "jobs"
MAX_JOBS = CONTROLS_MAX  # published per namespace; a dashboard shows no more than that
_REFRESH = timedelta(days=1)
_BATCH = 1000
_TEXT_MAX = 200


@dataclass(frozen=True, slots=True)
class JobInfo:
    """What a dashboard shows of a job declared in another process."""

    name: str
    schedule: str
    tz: str
    scope: str
    target: str
    on_demand: bool  # kept as "external" in the entry: what every version reads and writes
    seen: str  # the day a replica last declared it, YYYY-MM-DD
    # When a replica first declared it (epoch ms), kept by every later write; "" when unknown
    # (an entry of a version before it was kept): the audit leaves out what was due before.
    first: str = ""

    @classmethod
    def of(cls, job: Job, today: str, first: str = "") -> JobInfo:
        target = "inline" if job.target == "inline" else f"{job.adapter}:{job.queue or 'default'}"
        return cls(
            name=job.name,
            schedule=job.schedule.describe()[:_TEXT_MAX],
            tz=str(job.schedule.tz)[:_TEXT_MAX],
            scope=job.scope,
            target=target[:_TEXT_MAX],
            on_demand=job.on_demand,
            seen=today,
            first=first,
        )

    @classmethod
    def parse(cls, name: str, text: str) -> JobInfo | None:
        """An entry read from the store, or None when it is not one we would write."""
        try:
            data: Any = inbound.loads(text)
        except ValueError:
            return None
        if not isinstance(data, dict) or not NAME_PATTERN.fullmatch(name):
            return None
        fields: dict[str, str] = {}
        for key in ("schedule", "tz", "scope", "target", "seen"):
            value = data.get(key)
            if not isinstance(value, str) or len(value) > _TEXT_MAX:
                return None
            fields[key] = value
        first = data.get("first", "")
        if not isinstance(first, str) or (first and inbound.instant(first) is None):
            first = ""  # unknown rather than wrong
        return cls(name=name, on_demand=data.get("external") is True, first=first, **fields)

    def text(self) -> str:
        data = asdict(self)
        del data["name"]
        data["external"] = data.pop("on_demand")
        return json.dumps(data, sort_keys=True)


def publish(
    store: Store,
    jobs: Iterable[Job],
    *,
    now: datetime | None = None,
    since: datetime | None = None,
    declared: Mapping[str, datetime] | None = None,
) -> int:
    """Write the entries of ``jobs`` that the store does not have as they are (or saw more
    than a day ago). Returns how many were written. A job new to the store is first declared
    at ``declared[name]`` (when this replica took it up), else ``since``, else ``now``.

    Raises:
        StoreUnavailable: the store did not answer (nothing is lost: the next publish writes).
    """
    moment = now or datetime.now(UTC)
    today = moment.date()
    stored = store.controls(GROUP)
    changed: dict[str, str] = {}
    for count, job in enumerate(sorted(jobs, key=lambda j: j.name)):
        if count >= MAX_JOBS:
            log.warning("the dashboard lists the first %d jobs of this namespace", MAX_JOBS)
            break
        old = JobInfo.parse(job.name, stored.get(job.name, ""))
        first = _first(old, (declared or {}).get(job.name, since or moment))
        info = JobInfo.of(job, today.isoformat(), first)
        if old is not None and _same(old, info) and _recent(old.seen, today):
            continue
        changed[job.name] = info.text()
    names = list(changed)
    for start in range(0, len(names), _BATCH):  # a round trip per batch, not per job
        store.put_controls(GROUP, {name: changed[name] for name in names[start : start + _BATCH]})
    return len(changed)


def publish_some(
    store: Store,
    jobs: Sequence[Job],
    *,
    now: datetime | None = None,
    declared: Mapping[str, datetime] | None = None,
) -> int:
    """Write the entries of ``jobs`` (a few that changed), without reading the catalog; a job
    new to the store is first declared at ``declared[name]``, else ``now`` (see ``publish``).

    Raises:
        StoreUnavailable: the store did not answer.
    """
    moment = now or datetime.now(UTC)
    today = moment.date().isoformat()
    entries = {}
    for job in jobs:  # a few: each one's own entry is read for when it was first declared
        old = JobInfo.parse(job.name, store.control(GROUP, job.name) or "")
        first = _first(old, (declared or {}).get(job.name, moment))
        entries[job.name] = JobInfo.of(job, today, first).text()
    if entries:
        store.put_controls(GROUP, entries)
    return len(entries)


def _first(old: JobInfo | None, now: datetime) -> str:
    """The entry's first declaration: the old entry's, or now for a job new to the store
    (an old entry that does not say stays unknown)."""
    if old is not None:
        return old.first
    return str(int(now.timestamp() * 1000))


def entry(store: Store, name: str) -> JobInfo | None:
    """The catalog's entry of ``name``, in one read; None when there is none or it is
    malformed.

    Raises:
        StoreUnavailable: the store did not answer.
    """
    return JobInfo.parse(name, store.control(GROUP, name) or "")


def first_seen(store: Store, name: str) -> datetime | None:
    """When a replica first declared ``name``; None when the store does not say.

    Raises:
        StoreUnavailable: the store did not answer.
    """
    info = JobInfo.parse(name, store.control(GROUP, name) or "")
    return None if info is None or not info.first else inbound.instant(info.first)


def read(store: Store) -> dict[str, JobInfo]:
    """The namespace's jobs, by name (malformed entries left out).

    Raises:
        StoreUnavailable: the store did not answer.
    """
    found = {}
    for name, text in list(store.controls(GROUP).items())[:MAX_JOBS]:
        info = JobInfo.parse(name, text)
        if info is None:
            inbound.warn_once(
                log,
                GROUP,
                name,
                text,
                "skipping the catalog entry %.200r: it is not one a beat writes",
                name,
            )
        else:
            found[name] = info
    return found


def _same(old: JobInfo, new: JobInfo) -> bool:
    return (old.schedule, old.tz, old.scope, old.target, old.on_demand) == (
        new.schedule,
        new.tz,
        new.scope,
        new.target,
        new.on_demand,
    )


def _recent(seen: str, today: date) -> bool:
    try:
        return bool(today - datetime.fromisoformat(seen).date() < _REFRESH)
    except ValueError:
        return False


class Publisher:
    """Publishes a beat's jobs in the background: all of them at start and once a day (the
    entries' ``seen``), and at most every 30 s the entries of the jobs that changed since,
    so that a stored schedule changed every second costs its own entry, not a read of the
    whole catalog. A store that does not answer is asked again at the next chance.

    A job new to the store is first declared when this replica took it up (``started`` for
    the jobs it began with, the time of ``changed`` for a later one), not when its entry is
    written: the beat claims its occurrences meanwhile, and an audit leaves out what is due
    before the first declaration."""

    INTERVAL = 30.0
    FULL_INTERVAL = 6 * 3600.0  # a whole publish: well within the entries' daily refresh

    def __init__(self, store: Store, started: datetime | None = None) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._full = True
        self._names: set[str] = set()  # changed since the last publish
        self._started = started or datetime.now(UTC)
        # When this replica took up each job changed since the last publish (the earliest).
        self._declared: dict[str, datetime] = {}
        self._next = 0.0
        self._next_full = 0.0
        self._thread: threading.Thread | None = None

    def changed(self, name: str, at: datetime | None = None) -> None:
        """The job called ``name`` was added, replaced or removed (``at``: now)."""
        with self._lock:
            self._names.add(name)
            self._declared.setdefault(name, at or datetime.now(UTC))

    def maybe_publish(self, jobs: Callable[[], list[Job]]) -> None:
        now = time.monotonic()
        busy = self._thread is not None and self._thread.is_alive()
        with self._lock:
            full = self._full or now >= self._next_full
            if busy or now < self._next or not (full or self._names):
                return
            names, self._names, self._full = self._names, set(), False
            declared, self._declared = self._declared, {}
        self._next = now + self.INTERVAL
        if full:
            self._next_full = now + self.FULL_INTERVAL
            listed = jobs()
        else:
            listed = [job for job in jobs() if job.name in names]
        self._thread = threading.Thread(
            target=self._publish,
            args=(listed, full, names, declared),
            daemon=True,
            name="cron-bridge-catalog",
        )
        self._thread.start()

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a publish in flight: a beat that stops waits, so
        its thread never meets a store being closed under it."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _publish(
        self, jobs: list[Job], full: bool, names: set[str], declared: dict[str, datetime]
    ) -> None:
        try:
            if full:
                written = publish(self.store, jobs, since=self._started, declared=declared)
            else:
                written = publish_some(self.store, jobs, declared=declared)
        except StoreUnavailable as exc:
            with self._lock:
                self._full = self._full or full
                self._names |= names
                for name, at in declared.items():
                    self._declared[name] = min(at, self._declared.get(name, at))
            log.debug("jobs not published yet: %s", exc)
            return
        if written:
            log.debug("published %d job(s) for the dashboard", written)
