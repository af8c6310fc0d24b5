"""Runs asked for by an operator rather than a timer: ``Beat.trigger`` (the CLI's ``run``, the
HTTP trigger, the dashboard) and the catch-up of ``resume --catch-up``. Each goes through a
claim, so the same request made twice, or made on two replicas, runs once, and then through
the dispatcher's bounded pool under the job's overlap rule, as a timer's run does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cron_bridge.beat.in_flight import InFlight
from cron_bridge.beat.planning import Planned
from cron_bridge.beat.store_health import Records
from cron_bridge.clock import Clock
from cron_bridge.context import Trigger
from cron_bridge.control import pause as control
from cron_bridge.errors import StoreUnavailable
from cron_bridge.jobs import CLAIM_TTL, Job, Occurrence
from cron_bridge.schedules import previous_occurrence
from cron_bridge.stores import Store
from cron_bridge.stores.records import Outcome, RunRecord

__all__ = ["RunResult", "Triggers"]


@dataclass(frozen=True, kw_only=True, slots=True)
class RunResult:
    """What a manual run did: the outcome of the run, or of the claim that stopped it."""

    name: str
    occurrence_id: str
    outcome: Outcome
    trigger: Trigger
    replica: str
    duration_ms: float | None = None
    reason: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "occurrence_id": self.occurrence_id,
            "outcome": self.outcome,
            "duration_ms": self.duration_ms,
            "trigger": self.trigger,
            "replica": self.replica,
            "reason": self.reason,
            "error": self.error,
        }


class Triggers:
    """The manual runs of one beat replica."""

    def __init__(
        self,
        store: Store,
        replica: str,
        *,
        clock: Clock,
        dispatcher: InFlight,
        records: Records,
        forget: Callable[[str], None] = lambda key: None,
    ) -> None:
        self.store = store
        self.replica = replica
        self.clock = clock
        self._dispatcher = dispatcher
        self._records = records
        # Told the claim key before a manual claim: the schedule's unanswered claim of the
        # same occurrence must not also be read as won (cron_bridge.beat.claiming.Unanswered).
        self._forget = forget

    def trigger(self, job: Job, *, force: bool = False) -> RunResult:
        """Claim the occurrence ``job``'s schedule is at (``force``: a fresh one, now) and
        run it."""
        now = self.clock.now()
        at = now if force else (previous_occurrence(job.schedule, now) or now)
        item = Planned(
            job=job,
            occurrence=Occurrence(job=job.name, scheduled_at=at),
            trigger="manual",
            run=True,
        )
        self._forget(item.occurrence.claim_key)
        return self._run_claimed(item, lambda: self.store.claim(item.occurrence, self.replica))

    def catch_up_paused(self, job: Job, pause: control.Pause) -> RunResult | None:
        """The latest occurrence ``pause`` held back, once, with trigger ``misfire``."""
        occurrence = control.latest_paused(self.store, pause)
        if occurrence is None:
            return None
        item = Planned(job=job, occurrence=occurrence, trigger="misfire", run=True)
        # Its own claim was taken by the replica that recorded it paused: a key of its own.
        key = control.catch_up_key(occurrence)
        return self._run_claimed(item, lambda: self.store.acquire(key, self.replica, CLAIM_TTL))

    def _run_claimed(self, item: Planned, claim: Callable[[], bool]) -> RunResult:
        if item.job.is_cluster and not claim():
            record = self._records.of(item, "skipped-claimed")
            self._records.write([record])
            return _result(record, item.trigger)
        # In the bounded pool and under the overlap rule, as a timer run: concurrent triggers
        # of an instance job run it once and record the others skipped-overlap.
        ran = self._dispatcher.run_now(item)
        if ran is None:
            raise StoreUnavailable("the overlap lock could not be asked for, or the beat stops")
        return _result(ran, item.trigger)


def _result(record: RunRecord, trigger: Trigger) -> RunResult:
    return RunResult(
        name=record.job,
        occurrence_id=record.occurrence_id,
        outcome=record.outcome,
        trigger=trigger,
        replica=record.replica,
        duration_ms=record.duration_ms,
        reason=record.reason,
        error=record.error,
    )
