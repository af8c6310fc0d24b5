"""What to do with occurrences that came due: run them, run the latest missed one, or record
them missed. Pure functions of the job, the due times and the time now, so the rules are
tested with a fake clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from cron_bridge.context import Trigger
from cron_bridge.jobs import Job, Occurrence

__all__ = ["CATCH_UP_WINDOW", "Planned", "catch_up", "plan", "plan_one"]

CATCH_UP_WINDOW = timedelta(hours=24)
MISSED_KEPT = 100  # missed occurrences of one job recorded one by one; older ones are counted


@dataclass(frozen=True, kw_only=True, slots=True)
class Planned:
    """One occurrence and what to do with it once claimed.

    Attributes:
        run: True to run it with ``trigger``; False to record it ``missed``.
        reason: why it is recorded ``missed`` when that is not plain lateness.
        pending: its claim was made pending its send (``Store.claim_many``): settled once it
            is sent, or right before an inline run starts (which does not start when another
            replica took it over).
        taken_from: the replica whose pending send this one took over (``beat.takeover``).
        attempt: the first attempt to make: past those the history counts, for a retryable
            inline run taken over from a replica that died in it.
    """

    job: Job
    occurrence: Occurrence
    trigger: Trigger
    run: bool
    reason: str | None = None
    pending: bool = False
    taken_from: str | None = None
    attempt: int = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """The occurrences to claim, and how many older missed ones were only counted."""

    items: list[Planned]
    dropped: int = 0


def plan(job: Job, due: Iterable[datetime], now: datetime) -> Plan:
    """Decide on occurrences of ``job`` that are due at ``now`` (oldest first).

    An occurrence fired within ``misfire_grace`` of its time runs with trigger ``schedule``.
    Later ones are misfires: ``misfire="skip"`` records them ``missed``; ``"run-once"`` runs
    the latest of them with trigger ``misfire`` unless an on-time occurrence runs now anyway,
    and records the rest ``missed``. Only the newest ``MISSED_KEPT`` misfires are listed.
    """
    kept: deque[datetime] = deque(maxlen=MISSED_KEPT)
    seen_late = 0
    on_time: list[datetime] = []
    for scheduled in due:
        if now - job.fire_at(scheduled) <= job.misfire_grace:  # late from its jittered time
            on_time.append(scheduled)
        else:
            kept.append(scheduled)
            seen_late += 1
    late = list(kept)
    rerun = late[-1] if late and job.misfire == "run-once" and not on_time else None
    items = [
        Planned(
            job=job,
            occurrence=job.occurrence(scheduled),
            trigger="misfire" if scheduled == rerun else "schedule",
            run=scheduled == rerun,
        )
        for scheduled in late
    ]
    items += [
        Planned(job=job, occurrence=job.occurrence(t), trigger="schedule", run=True)
        for t in on_time
    ]
    return Plan(items=_coalesced(job, items), dropped=seen_late - len(late))


def plan_one(job: Job, scheduled: datetime, now: datetime) -> Plan:
    """``plan`` for one occurrence, the one case a burst is made of: the same rules, without
    the bookkeeping that several occurrences of one job need (nothing to coalesce or drop)."""
    run = now - job.fire_at(scheduled) <= job.misfire_grace
    trigger: Trigger = "schedule"
    if not run and job.misfire == "run-once":
        run, trigger = True, "misfire"
    return Plan(
        items=[Planned(job=job, occurrence=job.occurrence(scheduled), trigger=trigger, run=run)]
    )


def _coalesced(job: Job, items: list[Planned]) -> list[Planned]:
    """Several occurrences of one ``overlap="skip"`` job due together (after a store outage,
    a catch-up, a frozen replica, a loop that fell behind) would all be dispatched at once,
    and all but the first would then record ``skipped-overlap`` behind it. With ``coalesce``
    (the default) they are merged on purpose: the latest runs, the others are recorded
    ``missed`` with the reason ``coalesced into <latest>``."""
    running = [item for item in items if item.run]
    if not job.coalesce or job.overlap != "skip" or len(running) < 2:
        return items
    latest = running[-1]
    reason = f"coalesced into {latest.occurrence.id}"
    return [
        item if not item.run or item is latest else replace(item, run=False, reason=reason)
        for item in items
    ]


def catch_up(jobs: Sequence[Job], last_claimed: dict[str, datetime], now: datetime) -> list[Plan]:
    """Plans for what cluster jobs missed while no replica (or no store) was up.

    Only jobs with a last claimed occurrence are caught up on, over at most the last 24 h;
    a job the store has no record of starts with its next occurrence.
    """
    plans = []
    for job in jobs:
        last = last_claimed.get(job.name)
        if last is None or not job.is_cluster or job.on_demand:
            continue
        since = max(last, now - CATCH_UP_WINDOW)
        plans.append(plan(job, job.schedule.occurrences(since, now), now))
    return plans
