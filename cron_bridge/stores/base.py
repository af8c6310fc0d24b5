"""The store contract every backend honours (the records it keeps are ``records``).

A store holds five kinds of state:

- **claims** ``occ:<job>:<epoch ms>``: created once per occurrence by the first replica to
  ask, never released, expiring after 48 h. Creating one is a single atomic operation.
- **pending sends**: a claim won with ``pending`` stays pending until its claimer has sent
  it (or begun its inline run) and settles it (``settle_many``), leased to the claimer for a
  few seconds; a replica that finds one whose lease ran out takes it over (``take_over``),
  atomically, and sends it itself, so a claimer that dies between its claim and its send
  loses nothing.
- **locks** ``active:<job>``: taken with a lifetime, extended and released only by their
  owner; an expired lock can be taken by anyone. Other keys taken once for a lifetime are
  held the same way (``acquire``): a paused occurrence's catch-up ``catchup:<job>:<epoch ms>``
  and a revoked dashboard session ``session-revoked:<session id>``. An overlap lock is taken
  with its **fencing token** (``acquire_fenced``): a number of the lock's own, kept apart
  from it and never reset, that grows with every time it is taken.
- **completion marks** ``done:<job>:<epoch ms>``: written when a queue delivery completes,
  before its lock is freed, and kept as long as the claim (``finish``), so that a second
  delivery of the message is acknowledged, never run (``finished``); and **began marks**
  ``began:<job>:<epoch ms>``: the copy of an occurrence's message whose run began. A run asks
  for its lock and reads and writes these marks in one step (``admit``).
- **records**: per job, the last claimed occurrence and the run history; and the live
  replicas from their heartbeats.
- **controls**: operator and shared state, one JSON text per key within a group: the paused
  jobs (group ``pause``, read by every replica before it claims), a job's change log
  (``change:<job>``), the stored schedules (``schedule``) and their change feed
  (``schedule-feed``), the jobs published for dashboards (``jobs``), and the ledgers of the
  replicas that stood aside (``aside``, ``aside-jobs``). A group is read in one round trip, up
  to ``CONTROLS_MAX`` records and ``CONTROLS_BYTES`` of values (``control_records``).

Everything a store reads is bytes from its server until ``inbound.text`` (keys and values)
and the record parsers of ``records`` turn it into validated values; what they cannot is
skipped with one warning per record, never raised.

Every method either does what it says or raises ``StoreUnavailable``; none of them hangs past
the store's connect or socket timeout.
"""

from __future__ import annotations

import logging
import threading
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import ClassVar, Literal, Self

from cron_bridge.jobs import CLAIM_TTL, Occurrence
from cron_bridge.plumbing import inbound, keys
from cron_bridge.stores import run_summary
from cron_bridge.stores.controls import ControlRecords
from cron_bridge.stores.records import ReplicaInfo, RunRecord

__all__ = [
    "PENDING_LEASE",
    "TAKE_OVER_MOST",
    "Admission",
    "Store",
    "StoreStats",
    "done_key",
    "ttl_ms",
]

log = logging.getLogger(__name__)

PENDING_LEASE = timedelta(seconds=4)  # how long a claim waits for its claimer's send
TAKE_OVER_MOST = 1000  # pending claims one take_over call takes at most


@dataclass(frozen=True, slots=True)
class Admission:
    """What ``Store.admit`` found.

    Attributes:
        outcome: ``taken`` (the lock is the caller's now), ``held`` (by someone else, or by a
            key of another program), ``completed`` (the occurrence's completion mark is
            there: nothing was taken) or ``began`` (another copy's began mark is there:
            nothing was taken).
        token: ``taken``: the fencing token (0 from a store that keeps none).
        holder: ``held``: the lock's owner; ``began``: the mark's value. None when there was
            none to read (expired in between, or of another type).
        marked: ``taken`` with a began mark asked for: whether this call wrote it (False
            when an earlier try of the same copy had).
    """

    outcome: Literal["taken", "held", "completed", "began"]
    token: int = 0
    holder: str | None = None
    marked: bool = False


