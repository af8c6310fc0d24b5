"""The records a store keeps, and how what it reads becomes them: a run's ``RunRecord`` (its
outcome, its bounded texts, its traceback cut to what explains it), a live replica's
``ReplicaInfo``, the last claimed time of each job, and a control group's records.

Every reader here takes what a store's server sent (already text by ``inbound.text``) and
gives validated values; a row it cannot read is skipped with one warning, never raised.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar, get_args

from cron_bridge.plumbing import inbound
from cron_bridge.plumbing.redaction import redact_head, redact_tail, redact_text
from cron_bridge.schedules import EPOCH

__all__ = [
    "CONTROLS_BYTES",
    "CONTROLS_MAX",
    "CONTROL_KEY_MAX",
    "FIRST_KEYS_MAX",
    "LONG_TEXT_MAX",
    "ORDERED_GROUPS",
    "PLAIN_TASK",
    "REPLICA_ID_MAX",
    "REPLICA_TTL_MAX",
    "TRACEBACK_MAX",
    "UNREADABLE",
    "Outcome",
    "ReplicaInfo",
    "RunRecord",
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

# The reason on the ``enqueued`` record of a drop-in sender's send (a ``beat_schedule`` entry,
# an ``rq cron`` registration, a periodiq actor): its task runs unchanged, with no guard to
# record a completion, so the audit counts it sent, not never completed.
PLAIN_TASK = "plain task: the worker records no completion"

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
FIRST_KEYS_MAX = 2**31 - 1
"""The most keys ``first_control_keys`` is asked for, whatever its caller asks (a listing's
``--offset`` far past any group): what every store's integers hold (SQL's 64 bits, a Redis
script's numbers, doubles sent in exponent form from 1e17), and more than any group holds."""
ORDERED_GROUPS = frozenset({"schedule"})
"""Control groups whose first keys in order are read as a page (``first_control_keys``: the
stored schedules of a listing). A store that cannot read its records in order (Redis) keeps an
ordered index of their keys beside them, written with them; the other groups are read whole."""
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
