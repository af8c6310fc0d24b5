"""What the store says about one occurrence, and about every occurrence of a job in a window.

The proof operators ask for: each occurrence completed once. ``occurrence_report`` shows who
claimed an occurrence, who skipped it, its enqueue and every attempt; ``audit`` counts the
occurrences of a window with zero, one or more completed runs.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cron_bridge.control import lost_claims
from cron_bridge.errors import StoreUnavailable
from cron_bridge.jobs import Occurrence
from cron_bridge.schedules import Schedule
from cron_bridge.stores.base import Store
from cron_bridge.stores.records import PLAIN_TASK, RunRecord

__all__ = ["Audit", "OccurrenceReport", "audit", "final_outcome", "occurrence_report"]

log = logging.getLogger(__name__)

# What a record says about how an occurrence ended, strongest first.
_ENDED = {"failed", "aborted", "skipped-overlap", "skipped-paused", "missed"}


def final_outcome(records: list[RunRecord]) -> str:
    """``completed`` if any run completed (a ``skipped-completed`` redelivery never changes
    that); else the latest outcome that ended the occurrence (failed, aborted,
    skipped-overlap, missed); else ``enqueued`` (in flight, or lost on the
    way); else ``skipped-claimed``, or ``none`` without records."""
    if any(r.outcome == "completed" for r in records):
        return "completed"
    ended = [r for r in records if r.outcome in _ENDED]
    if ended:
        return max(ended, key=lambda r: r.started_at).outcome
    if any(r.outcome == "enqueued" for r in records):
        return "enqueued"
    return "skipped-claimed" if records else "none"


CLAIMS_LOOKED_UP = 1000  # claim holders asked for per audit (one store call each)


def explain(
    store: Store,
    occurrence: Occurrence,
    records: list[RunRecord],
    *,
    look_up: bool = True,
    ledgers: Callable[[], lost_claims.LostClaims] | None = None,
) -> str:
    """What became of an occurrence that never completed, from its records and its claim."""
    latest = {r.outcome: r for r in sorted(records, key=lambda r: r.started_at)}
    for outcome in ("failed", "aborted", "skipped-overlap", "skipped-paused", "missed"):
        record = latest.get(outcome)
        if record is not None:
            detail = "; ".join(text for text in (record.error, record.reason) if text)
            return f"{outcome} on {record.replica}" + (f": {detail}" if detail else "")
    if "enqueued" in latest and latest["enqueued"].reason == PLAIN_TASK:
        return f"sent by {latest['enqueued'].replica}; completion not recorded (plain task)"
    if "enqueued" in latest:
        return (
            f"enqueued by {latest['enqueued'].replica}, no worker recorded a run (still "
            "queued, or lost with its message)"
        )
    if not look_up:
        return "no record of a run (claim not looked up)"
    try:
        holder = store.claimed_by(occurrence)
    except StoreUnavailable:
        holder = None
    if holder is not None:
        return f"claimed by {holder}, which recorded nothing (it died before it enqueued)"
    if records:
        return "claimed, but the claim has expired; no record of a run"
    try:
        present = (ledgers() if ledgers else lost_claims.LostClaims(store)).who(occurrence)
    except StoreUnavailable:
        present = []
    if present:
        return (
            f"no record of a run; {', '.join(present)} asked for it (their ledgers), and "
            "the claim has expired: claimed by one that died before it enqueued"
        )
    return "never claimed (no replica up to claim it, or the store was down)"


def _sent_plain(records: list[RunRecord]) -> bool:
    """Whether the occurrence was sent as a plain task and nothing says it ended otherwise."""
    sent = any(r.outcome == "enqueued" and r.reason == PLAIN_TASK for r in records)
    return sent and not any(r.outcome in _ENDED for r in records)


@dataclass(frozen=True, kw_only=True)
class OccurrenceReport:
    occurrence_id: str
    job: str
    scheduled_at: datetime
    claimed_by: str | None
    records: list[RunRecord]  # oldest first
    final: str

    def to_json(self) -> dict[str, Any]:
        return {
            "occurrence_id": self.occurrence_id,
            "job": self.job,
            "scheduled_at": self.scheduled_at.isoformat(),
            "claimed_by": self.claimed_by,
            "records": [r.to_json() for r in self.records],
            "final": self.final,
        }


def occurrence_report(store: Store, occurrence: Occurrence) -> OccurrenceReport:
    """Everything the store kept about one occurrence."""
    records = store.history(occurrence.job, store.history_limit)
    mine = [r for r in records if r.occurrence_id == occurrence.id]
    # The replicas that stood aside (their ledgers), so that a claim whose winner wrote
    # nothing still shows who was there.
    mine += lost_claims.LostClaims(store).records(occurrence, mine)
    mine.sort(key=lambda r: r.started_at)
    return OccurrenceReport(
        occurrence_id=occurrence.id,
        job=occurrence.job,
        scheduled_at=occurrence.scheduled_at,
        claimed_by=store.claimed_by(occurrence),
        records=mine,
        final=final_outcome(mine),
    )


@dataclass(kw_only=True)
class Audit:
    """Occurrences of ``job`` due in (start, end], by how many runs completed.

    Attributes:
        from_schedule: the occurrences came from the job's schedule (so occurrences that left
            no record at all are counted); otherwise from the records in the store.
        never: occurrences with no completed run, with the outcomes they did record.
        why: for each of ``never``, what became of it, in words an operator can judge: an
            accepted loss (missed, failed, aborted, skipped for an overlap, claimed by a replica
            that died before it enqueued) or one to look into (enqueued and never run, never
            claimed).
        more: occurrences with more than one completed run, with how many.
        sent: occurrences sent as plain tasks (a drop-in's ``beat_schedule`` entry, ``rq
            cron`` registration or periodiq actor, whose worker runs no guard and records no
            completion), with no completed run: sent once, which is all the store can know;
            not counted in ``never``.
        beyond_history: occurrences older than the oldest record the store still keeps (its
            history is full), which cannot be judged.
        first_seen: when a replica first declared the job, when it is after ``start``: the
            occurrences due before it are left out (no replica knew the job).
    """

    job: str
    start: datetime
    end: datetime
    from_schedule: bool
    occurrences: int = 0
    once: int = 0
    never: dict[str, list[str]] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)
    more: dict[str, int] = field(default_factory=dict)
    sent: int = 0
    beyond_history: int = 0
    first_seen: datetime | None = None

    @property
    def clean(self) -> bool:
        return not self.never and not self.more

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "from_schedule": self.from_schedule,
            "occurrences": self.occurrences,
            "completed_once": self.once,
            "never_completed": self.never,
            "why_never_completed": self.why,
            "completed_more_than_once": self.more,
            "sent_plain_task": self.sent,
            "older_than_kept_history": self.beyond_history,
            "first_seen": None if self.first_seen is None else self.first_seen.isoformat(),
        }


def audit(
    store: Store,
    job: str,
    start: datetime,
    end: datetime,
    schedule: Schedule | None = None,
    *,
    first_seen: datetime | None = None,
) -> Audit:
    """Count the occurrences of ``job`` due in (start, end] by completed runs.

    With the job's ``schedule`` every occurrence it should have had is counted, including ones
    that left no record; without it, the occurrences found in the records. With ``first_seen``
    (when a replica first declared the job) the window starts there if that is later.
    """
    asked_from = start
    if first_seen is not None and first_seen > start:
        start = first_seen
    records = store.history(job, store.history_limit)
    by_occurrence: dict[str, list[RunRecord]] = defaultdict(list)
    for record in records:
        by_occurrence[record.occurrence_id].append(record)
    history_full = len(records) >= store.history_limit
    oldest = min((r.started_at for r in records), default=None)
    if schedule is not None:
        expected = [Occurrence(job=job, scheduled_at=t) for t in schedule.occurrences(start, end)]
    else:
        expected = []
        for occurrence_id in by_occurrence:
            try:
                occurrence = Occurrence.parse(occurrence_id)
            except ValueError:
                log.warning(
                    "audit of %s: skipping a record of a malformed occurrence %r",
                    job,
                    occurrence_id[:300],
                )
                continue
            if occurrence.job == job and start < occurrence.scheduled_at <= end:
                expected.append(occurrence)
        expected.sort(key=lambda o: o.scheduled_at)
    result = Audit(
        job=job,
        start=asked_from,
        end=end,
        from_schedule=schedule is not None,
        first_seen=start if start != asked_from else None,
    )
    ledgers = functools.cache(lambda: lost_claims.LostClaims(store))  # read once, if ever needed
    for occurrence in expected:
        if history_full and oldest is not None and occurrence.scheduled_at < oldest:
            result.beyond_history += 1
            continue
        result.occurrences += 1
        kept = by_occurrence.get(occurrence.id, [])
        completed = sum(1 for r in kept if r.outcome == "completed")
        if completed == 1:
            result.once += 1
        elif completed == 0 and _sent_plain(kept):
            result.sent += 1
        elif completed == 0:
            result.never[occurrence.id] = sorted({r.outcome for r in kept})
            look_up = len(result.why) < CLAIMS_LOOKED_UP
            result.why[occurrence.id] = explain(
                store, occurrence, kept, look_up=look_up, ledgers=ledgers
            )
        else:
            result.more[occurrence.id] = completed
    return result
