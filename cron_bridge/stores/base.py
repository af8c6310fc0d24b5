"""The store contract every backend honours, and the records it keeps.

A store holds five kinds of state:

- **claims** ``occ:<job>:<epoch ms>``: created once per occurrence by the first replica to
  ask, never released, expiring after 48 h. Creating one is a single atomic operation.
- **locks** ``active:<job>``: taken with a lifetime, extended and released only by their
  owner; an expired lock can be taken by anyone. Other keys taken once for a lifetime are
  held the same way (``acquire``): a paused occurrence's catch-up ``catchup:<job>:<epoch ms>``
  and a revoked dashboard session ``session-revoked:<session id>``.
- **completion marks** ``done:<job>:<epoch ms>``: written when a queue delivery completes,
  before its lock is freed, and kept as long as the claim (``finish``), so that a second
  delivery of the message is acknowledged, never run (``finished``).
- **records**: per job, the last claimed occurrence and the run history; and the live
  replicas from their heartbeats.
- **controls**: operator and shared state, one JSON text per key within a group: the paused
  jobs (group ``pause``, read by every replica before it claims), a job's change log
  (``change:<job>``), the stored schedules (``schedule``) and their change feed
  (``schedule-feed``), the jobs published for dashboards (``jobs``), and the ledgers of the
  replicas that stood aside (``aside``, ``aside-jobs``). A group is read in one round trip, up
  to ``CONTROLS_MAX`` records and ``CONTROLS_BYTES`` of values (``control_records``).

Everything a store reads is bytes from its server until ``inbound.text`` (keys and values)
and the record parsers here turn it into validated values; what they cannot is skipped with
one warning per record, never raised.

Every method either does what it says or raises ``StoreUnavailable``; none of them hangs past
the store's connect or socket timeout.
"""

from __future__ import annotations

import logging
import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, ClassVar, Literal, Self, TypeVar, get_args

from cron_bridge.jobs import CLAIM_TTL, Occurrence
from cron_bridge.plumbing import inbound, keys
from cron_bridge.plumbing.redaction import redact_head, redact_tail, redact_text
from cron_bridge.schedules import EPOCH

