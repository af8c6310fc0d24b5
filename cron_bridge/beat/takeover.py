"""Taking over what a replica claimed and did not send: its pending sends whose lease ran out.

A claim of a job that ``takes_over`` is made pending its send (``Store.claim_many``), leased to
its claimer, and settled once it is sent or its inline run starts. A replica killed between the
two leaves it pending; every replica looks at each tick of its loop (at most once a second, at
least at every heartbeat) for pending sends whose lease ran out, takes them over (atomically:
one replica gets each) and sends them itself, marked as possibly sent before
(``Dispatch.again``), so that a copy the dead replica did send is refused on the worker, or
runs an inline one, whose start is settled first. One taken over past its ``misfire_grace`` is
recorded ``missed``, not run.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from cron_bridge.beat.enqueue import takes_over
from cron_bridge.beat.in_flight import InFlight
from cron_bridge.beat.inline import resumable
from cron_bridge.beat.planning import Planned
from cron_bridge.beat.store_health import Records, StoreHealth
from cron_bridge.clock import Clock
from cron_bridge.errors import StoreUnavailable
from cron_bridge.jobs import Job, Occurrence
from cron_bridge.plumbing.keys import lock_key, parse_claim_key, parse_lock_owner
from cron_bridge.schedules import EPOCH
from cron_bridge.stores import Store
from cron_bridge.stores.records import RunRecord

__all__ = ["TAKE_OVER_EVERY", "TakeOver"]

log = logging.getLogger(__name__)

TAKE_OVER_EVERY = 1.0  # seconds between two looks for pending sends whose lease ran out
UNREADABLE_KEPT = 1000  # unreadable pending keys remembered, each warned about once


class TakeOver:
    """The takeovers of one beat replica.

    Args:
        jobs: the job of a name this replica runs, or None.
        dispatcher: where what is taken over is sent or run.
    """

    def __init__(
        self,
        store: Store,
        replica: str,
        *,
        jobs: Callable[[str], Job | None],
        dispatcher: InFlight,
        records: Records,
        health: StoreHealth,
        clock: Clock,
        takes_over: Callable[[Job], bool] = takes_over,
    ) -> None:
        self.store = store
        self._takes_over = takes_over
        self.replica = replica
        self.taken = 0  # pending sends taken over so far
        self._jobs = jobs
        self._dispatcher = dispatcher
        self._records = records
        self._health = health
        self._clock = clock
        self._last: datetime | None = None  # the last look, on the beat's clock
        self._unreadable: set[str] = set()

    def maybe_scan(self) -> None:
        """Look for pending sends whose lease ran out, at most once every
        ``TAKE_OVER_EVERY``; take them over and dispatch them."""
        # On the beat's clock, which a test's fake clock moves; a clock set back looks at once.
        now = self._clock.now()
        since = None if self._last is None else (now - self._last).total_seconds()
        if (since is not None and 0 <= since < TAKE_OVER_EVERY) or self._health.down:
            return
        self._last = now
        try:
            taken = self.store.take_over(self.replica)
        except StoreUnavailable as exc:
            self._health.failed(exc)
            return
        if taken:
            self.handle(taken)

    def _not_recorded(self, items: list[Planned]) -> tuple[list[Planned], list[Occurrence]]:
        """Those of ``items`` to run, and the inline ones a run record already names. A store
        that lost its last writes (a crash before they reached its disk) can bring back a
        pending send its claimer had settled and run: an inline run has no completion mark
        to refuse it, so its job's history is read first (a queue target's copy meets the
        worker's mark). A resumable one (``inline.resumable``: its job may make more than
        one attempt) whose claimer died in its attempts is run from the next attempt the
        history does not name, unless one completed or none is left."""
        inline = {item.job.name for item in items if item.job.target == "inline"}
        if not inline:
            return items, []
        made: Counter[str] = Counter()  # attempts whose handler started, by occurrence
        completed: set[str] = set()
        try:
            for name in sorted(inline):
                for r in self.store.history(name, HISTORY_LOOKED):
                    if r.outcome in RAN:  # a manual run's skipped-claimed is not a run
                        made[r.occurrence_id] += 1
                        if r.outcome == "completed":
                            completed.add(r.occurrence_id)
        except StoreUnavailable as exc:
            # Not settled: taken over again once their lease runs out and the store answers.
            self._health.failed(exc)
            return [item for item in items if item.job.name not in inline], []
        to_run: list[Planned] = []
        ran: list[Occurrence] = []
        for item in items:
            key = item.occurrence.id
            if item.job.target != "inline" or (not made[key] and not resumable(item)):
                to_run.append(item)
            elif resumable(item) and key not in completed:
                # The attempt its claimer died in wrote no record: counted when its lock,
                # not yet expired, still names the occurrence.
                died_in = self._running(item)
                if died_in is None:
                    continue  # not known now: taken over again once its lease runs out
                attempt = made[key] + 1 + died_in
                if attempt > item.job.attempts:
                    log.warning("%s: its claimer died in its last attempt; none is left", key)
                    ran.append(item.occurrence)
                    continue
                log.warning(
                    "%s: its claimer died in its attempts; attempt %d is made here", key, attempt
                )
                to_run.append(replace(item, attempt=attempt))
            else:
                log.warning(
                    "%s was pending its send, and its history says it ran: not run again",
                    key,
                )
                ran.append(item.occurrence)
        return to_run, ran

    def _running(self, item: Planned) -> bool | None:
        """Whether the job's lock names the occurrence of ``item`` (a run of it that its
        replica died in, or is still making); None when the store does not answer."""
        try:
            holder = parse_lock_owner(self.store.holder(lock_key(item.job.name)))
        except StoreUnavailable as exc:
            self._health.failed(exc)
            return None
        return holder is not None and holder[1] == item.occurrence.id

    def _began(self, item: Planned) -> bool | None:
        """Whether an attempt of a resumable run began (its claimer died in its attempts, or
        is slow): its job's lock names the occurrence, or its history does; then its next
        attempt is owed whatever its ``misfire_grace``. None when the store does not answer."""
        running = self._running(item)
        if running is not False:
            return running
        try:
            records = self.store.history(item.job.name, HISTORY_LOOKED)
        except StoreUnavailable as exc:
            self._health.failed(exc)
            return None
        return any(r.occurrence_id == item.occurrence.id and r.outcome in RAN for r in records)

    def handle(self, taken: Sequence[tuple[str, str]]) -> None:
        """Dispatch what was taken over; record and settle what cannot be."""
        self.taken += len(taken)
        now = self._clock.now()
        to_run: list[Planned] = []
        records: list[RunRecord] = []
        dropped: list[Occurrence] = []
        handed_back: list[Occurrence] = []
        for key, owner in taken:
            occurrence = _occurrence(key)
            if occurrence is None:
                # Store data no replica wrote: taken again after each lease, said once.
                if key not in self._unreadable and len(self._unreadable) < UNREADABLE_KEPT:
                    self._unreadable.add(key)
                    log.warning("a pending send names no occurrence (%.80r): left as it is", key)
                continue
            if self._dispatcher.pending.reclaim(occurrence.id):
                # Still held here, being sent (retried) or about to run: slow, not dead (its
                # own claim, or one it took over and lost for a while). Leased to this
                # replica again; the send it holds goes on and settles it.
                continue
            job = self._jobs(occurrence.job)
            if job is None and now - occurrence.scheduled_at < UNKNOWN_KEPT:
                # Not known here (a replica of an older version in a rolling deploy, a stored
                # schedule not synced yet): handed back at once, for one that knows it.
                handed_back.append(occurrence)
                continue
            if job is None:
                # Removed since, and no replica that knows it took it: recorded, not run.
                dropped.append(occurrence)
                try:
                    records.append(_unknown(occurrence, owner, self.replica, now))
                except ValueError as exc:  # a name no job could have: nothing to record
                    log.warning("a pending send names no job (%s): dropped", exc)
                continue
            item = Planned(
                job=job,
                occurrence=occurrence,
                trigger="schedule",
                run=True,
                pending=True,
                taken_from=owner,
            )
            if not self._takes_over(job):
                # Its claimer made it pending; this replica's definition (another version,
                # another config) would not: a copy of it would not be refused here.
                reason = (
                    f"claimed by {owner}, which did not send it; not sent again: this "
                    "replica's definition of the job would not refuse a copy"
                )
                records.append(self._records.of(item, "failed", reason=reason))
                dropped.append(occurrence)
                continue
            late = now > occurrence.scheduled_at + job.misfire_grace
            began = late and resumable(item) and self._began(item)
            if began is None:
                continue  # not known now: taken over again once its lease runs out
            if late and not began:
                reason = (
                    f"claimed by {owner}, which did not send it; taken over past "
                    f"misfire_grace ({job.misfire_grace})"
                )
                records.append(self._records.of(item, "missed", reason=reason))
                dropped.append(occurrence)
                continue
            to_run.append(item)
        to_run, ran = self._not_recorded(to_run)
        dropped += ran
        if to_run:
            log.warning(
                "took over %d occurrence(s) claimed and not sent by another replica, from %s "
                "(claimed by %s)",
                len(to_run),
                to_run[0].occurrence.id,
                to_run[0].taken_from,
            )
            self._dispatcher.dispatch(to_run)
        try:
            if dropped:
                self.store.settle_many(dropped, self.replica)
            if handed_back:
                self.store.settle_many(handed_back, self.replica, keep=timedelta(0))
        except StoreUnavailable as exc:
            self._health.failed(exc)  # taken over again after the lease
        self._records.write(records)


# How long after it was due a pending send of a job this replica does not know is handed back
# for a replica that knows it; then it is recorded failed and settled.
UNKNOWN_KEPT = timedelta(hours=1)
HISTORY_LOOKED = 50  # records of a job read to see whether an occurrence taken over ran
RAN = ("completed", "failed", "aborted")  # the outcomes of an attempt whose handler started


def _occurrence(key: str) -> Occurrence | None:
    named = parse_claim_key(key)
    if named is None:
        return None
    try:
        return Occurrence(job=named[0], scheduled_at=EPOCH + timedelta(milliseconds=named[1]))
    except (ValueError, OverflowError):  # a time past what a datetime holds
        return None


def _unknown(occurrence: Occurrence, owner: str, replica: str, now: datetime) -> RunRecord:
    return RunRecord(
        job=occurrence.job,
        occurrence_id=occurrence.id,
        outcome="failed",
        trigger="schedule",
        replica=replica,
        started_at=now,
        reason=f"claimed by {owner}, which did not send it; taken over by {replica}, "
        "which does not run this job",
    )