class StoreStats:
    """Counters a store keeps about itself, read by tests and benchmarks.

    Attributes:
        round_trips: requests sent to the server and answered (for an in-process store:
            transactions). A pipeline counts once per server node it reaches.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()
        self.round_trips = 0

    def add(self, trips: int = 1) -> None:
        with self._lock:
            self.round_trips += trips
        self._local.trips = getattr(self._local, "trips", 0) + trips

    @property
    def this_thread(self) -> int:
        """The round trips of the calling thread only (a beat's claims, apart from its
        heartbeat and record writes running meanwhile)."""
        return int(getattr(self._local, "trips", 0))


class Store(ControlRecords):
    """Shared state of a cluster of beats and workers. See the module text for the model.

    Stores built from a URL own their connections and close them in ``close()``; a client or
    pool passed in is borrowed and never closed.
    """

    distributed: ClassVar[bool] = True
    """Whether processes on different hosts share this store's state."""

    history_limit: int = 1000
    """Run records kept per job; older ones are dropped."""

    def __init__(self) -> None:
        self.stats = StoreStats()

    @property
    @abstractmethod
    def url(self) -> str:
        """Where the store is, safe to log (no password)."""

    @abstractmethod
    def ping(self) -> None:
        """Reach the server once, creating tables where the store does.

        Raises:
            StoreUnavailable: within the connect timeout when it cannot be reached.
        """

    @abstractmethod
    def claim_many(
        self,
        occurrences: Sequence[Occurrence],
        owner: str,
        *,
        ttl: timedelta = CLAIM_TTL,
        pending: Sequence[bool] | None = None,
        lease: timedelta = PENDING_LEASE,
    ) -> list[bool]:
        """Claim occurrences; one answer per occurrence, True where this call won it.

        Each claim is atomic on its own: of any number of concurrent callers for one
        occurrence, exactly one gets True. A claim is never released; it may be taken again
        only after ``ttl``. Every job in ``occurrences`` has its last claimed occurrence
        advanced to the latest of them (never moved back), whoever won. The whole call is a
        small, fixed number of round trips, whatever the number of occurrences.

        ``pending`` (one flag per occurrence): each claim won whose flag is set is left
        pending its send, in the same step as the claim, leased to ``owner`` for ``lease``
        on the store's clock (``settle_many``, ``take_over``).
        """

    @abstractmethod
    def settle_many(
        self, occurrences: Sequence[Occurrence], owner: str, *, keep: timedelta | None = None
    ) -> list[bool]:
        """End the pending sends of ``occurrences`` that ``owner`` holds, in one round trip
        (a few on a cluster). Each answer is False only where another replica holds the send:
        it took it over (atomic with ``take_over``: of a claimer settling and a replica taking
        over, exactly one wins), and it is pending or settled by that replica. Else True:
        settled now, settled by ``owner`` before (a settle whose answer was lost, asked
        again), or never pending (a claim made without the flag, or that the store could not
        leave pending): the caller's to send or run. A lease that ran out but that nobody has
        taken over yet is still its owner's to settle. A settled send leaves a marker naming
        who settled it, kept as long as the claim (``CLAIM_TTL``), so that a slow claimer
        asking after a taker settled is still told False.

        With ``keep``, those pending that ``owner`` holds stay pending, leased to it for
        ``keep`` more from now on the store's clock: a claimer still sending (retrying its
        broker) renews its lease so, and learns which another replica took over meanwhile
        (False). An occurrence given twice is answered for its first mention and False after.
        """

    @abstractmethod
    def take_over(
        self, owner: str, *, lease: timedelta = PENDING_LEASE, most: int = TAKE_OVER_MOST
    ) -> list[tuple[str, str]]:
        """Take over up to ``most`` pending sends whose lease ran out (oldest first), leasing
        each to ``owner`` for ``lease``, in one round trip (one per node of a cluster).

        Atomic per pending send: of concurrent callers, and of a caller and the owner
        settling it, one gets it. Returns each taken ``(claim key, previous owner)``; the key
        is store data, to be parsed (``keys.parse_claim_key``), and the taker settles what it
        took once it has sent it, run it, or found it cannot.
        """

    @staticmethod
    def _first_of(
        occurrences: Sequence[Occurrence], keys: set[str], *, held: bool = True
    ) -> list[bool]:
        """A batch's answer, each claim key answered once (by its first mention; False
        after): for the first mention, whether its key is in ``keys`` (``held``), or is not
        (not ``held``: ``keys`` are those to answer False)."""
        answers, seen = [], set()
        for occurrence in occurrences:
            key = occurrence.claim_key
            answers.append((key in keys) == held and key not in seen)
            seen.add(key)
        return answers

    def claim(self, occurrence: Occurrence, owner: str, *, ttl: timedelta = CLAIM_TTL) -> bool:
        """Claim one occurrence; see ``claim_many``."""
        return self.claim_many([occurrence], owner, ttl=ttl)[0]

    def claimed_by(self, occurrence: Occurrence) -> str | None:
        """Who holds the claim of ``occurrence``, or None when nobody does (or it expired)."""
        return self.holder(occurrence.claim_key)

    def claimed_by_many(self, occurrences: Sequence[Occurrence]) -> list[str | None]:
        """``claimed_by`` for each occurrence, one answer each, in a small, fixed number of
        round trips where the store can (a dashboard strip asks for up to 50)."""
        return self.holders([occurrence.claim_key for occurrence in occurrences])

    def holders(self, keys: Sequence[str]) -> list[str | None]:
        """``holder`` for each key, one answer each, in a small, fixed number of round trips
        where the store can (a dashboard counting the jobs running reads every job's lock)."""
        return [self.holder(key) for key in keys]

    def finish(self, occurrence: Occurrence, lock: tuple[str, str] | None = None) -> None:
        """Mark ``occurrence`` completed (kept as long as its claim), then release ``lock``
        (``(key, owner)``) when given. The mark is written before the lock is freed, so a
        redelivery of the occurrence that takes the lock next always sees it.

        Raises:
            StoreUnavailable: neither was done, or only the mark was (the lock then expires).
        """
        self.acquire(done_key(occurrence), keys.DONE, CLAIM_TTL)
        if lock is not None:
            self.release(*lock)

    def finished(self, occurrence: Occurrence) -> bool:
        """Whether a run of ``occurrence`` completed (``finish``): its mark holds
        ``completed``; another program's value there marks nothing."""
        return self.holder(done_key(occurrence)) == keys.DONE

    def admit(
        self,
        key: str,
        owner: str,
        ttl: timedelta,
        *,
        unless_completed: Occurrence | None = None,
        began: tuple[str, str] | None = None,
    ) -> Admission:
        """Take the overlap lock ``key`` for ``owner`` with its fencing token
        (``acquire_fenced``), unless ``unless_completed``'s completion mark is there
        (``finished``), or ``began`` (``(mark key, keys.began_mark(copy, nonce))``) finds a
        began mark that no try of the same copy wrote (``keys.began_by``; another program's
        value refuses too); with ``began``, the lock is taken together with the mark (kept
        for ``CLAIM_TTL``) unless an earlier try of the same copy wrote it.

        As one atomic step where the store can (Redis: one script, one round trip); here,
        the steps one after another, the marks read again under the lock: a completing run
        writes its mark before it frees the lock, and a copy marks only while it holds it.
        A refusal leaves the lock as it found it (here: taken, then released again).

        Raises:
            StoreUnavailable: it is not known what was taken: the caller releases the lock
                and takes back the mark (``owner`` and the mark's value are its own).
            FenceUnreadable: the lock's counter holds what no token can follow (nothing taken).
        """
        if unless_completed is not None and self.finished(unless_completed):
            return Admission("completed")
        token = self.acquire_fenced(key, owner, ttl)
        if token is None:
            return Admission("held", holder=self.holder(key))
        if unless_completed is not None and self.finished(unless_completed):
            self.release(key, owner)  # marked between the two reads: its run completed
            return Admission("completed")
        if began is None:
            return Admission("taken", token=token)
        mark, mine = began
        if self.acquire(mark, mine, CLAIM_TTL):
            return Admission("taken", token=token, marked=True)
        first = self.holder(mark)
        if first is not None and keys.began_by(first, mine.partition("|")[0]):
            return Admission("taken", token=token)  # an earlier try of this copy's
        self.release(key, owner)
        return Admission("began", holder=first)

    @abstractmethod
    def holder(self, key: str) -> str | None:
        """The owner of a claim or lock ``key``, or None when nobody holds it (or it expired).
        Read only: for records, audits and revoked sessions (a ``skipped-overlap`` names the
        run holding the lock), never to decide who may take it (``acquire`` does that,
        atomically)."""

    def _summarize(self, records: Sequence[RunRecord]) -> None:
        """Raise the run summaries of ``records``, after they were written (for a store whose
        ``record_many`` cannot do it in its own round trip). Never raises: the records are
        written, and a summary not raised is mended by the job's next record (or read from
        its history by the dashboard's count), so a failure here is logged, not given to the
        writer, which would write the records again."""
        ceiling_ms = run_summary.ceiling(datetime.now(UTC))
        for group, values in run_summary.summaries(records).items():
            try:
                self.raise_controls(group, values, ceiling_ms=ceiling_ms)
            except Exception as exc:  # noqa: BLE001 - the records are written; see above
                why = str(exc)[:300]
                inbound.warn_once(
                    log, "run-summary", group, why, "run summaries %s not updated: %s", group, why
                )

    def notify(self, channel: str) -> None:
        """Tell the processes that ``listen`` on ``channel`` that something changed, at once
        (best effort: a listener that misses it finds the change when it next looks).

        Raises:
            StoreUnavailable: the store could not be reached.
        """

    def listen(self, channel: str, wake: Callable[[], None]) -> Callable[[], None] | None:
        """Call ``wake`` (from a thread of the store's) whenever ``channel`` is notified, and
        once each time listening starts again after a lost connection, until the function
        returned is called. None when this store cannot push: the caller polls."""
        return None

    def latest_runs(self, jobs: Sequence[str]) -> dict[str, RunRecord]:
        """The newest run record of each of ``jobs`` that has a readable one, in one round
        trip where the store can (the LAST column of a page of jobs).

        Raises:
            StoreUnavailable: the store could not be reached.
        """
        found = {}
        for job in dict.fromkeys(jobs):
            newest = self.history(job, 1)
            if newest:
                found[job] = newest[0]
        return found

    @abstractmethod
    def last_claimed(self, jobs: Sequence[str]) -> dict[str, datetime]:
        """The latest claimed occurrence of each job that has one, in one round trip."""

    @abstractmethod
    def acquire(self, key: str, owner: str, ttl: timedelta) -> bool:
        """Take the lock ``key`` for ``ttl`` if nobody holds it or its holder's time ran out.

        Atomic: of concurrent callers at most one gets True. A holder calling again gets
        False; it extends instead.
        """

    @abstractmethod
    def acquire_fenced(self, key: str, owner: str, ttl: timedelta) -> int | None:
        """``acquire``, and in the same atomic step the lock's fencing token: greater than
        the token of every earlier taking of ``key`` (1 or more). None when it was not taken;
        0 when it was taken by a store that cannot keep tokens (a Postgres schema whose own
        migrations have not added the fences table: said once at start).

        Of two takings of one key, the later one always gets the greater token, whoever
        took it and however the lock ended in between (released or expired), so a handler
        can pass it with its writes and a write carrying a smaller token than one already
        made is refused (docs/jobs.md): a run whose lock ran out while it was frozen cannot
        overwrite what the next run wrote.
        """

    @abstractmethod
    def extend(self, key: str, owner: str, ttl: timedelta) -> bool:
        """Give the lock ``ttl`` more from now, only if ``owner`` still holds it."""

    @abstractmethod
    def release(self, key: str, owner: str) -> bool:
        """Drop the lock, only if ``owner`` holds it; returns whether it did."""

    @abstractmethod
    def record_many(self, records: Sequence[RunRecord]) -> None:
        """Append run records to their jobs' histories, in one round trip, and raise each
        job's run summary (``run_summary``: ``latest-run`` and ``latest-end``) where they
        are newer, in that round trip where the store can.

        Each job's history keeps its newest ``history_limit`` records (an option of every
        store, 1,000 by default).
        """

    def record(self, record: RunRecord) -> None:
        """Append one run record; see ``record_many``."""
        self.record_many([record])

    @abstractmethod
    def history(self, job: str, n: int = 20) -> list[RunRecord]:
        """The newest ``n`` run records of ``job``, newest first."""

    def histories(self, jobs: Sequence[str], n: int = 20) -> dict[str, list[RunRecord]]:
        """``history`` of each of ``jobs`` (each once), in one round trip where the store can
        (a dashboard page of 50 jobs): Redis a pipeline, PostgreSQL one statement. This
        default reads them one after another."""
        return {job: self.history(job, n) for job in dict.fromkeys(jobs)}

    @abstractmethod
    def heartbeat(
        self, replica: str, ttl: timedelta, *, clock_offset_ms: float | None = None
    ) -> datetime | None:
        """Record ``replica`` as alive for ``ttl``, with the clock offset it last measured.

        Returns:
            The store's own time when it recorded the heartbeat, for the replica to measure
            its clock against; None for a store with no clock of its own (SQLite on this
            host, memory).
        """

    @abstractmethod
    def replicas(self) -> list[ReplicaInfo]:
        """The replicas whose last heartbeat has not expired, by id."""

    @abstractmethod
    def close(self) -> None:
        """Close what the store created; borrowed clients stay open."""

    def ensure_cluster_capable(self) -> None:
        """Raise ``ConfigError`` when cluster jobs must not start on this store."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url}>"


def done_key(occurrence: Occurrence) -> str:
    """The store key that says an occurrence completed."""
    return keys.done_key(occurrence.job, occurrence.epoch_ms)


def ttl_ms(ttl: timedelta) -> int:
    """A lifetime in whole milliseconds, at least 1."""
    return max(1, int(ttl.total_seconds() * 1000))