__all__ = [
    "CONTROLS_BYTES",
    "CONTROLS_MAX",
    "REPLICA_TTL_MAX",
    "UNREADABLE",
    "Outcome",
    "ReplicaInfo",
    "RunRecord",
    "Store",
    "StoreStats",
    "control_records",
    "last_claimed_times",
    "live_replica",
    "readable",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

_TEXT_MAX = 1000  # job names, occurrence ids, triggers and replica ids are far shorter
LONG_TEXT_MAX = 4000  # a record's reason and error, as kept and shown
TRACEBACK_MAX = 8000  # a failed run's traceback: its last frames and the error, kept

Outcome = Literal[
    "enqueued",
    "completed",
    "failed",
    "skipped-claimed",
    "skipped-overlap",
    "skipped-completed",
    "skipped-paused",
    "missed",
    "aborted",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class RunRecord:
    """What happened to one occurrence on one replica or worker, once.

    Attributes:
        reason: for ``aborted``: ``lock-lost``, ``shutdown`` or ``timeout``.
        duration_ms: how long the handler ran, when it ran.
        error: the error of a ``failed`` run, as ``Type: message``.
        traceback: the traceback of a ``failed`` run, its innermost frames kept when long.

    ``error`` and ``traceback`` are redacted when made (a URL's password, ``password=...``):
    they are shown on the dashboard and kept in the store.
    """

    job: str
    occurrence_id: str
    outcome: Outcome
    trigger: str
    replica: str
    started_at: datetime
    attempt: int = 1
    reason: str | None = None
    duration_ms: float | None = None
    error: str | None = None
    traceback: str | None = None

    def __post_init__(self) -> None:
        for name in ("job", "occurrence_id", "trigger", "replica"):
            value = getattr(self, name)
            if not isinstance(value, str) or not 0 < len(value) <= _TEXT_MAX:
                raise ValueError(f"run record: {name} must be a short text, got {value!r:.80}")
        for name in ("reason", "error", "traceback"):
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, str):
                raise ValueError(f"run record: {name} must be text, got {value!r:.80}")
            # Cut, then redacted (the redaction functions cut first): what a record costs to
            # make, and to read back, is bounded by what it keeps.
            if name == "traceback":
                value = _kept_traceback(value)
            elif len(value) > LONG_TEXT_MAX:  # a huge message
                kept = LONG_TEXT_MAX - 1
                value = (value[:kept] if name == "reason" else redact_head(value, kept)) + "…"
            elif name == "error":
                value = redact_text(value)
            object.__setattr__(self, name, value)
        if self.outcome not in _OUTCOMES:
            raise ValueError(f"run record: unknown outcome {self.outcome!r:.80}")
        if isinstance(self.attempt, bool) or not isinstance(self.attempt, int) or self.attempt < 1:
            raise ValueError(f"run record: attempt must be 1 or more, got {self.attempt!r:.80}")
        if inbound.moment(self.started_at) is None:
            raise ValueError(
                "run record: started_at must be an aware time from 1970 to 9999, "
                f"got {self.started_at!r:.80}"
            )
        if self.duration_ms is not None and (
            isinstance(self.duration_ms, bool)
            or not isinstance(self.duration_ms, int | float)
            or not -inbound.INT_MAX <= self.duration_ms <= inbound.INT_MAX  # NaN: False
        ):
            raise ValueError(f"run record: bad duration_ms {self.duration_ms!r:.80}")

    def to_json(self) -> dict[str, Any]:
        # Field by field: dataclasses.asdict deep-copies every value, a sixth of a burst's
        # record writing.
        data = {name: getattr(self, name) for name in _FIELDS}
        data["started_at"] = self.started_at.isoformat()
        if self.traceback is None:
            # Written only when there is one: a replica that predates the field still reads it.
            del data["traceback"]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        """The record ``to_json`` wrote.

        Raises:
            ValueError: anything else (a record written by someone else, or damaged).
        """
        if not isinstance(data, dict) or not isinstance(data.get("started_at"), str):
            raise ValueError("run record: not a JSON object with started_at")
        if len(data["started_at"]) > 64:
            raise ValueError("run record: started_at is no time")
        try:
            return cls(**{**data, "started_at": datetime.fromisoformat(data["started_at"])})
        except TypeError as exc:  # unknown or missing fields
            raise ValueError(f"run record: {exc}") from None


_FIELDS = tuple(f.name for f in fields(RunRecord))
_OUTCOMES = frozenset(get_args(Outcome))

CONTROLS_MAX = 10_000
"""Records of one control group a reader holds: as many jobs as a namespace publishes, as many
entries as the schedule feed keeps."""
CONTROLS_BYTES = 16 * inbound.MAX_BYTES
"""Bytes of values of one control group a reader holds (10,000 catalog entries take 3 MB)."""
CONTROL_KEY_MAX = 1000  # bytes of a control key: job names are 200 at most, replica ids 1,000
UNREADABLE = ""
"""What ``controls`` gives for a record it cannot hand over (bytes that are not UTF-8, a value
larger than ``inbound.MAX_BYTES`` or past ``CONTROLS_BYTES``): no reader takes the empty
text for a record, and its key is still there, so a pause that cannot be read still pauses."""


def control_records(
    pairs: Iterable[tuple[object, object]],
    group: str,
    *,
    most: int = CONTROLS_MAX,
    max_bytes: int = CONTROLS_BYTES,
    total: int | None = None,
) -> dict[str, str]:
    """A control group's records from ``(key, value)`` pairs as the server sent them (bytes,
    or text; a value of None: left out by the server for its size), bounded: the first
    ``most`` keys that are UTF-8 text of at most ``CONTROL_KEY_MAX`` bytes, each with its
    value while the values stay within ``max_bytes``, else ``UNREADABLE``. What is left out
    is said once (``total``: how many records the group holds, when the server said)."""
    where = f"controls:{group}"
    found: dict[str, str] = {}
    used = 0
    over = 0
    for raw_key, raw_value in pairs:
        key = inbound.text(raw_key, where, raw_key, max_bytes=CONTROL_KEY_MAX)
        if key is None:
            continue
        if len(found) >= most:
            over += 1
            continue
        value = None
        if raw_value is not None:
            value = inbound.text(raw_value, where, key)
        if value is not None and used + len(value) > max_bytes:  # characters: at most bytes
            over += 1
            value = None
        used += len(value or "")
        found[key] = UNREADABLE if value is None else value
    if total is not None:
        over = max(over, total - len(found))
    if over:
        inbound.warn_once(
            log,
            where,
            "bounds",
            (len(found), over),
            "control group %s holds "
            "more than a reader keeps (%d records, %d bytes of values): %d "
            "left out or unread",
            group,
            most,
            max_bytes,
            over,
        )
    return found


def _kept_traceback(text: str) -> str:
    """A traceback as a record keeps it, redacted: whole, or when long its first line (what it
    is) and its end: the innermost frames and the error, of which only the start when the
    error itself is long (a 10 MiB message would leave no frame)."""
    if len(text) <= TRACEBACK_MAX:
        return redact_text(text)
    end = text.find("\n", 0, 200)
    head = redact_head(text if end == -1 else text[:end], 200)
    room = TRACEBACK_MAX - len(head) - 3
    error_at = _error_start(text)
    if len(text) - error_at <= _ERROR_KEPT:
        return f"{head}\n…\n{redact_tail(text, room)}"
    error = redact_head(text[error_at : error_at + _ERROR_KEPT], _ERROR_KEPT - 1) + "…"
    if error_at + len(error) <= TRACEBACK_MAX:  # every frame fits
        return redact_text(text[:error_at]) + error
    return f"{head}\n…\n{redact_tail(text[:error_at], room - len(error))}{error}"


_ERROR_KEPT = 2000  # of a long traceback's error, after its innermost frames
_FRAME = '\n  File "'
_FRAME_LINES = 16  # a frame's source and its ^^^ marks: a few lines


def _error_start(text: str) -> int:
    """Where the error after the innermost frame of ``text`` starts; its end when there is no
    frame."""
    frame = text.rfind(_FRAME)
    if frame == -1:
        return len(text)
    line = text.find("\n", frame + 1)
    for _ in range(_FRAME_LINES):
        if line == -1 or not text.startswith("    ", line + 1):
            break
        line = text.find("\n", line + 1)
    return len(text) if line == -1 else line + 1


def last_claimed_times(rows: Iterable[tuple[str, object]], where: str) -> dict[str, datetime]:
    """Each job's last claimed occurrence from ``(job, epoch ms)`` pairs read from a store; a
    value no replica would write (a float, out of range, not a number) is left out, warned
    once: the job is then caught up on as if the store had no record of it."""
    found = {}
    for job, ms in rows:
        at = inbound.instant(ms)
        if at is None:
            inbound.warn_once(
                log,
                where,
                job,
                ms,
                "ignoring the last claimed occurrence of %.200r in %s: %.40r is no time",
                job,
                where,
                ms,
            )
            continue
        found[job] = at
    return found


def readable(raw: Iterable[T], parse: Callable[[T], RunRecord], where: str) -> list[RunRecord]:
    """The records of ``raw`` that ``parse`` can read; each one it cannot is logged and left
    out, so one bad record (written by a hostile or broken peer) never stops history, audit
    or the dashboard."""
    found = []
    for item in raw:
        try:
            found.append(parse(item))
        except (ValueError, TypeError, KeyError, ArithmeticError) as exc:
            inbound.warn_once(
                log,
                "runs",
                where,
                item,
                "skipping a run record in %s that cannot be read: %.300s",
                where,
                exc,
            )
    return found


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplicaInfo:
    """A replica that sent a heartbeat recently: alive until ``expires_at``.

    Attributes:
        clock_offset_ms: how far the store's clock was ahead of the replica's at its last
            heartbeat (None where the store has no clock of its own: SQLite, memory).
    """

    id: str
    expires_at: datetime
    clock_offset_ms: float | None = None


_ONE_MS = timedelta(milliseconds=1)
_OFFSET_MAX = 365 * 86_400_000  # a clock offset past a year (ms) is not a clock's: unknown
REPLICA_TTL_MAX = timedelta(days=1)
"""A heartbeat's lifetime is three heartbeat intervals: one promising more than this was not
written by a beat, and is neither shown nor kept."""
REPLICA_ID_MAX = 300


def live_replica(
    replica: object, expires_ms: object, now_ms: float, offset: object = None
) -> ReplicaInfo | None:
    """The replica a heartbeat row names when it is alive at ``now_ms`` and one a beat could
    have written: a short text id, an expiry in epoch ms within ``REPLICA_TTL_MAX`` of now, a
    finite clock offset (else none). None for anything else (logged once)."""
    if isinstance(replica, bytes):
        replica = inbound.text(replica, "replicas", replica, max_bytes=REPLICA_ID_MAX)
        if replica is None:
            return None
    try:
        expires = float(expires_ms)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):  # not a number, or past any float
        expires = math.nan
    limit = now_ms + REPLICA_TTL_MAX / _ONE_MS
    if not (isinstance(replica, str) and 0 < len(replica) <= REPLICA_ID_MAX):
        said = "skipping a replica heartbeat with a bad id %.80r"
        inbound.warn_once(log, "replicas", repr(replica)[:80], expires_ms, said, replica)
        return None
    if not now_ms < expires <= limit:  # NaN compares false
        if math.isfinite(expires) and expires <= now_ms:
            return None  # simply gone
        said = "skipping the heartbeat of %.200r: it promises life until %.40r"
        inbound.warn_once(log, "replicas", replica, expires_ms, said, replica, expires_ms)
        return None
    number = isinstance(offset, int | float) and not isinstance(offset, bool)
    # Compared, not math.isfinite(): an integer past a float's range raises OverflowError.
    finite = number and -_OFFSET_MAX <= offset <= _OFFSET_MAX  # type: ignore[operator]
    known = float(offset) if finite else None  # type: ignore[arg-type]
    at = EPOCH + round(expires) * _ONE_MS
    return ReplicaInfo(id=replica, expires_at=at, clock_offset_ms=known)


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


