"""Standing aside: what a replica keeps of the claims it lost, per sweep, not per occurrence.

Every replica asks the store for every occurrence of its cluster jobs; one wins each claim and
writes the occurrence's records. The others write nothing per occurrence. Each keeps a ledger
instead, one control record per replica (group ``aside``): the spans of scheduled time over
which it asked for every occurrence of a job set, with how many claims it lost there. A span
is opened when the replica starts claiming, and closed when its jobs change or the store stops
answering (then a new one opens). The latest occurrence it asked for is written at most every
``FLUSH_INTERVAL`` (at its heartbeat), and an open span reaches to that: a replica is shown
standing aside only where its ledger says it asked, so one that died is never shown after its
death (its last few seconds before it may be missing). The job set of a span is written
once, under its digest (group ``aside-jobs``; up to ``MAX_NAMES`` names, beyond that "every
job"). So a burst costs the store one record per occurrence, not one per occurrence and
replica, and a losing replica one dictionary update per lost claim.

Reading (``history``): for an occurrence of job J due at t that the schedule brought (not a
manual trigger), every replica with a span covering t whose job set holds J, and that wrote
no record of its own for that occurrence, stood aside; those are shown as ``skipped-claimed``
records (reason ``stood aside``, dated at the occurrence). The claim is what guarantees they
did not run it; the ledger shows they were there. Ledgers are read as untrusted input:
bounded, validated, the rest ignored.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from cron_bridge.errors import StoreUnavailable
from cron_bridge.jobs import NAME_PATTERN, Occurrence
from cron_bridge.plumbing import inbound
from cron_bridge.stores.base import Store
from cron_bridge.stores.records import RunRecord

__all__ = ["GROUP", "JOBS_GROUP", "Ledger", "LostClaims", "history", "with_stood_aside"]

log = logging.getLogger(__name__)

GROUP = "aside"
JOBS_GROUP = "aside-jobs"
MAX_SPANS = 200  # per replica: the oldest are dropped first
LEDGER_MAX = 100 * MAX_SPANS + 200  # bytes of one ledger's JSON
# Ledgers a reader holds: replicas alive or gone within KEPT, far more than a namespace has;
# past these the rest are left out (said once), so forged ledgers cannot fill a page or a beat.
MAX_LEDGERS = 1000
LEDGERS_BYTES = 4 * inbound.MAX_BYTES
MAX_NAMES = 10_000  # per job set; a larger set is written as "every job"
FLUSH_INTERVAL = timedelta(seconds=5)  # how stale the end of an open span may be in the store
KEPT = timedelta(days=7)  # a ledger that has not moved for this long is deleted (by anyone)
PRUNE_INTERVAL = timedelta(hours=1)
REASON = "stood aside"
_DIGEST = re.compile(r"[0-9a-f]{16}")
_REPLICA_MAX = 1000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ms(at: datetime) -> int:
    return (at - _EPOCH) // timedelta(milliseconds=1)


def _at(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def digest(names: Iterable[str]) -> str:
    """The digest of a job set, the same on every replica with the same jobs."""
    return hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()[:16]


@dataclass(slots=True)
class Span:
    """From ``start`` to ``end`` (epoch ms; None: still open) the replica asked for every
    occurrence of the job set ``jobs`` and lost ``lost`` claims."""

    start: int
    end: int | None
    lost: int
    jobs: str

    def to_json(self) -> list[Any]:
        return [self.start, self.end, self.lost, self.jobs]

    @classmethod
    def parse(cls, raw: Any) -> Span | None:
        if not isinstance(raw, list) or len(raw) != 4:
            return None
        start, end, lost, jobs = raw
        top = inbound.MAX_EPOCH_MS
        ints = all(type(v) is int and 0 <= v <= top for v in (start, lost))
        if not ints or not (end is None or (type(end) is int and start <= end <= top)):
            return None
        if not isinstance(jobs, str) or not _DIGEST.fullmatch(jobs):
            return None
        return cls(start, end, lost, jobs)


class Ledger:
    """One replica's ledger, kept in memory and written to the store now and then.

    Args:
        replica: the replica's id (its key in the group).
        names: the replica's cluster jobs that it claims on a schedule (called when they
            changed, not at every claim).
        now: the replica's clock (the store's time), to tell a ledger long gone.
    """

    def __init__(
        self,
        replica: str,
        names: Callable[[], Iterable[str]],
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.replica = replica
        self._names = names
        self._now = now
        self._lock = threading.Lock()
        self._writing = threading.Lock()
        self._spans: list[Span] = []
        self._floor: int | None = None  # nothing before it is covered; None: not claiming
        self._last: int | None = None  # the latest occurrence covered
        self._jobs: str | None = None  # the digest of the current job set; None: to compute
        self._generation = 0  # of the job set
        self._written_jobs: set[str] = set()
        self._unwritten: list[str] | None = None  # the names of the current set, to write
        self._dirty = False  # the end of the open span moved since the last write
        self._opened = False  # a span was opened or closed since the last write
        self._next_flush = 0.0  # monotonic
        self._next_prune = 0.0

    def resume(self, now: datetime) -> None:
        """Claiming from ``now`` on (start, or the store is back): what is due from now is
        asked for; what came due before (caught up, or kept through an outage) may not all be."""
        with self._lock:
            self._close()
            self._floor = _ms(now)

    def interrupt(self) -> None:
        """The store stopped answering, or the beat stops: the open span ends where it is."""
        with self._lock:
            self._close()
            self._floor = None

    def jobs_changed(self, now: datetime) -> None:
        """The job set changed: a new span, from now, for the new set."""
        with self._lock:
            self._jobs = None
            self._generation += 1
            if self._floor is not None:
                self._close()
                self._floor = _ms(now)

    def asked(self, times: Sequence[datetime], lost: int) -> None:
        """A claim batch was answered: the occurrences due at ``times`` were asked for, and
        ``lost`` of them had been claimed by others."""
        if not times:
            return
        # The job set is read without the lock held: the beat holds its own lock when it
        # tells this ledger that its jobs changed.
        generation = self._generation
        names = None if self._jobs else sorted(self._names())
        jobs = self._jobs or digest(names or [])
        with self._lock:
            if self._floor is None:
                return
            earliest, latest = _ms(min(times)), _ms(max(times))
            if latest < self._floor:
                return
            if earliest < self._floor:  # some from before the span's floor: left out
                earliest = min(ms for ms in map(_ms, times) if ms >= self._floor)
            if generation != self._generation:  # the jobs changed meanwhile: a new span
                return
            if names is not None:
                self._unwritten = names  # written with the ledger, then let go
            self._jobs = jobs
            span = self._spans[-1] if self._spans else None
            if span is None or span.end is not None or span.jobs != self._jobs:
                self._close()
                span = Span(earliest, None, 0, self._jobs)
                self._spans.append(span)
                del self._spans[:-MAX_SPANS]
                self._opened = True
            span.start = min(span.start, earliest)
            span.lost += lost
            self._last = max(self._last or 0, latest)
            self._dirty = True

    def _close(self) -> None:
        if self._spans and self._spans[-1].end is None:
            span = self._spans[-1]
            span.end = max(span.start, self._last or 0)
            self._opened = True

    def flush(self, store: Store, *, force: bool = False, moved: bool = False) -> None:
        """Write the ledger when a span opened or closed (at once), or when the end of the
        open span moved and the last write is older than ``FLUSH_INTERVAL`` (with ``moved``,
        the heartbeat's call: whenever it moved).

        Raises:
            StoreUnavailable: nothing was lost; a later flush writes it.
        """
        with self._writing:  # one write at a time, so an older one never lands last
            self._flush(store, force, moved)

    def _flush(self, store: Store, force: bool, moved: bool) -> None:
        now = time.monotonic()
        with self._lock:
            due = moved or now >= self._next_flush
            if not (self._opened or force or (self._dirty and due)):
                return
            spans = [s.to_json() for s in self._spans]
            value = {"v": 1, "spans": spans, "last": self._last}
            jobs = self._jobs
            names = self._unwritten if jobs not in self._written_jobs else None
            self._dirty = self._opened = False
            self._next_flush = now + FLUSH_INTERVAL.total_seconds()
        try:
            # The ledger first, then the job set it names (see ``prune``); a reader that finds
            # the set missing meanwhile takes it as every job.
            store.put_control(GROUP, self.replica, json.dumps(value, separators=(",", ":")))
            if names is not None and jobs is not None:
                _write_jobs(store, jobs, names)
                with self._lock:
                    self._written_jobs.add(jobs)
                    if self._unwritten is names:
                        self._unwritten = None
        except StoreUnavailable:
            with self._lock:
                self._opened = True  # written again at the next chance
            raise

    def maybe_prune(self, store: Store) -> None:
        """Once an hour, delete the ledgers of replicas long gone (``prune``).

        Raises:
            StoreUnavailable: tried again at the next chance.
        """
        now = time.monotonic()
        if now < self._next_prune:
            return
        self._next_prune = now + PRUNE_INTERVAL.total_seconds()
        prune(store, self._now(), keep=self.replica)


def _write_jobs(store: Store, jobs: str, names: Sequence[str]) -> None:
    listed = sorted(names) if len(names) <= MAX_NAMES else None
    value = {"count": len(names), "names": listed}
    store.put_control(JOBS_GROUP, jobs, json.dumps(value, separators=(",", ":")))


@dataclass(frozen=True, slots=True)
class _Replica:
    id: str
    spans: tuple[Span, ...]
    last: int | None  # the latest occurrence it asked for (ms), as last written


def _parse(replica: str, text: str) -> _Replica | None:
    if not 0 < len(replica) <= _REPLICA_MAX or len(text) > LEDGER_MAX:
        return None
    try:
        data = inbound.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("v") != 1 or not isinstance(data.get("spans"), list):
        return None
    spans = tuple(s for s in map(Span.parse, data["spans"][-MAX_SPANS:]) if s is not None)
    last = data.get("last")
    return _Replica(replica, spans, last if type(last) is int else None)


def prune(store: Store, now: datetime, *, keep: str) -> None:
    """Delete the ledgers that have not moved for ``KEPT`` (their replicas are gone, or they
    are not ledgers) and the job sets no ledger names any more.

    The job sets are listed before the ledgers are read, and a replica writes its ledger before
    a new job set: a set listed here is named by a ledger read after, so none in use goes.
    """
    sets = set(store.controls(JOBS_GROUP))
    alive = {r.id for r in store.replicas()} | {keep}
    used: set[str] = set()
    for replica, text in _ledgers(store).items():
        parsed = _parse(replica, text)
        newest = 0
        if parsed is not None:
            newest = max((s.end or s.start for s in parsed.spans), default=0)
            newest = max(newest, parsed.last or 0)
        if replica not in alive and _at(newest) < now - KEPT:
            store.put_control(GROUP, replica, None)
        elif parsed is not None:
            used.update(s.jobs for s in parsed.spans)
    for jobs in sets - used:
        store.put_control(JOBS_GROUP, jobs, None)


class LostClaims:
    """The ledgers of a namespace, read once: who stood aside for an occurrence."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._ledgers = []
        for replica, text in _ledgers(store).items():
            parsed = _parse(replica, text)
            if parsed is None:
                inbound.warn_once(
                    log,
                    GROUP,
                    replica,
                    text,
                    "skipping the ledger %.200r: it is not one a replica writes",
                    replica,
                )
            else:
                self._ledgers.append(parsed)
        self._sets: dict[str, frozenset[str] | None] = {}

    def _holds(self, jobs: str, job: str) -> bool:
        if jobs not in self._sets:
            self._sets[jobs] = _read_jobs(self._store, jobs)
        names = self._sets[jobs]
        return names is None or job in names

    def who(self, occurrence: Occurrence) -> list[str]:
        """The replicas whose ledger covers ``occurrence`` (the winner among them)."""
        at = _ms(occurrence.scheduled_at)
        found = []
        for ledger in self._ledgers:
            for span in ledger.spans:
                end = span.end
                if end is None:  # open: as far as the replica wrote down that it asked
                    end = ledger.last or span.start
                if span.start <= at <= end and self._holds(span.jobs, occurrence.job):
                    found.append(ledger.id)
                    break
        return sorted(found)

    def records(self, occurrence: Occurrence, written: Iterable[RunRecord]) -> list[RunRecord]:
        """A ``skipped-claimed`` record (reason ``stood aside``, dated at the occurrence) of
        each replica that stood aside for ``occurrence``, but those that wrote one of its
        records (``written``). None for an occurrence a manual trigger ran: a fresh one
        (``--force``) is due at a moment no other replica ever asked for."""
        written = list(written)
        if any(r.trigger == "manual" and r.outcome != "skipped-claimed" for r in written):
            return []
        besides = {r.replica for r in written}
        return [
            RunRecord(
                job=occurrence.job,
                occurrence_id=occurrence.id,
                outcome="skipped-claimed",
                trigger="schedule",
                replica=replica,
                started_at=occurrence.scheduled_at,
                reason=REASON,
            )
            for replica in self.who(occurrence)
            if replica not in besides
        ]


def _ledgers(store: Store) -> dict[str, str]:
    """The ledgers of the namespace, as many as a reader holds (``MAX_LEDGERS``)."""
    return store.controls(GROUP, most=MAX_LEDGERS, max_bytes=LEDGERS_BYTES)


def _read_jobs(store: Store, jobs: str) -> frozenset[str] | None:
    """A job set by its digest; None when it is "every job" (too large to list, or lost)."""
    text = store.control(JOBS_GROUP, jobs)
    try:
        data = inbound.loads(text) if text is not None else None
    except ValueError:
        data = None
    names = data.get("names") if isinstance(data, dict) else None
    if not isinstance(names, list):
        return None
    return frozenset(
        n for n in names[:MAX_NAMES] if isinstance(n, str) and NAME_PATTERN.fullmatch(n)
    )


def history(store: Store, job: str, n: int = 20) -> list[RunRecord]:
    """The newest ``n`` records of ``job``, newest first, counting a ``skipped-claimed``
    record of every replica that stood aside for their occurrences (``with_stood_aside``), as
    if each had written one.

    Raises:
        StoreUnavailable: the store did not answer.
    """
    return with_stood_aside(store, job, store.history(job, n))[:n]


def with_stood_aside(
    store: Store, job: str, records: list[RunRecord], *, aside: LostClaims | None = None
) -> list[RunRecord]:
    """``records`` of ``job`` and, for each of their occurrences, a ``skipped-claimed`` record
    (reason ``stood aside``, dated at the occurrence) of every replica whose ledger covers it
    and that wrote no record of it; newest first.

    Raises:
        StoreUnavailable: the store did not answer.
    """
    if not records:
        return records
    aside = aside or LostClaims(store)
    by_occurrence: dict[str, list[RunRecord]] = {}
    for record in records:
        by_occurrence.setdefault(record.occurrence_id, []).append(record)
    derived = []
    for occurrence_id, written in by_occurrence.items():
        try:
            occurrence = Occurrence.parse(occurrence_id)
        except ValueError:
            continue
        if occurrence.job != job:
            continue
        derived += aside.records(occurrence, written)
    return sorted(records + derived, key=lambda r: r.started_at, reverse=True)