class Store(ABC):
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
        self, occurrences: Sequence[Occurrence], owner: str, *, ttl: timedelta = CLAIM_TTL
    ) -> list[bool]:
        """Claim occurrences; one answer per occurrence, True where this call won it.

        Each claim is atomic on its own: of any number of concurrent callers for one
        occurrence, exactly one gets True. A claim is never released; it may be taken again
        only after ``ttl``. Every job in ``occurrences`` has its last claimed occurrence
        advanced to the latest of them (never moved back), whoever won. The whole call is a
        small, fixed number of round trips, whatever the number of occurrences.
        """

    def claim(self, occurrence: Occurrence, owner: str, *, ttl: timedelta = CLAIM_TTL) -> bool:
        """Claim one occurrence; see ``claim_many``."""
        return self.claim_many([occurrence], owner, ttl=ttl)[0]

    def claimed_by(self, occurrence: Occurrence) -> str | None:
        """Who holds the claim of ``occurrence``, or None when nobody does (or it expired)."""
        return self.holder(occurrence.claim_key)

    def claimed_by_many(self, occurrences: Sequence[Occurrence]) -> list[str | None]:
        """``claimed_by`` for each occurrence, one answer each, in a small, fixed number of
        round trips where the store can (a dashboard strip asks for up to 50)."""
        return [self.claimed_by(occurrence) for occurrence in occurrences]

    def finish(self, occurrence: Occurrence, lock: tuple[str, str] | None = None) -> None:
        """Mark ``occurrence`` completed (kept as long as its claim), then release ``lock``
        (``(key, owner)``) when given. The mark is written before the lock is freed, so a
        redelivery of the occurrence that takes the lock next always sees it.

        Raises:
            StoreUnavailable: neither was done, or only the mark was (the lock then expires).
        """
        self.acquire(done_key(occurrence), "completed", CLAIM_TTL)
        if lock is not None:
            self.release(*lock)

    def finished(self, occurrence: Occurrence) -> bool:
        """Whether a run of ``occurrence`` completed (``finish``)."""
        return self.holder(done_key(occurrence)) is not None

    @abstractmethod
    def holder(self, key: str) -> str | None:
        """The owner of a claim or lock ``key``, or None when nobody holds it (or it expired).
        Read only: for records, audits and revoked sessions (a ``skipped-overlap`` names the
        run holding the lock), never to decide who may take it (``acquire`` does that,
        atomically)."""

    @abstractmethod
    def put_control(self, group: str, key: str, value: str | None) -> None:
        """Set the control record ``key`` of ``group`` to ``value`` (JSON text), or delete it
        with None."""

    def put_controls(self, group: str, values: Mapping[str, str]) -> None:
        """Set several control records of ``group`` at once: one round trip where the store
        can (a dashboard catalog of thousands of jobs), else one per record."""
        for key, value in values.items():
            self.put_control(group, key, value)

    @abstractmethod
    def add_control(self, group: str, key: str, value: str) -> bool:
        """Create the control record ``key`` of ``group`` with ``value`` unless it exists.

        Atomic: of concurrent callers for one key at most one gets True, and a record that
        exists is left as it is (False). A deleted record can be created again.
        """

    def notify(self, channel: str) -> None:  # noqa: B027 - a hook: stores without push poll
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

    @abstractmethod
    def controls(
        self, group: str, *, most: int = CONTROLS_MAX, max_bytes: int = CONTROLS_BYTES
    ) -> dict[str, str]:
        """The control records of ``group``, by key, in one round trip: at most ``most`` of
        them and ``max_bytes`` of their values, read no further than that where the server
        can (``control_records``: a value it cannot hand over is ``UNREADABLE``)."""

    @abstractmethod
    def control(self, group: str, key: str) -> str | None:
        """One control record of ``group``, or None (a worker reading one stored schedule);
        ``UNREADABLE`` when there is one that cannot be handed over."""

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
    def extend(self, key: str, owner: str, ttl: timedelta) -> bool:
        """Give the lock ``ttl`` more from now, only if ``owner`` still holds it."""

    @abstractmethod
    def release(self, key: str, owner: str) -> bool:
        """Drop the lock, only if ``owner`` holds it; returns whether it did."""

    @abstractmethod
    def record_many(self, records: Sequence[RunRecord]) -> None:
        """Append run records to their jobs' histories, in one round trip.

        Each job's history keeps its newest ``history_limit`` records (an option of every
        store, 1,000 by default).
        """

    def record(self, record: RunRecord) -> None:
        """Append one run record; see ``record_many``."""
        self.record_many([record])

    @abstractmethod
    def history(self, job: str, n: int = 20) -> list[RunRecord]:
        """The newest ``n`` run records of ``job``, newest first."""

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

    def ensure_cluster_capable(self) -> None:  # noqa: B027 - a hook: most stores accept all
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
