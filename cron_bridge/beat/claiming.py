"""Claiming what came due, and handing what was won to the dispatcher.

One batch brings the paused jobs up to date (``pause_sync``: one small read while none
changed), then claims every cluster occurrence in one store call: a lost claim is noted in the
replica's ledger (cron_bridge.control.lost_claims, no record per occurrence), a late one
recorded ``missed``, a paused one ``skipped-paused`` (claimed too, so one replica
records it). A burst of queue targets is claimed in slices, each enqueued before the next is
claimed, so every replica takes a share.
When the store cannot be reached nothing is claimed: the occurrences are kept by the beat and
claimed when it answers. A batch that failed may still have been claimed (the store committed,
its answer was lost: a connection cut mid-commit, a restart): asked again, those claims are
this replica's own, and are read back as won (``Unanswered``), so a lost answer neither runs an
occurrence twice nor leaves it to nobody.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from cron_bridge import telemetry
from cron_bridge.beat.enqueue import takes_over
from cron_bridge.beat.in_flight import InFlight
from cron_bridge.beat.pause_sync import PauseSync
from cron_bridge.beat.planning import Planned
from cron_bridge.beat.store_health import Records, StoreHealth
from cron_bridge.context import AbortSignal
from cron_bridge.control import pause as control
from cron_bridge.control.lost_claims import Ledger
from cron_bridge.errors import StoreUnavailable
from cron_bridge.jobs import Job
from cron_bridge.stores import Store
from cron_bridge.stores.records import RunRecord

__all__ = ["SLICES_MAX", "SLICE_MIN", "ClaimStats", "Claimer", "Unanswered"]

log = logging.getLogger(__name__)

# A burst of at least two slices of queue-target occurrences is claimed slice by slice.
SLICE_MIN = 250
SLICES_MAX = 4


class ClaimStats:
    """What a beat asked the store for: claims, claims won, the batches they went in, and the
    round trips they took (the claiming thread's own, read from the store's counter)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.asked = 0
        self.won = 0
        self.batches = 0
        self.round_trips = 0

    def add(self, asked: int, won: int, round_trips: int) -> None:
        with self._lock:
            self.asked += asked
            self.won += won
            self.batches += 1
            self.round_trips += round_trips


UNCLAIMED_KEPT = 1000  # per job, occurrences remembered while the store is unreachable


class Unclaimed:
    """Occurrences that came due while the store was unreachable, by job: claimed (and so run
    at most once) when it answers again, under the misfire rules of that moment."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_job: dict[str, tuple[Job, deque[datetime]]] = {}

    def __bool__(self) -> bool:
        return bool(self._by_job)

    def keep(self, items: Sequence[Planned]) -> None:
        with self._lock:
            for item in items:
                _, times = self._by_job.setdefault(
                    item.job.name, (item.job, deque(maxlen=UNCLAIMED_KEPT))
                )
                times.append(item.occurrence.scheduled_at)

    def take(self) -> list[tuple[Job, deque[datetime]]]:
        """Everything kept, once; kept again by ``keep`` if claiming fails again."""
        with self._lock:
            taken, self._by_job = self._by_job, {}
        return list(taken.values())


UNANSWERED_KEPT = timedelta(hours=1)  # how long a claim whose answer was lost is looked for


class Unanswered:
    """The claims this replica asked for whose answer it never got (the batch raised
    ``StoreUnavailable``): the store may have made them. Asked again, a claim the store says
    is this replica's own was made by that batch, and is won; a manual trigger of the same
    occurrence takes it out first (its own claim then decides), so the two never both run it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: dict[str, datetime] = {}
        # The keys a manual trigger claimed: never read as a lost batch's, even when that
        # batch's failure is noted after the trigger (the batch raised, the trigger ran, then
        # the batch's thread got here). The oldest go first past UNCLAIMED_KEPT.
        self._manual: dict[str, None] = {}

    def add(self, items: Sequence[Planned]) -> None:
        with self._lock:
            for item in items:
                if item.occurrence.claim_key not in self._manual:
                    self._keys[item.occurrence.claim_key] = item.occurrence.scheduled_at
            if len(self._keys) > 10 * UNCLAIMED_KEPT:  # bounded: the oldest go first
                for key in sorted(self._keys, key=self._keys.__getitem__)[: len(self._keys) // 2]:
                    del self._keys[key]

    def forget(self, key: str) -> None:
        """A manual trigger is about to claim ``key``: its own claim decides, from now on."""
        with self._lock:
            self._keys.pop(key, None)
            self._manual[key] = None
            while len(self._manual) > UNCLAIMED_KEPT:
                del self._manual[next(iter(self._manual))]

    def adopt(
        self, store: Store, owner: str, asked: Sequence[Planned], won: list[bool]
    ) -> list[bool]:
        """``won`` with the claims of ``asked`` that were lost but are ``owner``'s own from an
        unanswered batch read as won; those asked about are forgotten.

        Raises:
            StoreUnavailable: the owners could not be read (they are kept for the next try).
        """
        with self._lock:
            if not self._keys:
                return won
            doubtful = [
                i
                for i, (item, mine) in enumerate(zip(asked, won, strict=True))
                if not mine and item.occurrence.claim_key in self._keys
            ]
            newest = max(item.occurrence.scheduled_at for item in asked)
            for key, at in list(self._keys.items()):
                if newest - at > UNANSWERED_KEPT:
                    del self._keys[key]
        if doubtful:
            owners = store.claimed_by_many([asked[i].occurrence for i in doubtful])
            won = list(won)
            with self._lock:  # a trigger that claimed since holds it as this owner too
                manual = {asked[i].occurrence.claim_key for i in doubtful} & set(self._manual)
            for i, holder in zip(doubtful, owners, strict=True):
                if holder == owner and asked[i].occurrence.claim_key not in manual:
                    won[i] = True
                    log.info(
                        "claimed %s on %s (its first claim was made, its answer lost)",
                        asked[i].occurrence.id,
                        owner,
                    )
        with self._lock:
            for item in asked:
                self._keys.pop(item.occurrence.claim_key, None)
        return won


class Claimer:
    """The claims of one beat replica.

    Args:
        records: where the run records go.
        health: told whether the store answered each batch.
        ledger: where the claims lost are noted.
        unanswered: the claims asked for whose answer was lost (shared with the manual
            triggers, which take out what they claim themselves).

    Attributes:
        unclaimed: the occurrences the store could not be asked for, claimed when it answers
            again (``Unclaimed.take``), so each still runs at most once.
    """

    def __init__(
        self,
        store: Store,
        replica: str,
        *,
        dispatcher: InFlight,
        records: Records,
        health: StoreHealth,
        ledger: Ledger,
        unanswered: Unanswered | None = None,
        takes_over: Callable[[Job], bool] = takes_over,
    ) -> None:
        self.store = store
        self._takes_over = takes_over
        self.ledger = ledger
        self.unanswered = unanswered or Unanswered()
        self.replica = replica
        self.stats = ClaimStats()
        self.unclaimed = Unclaimed()
        self._dispatcher = dispatcher
        self._records = records
        self._health = health
        self.pauses = PauseSync(store)

    def execute(self, planned: Sequence[Planned]) -> None:
        """Claim what is due (reading the paused jobs first) and dispatch what was won."""
        if not planned:
            return
        try:
            # Brought up to date once per batch, right before its claims: a pause is obeyed
            # from this replica's next claim on.
            paused = self.pauses.current(time.monotonic())
        except StoreUnavailable as exc:
            self._health.failed(exc)
            self.unclaimed.keep([p for p in planned if p.job.is_cluster])
            # Instance jobs are not claimed: they run as they would without a store.
            self._dispatcher.dispatch([p for p in planned if not p.job.is_cluster])
            return
        queued = [p for p in planned if p.job.is_cluster and p.job.target != "inline"]
        if len(queued) < 2 * SLICE_MIN:
            self._claim_and_dispatch(planned, paused)
            return
        # A burst of queue targets: enqueueing, not claiming, is what takes time. Claimed in
        # slices, in an order of this replica's own, each slice enqueued before the next is
        # claimed: every replica takes a share, instead of the first to reach the store
        # claiming everything while the others wait.
        in_burst = {id(p) for p in queued}
        self._claim_and_dispatch([p for p in planned if id(p) not in in_burst], paused)
        order = random.sample(queued, len(queued))
        count = min(SLICES_MAX, len(order) // SLICE_MIN)
        slices = [order[i::count] for i in range(count)]
        self._dispatcher.submit(self._claim_slices, (slices, paused))

    def _claim_slices(
        self, work: tuple[list[list[Planned]], dict[str, control.Pause]], signal: AbortSignal
    ) -> None:
        slices, paused = work
        # The records are written once the last slice is sent: writing one costs about what
        # claiming it does, and would hold back every slice after it. Written however the
        # burst ends (a claim, not a record, is what keeps another replica from running it).
        records: list[RunRecord] = []
        try:
            for index, part in enumerate(slices):
                if signal.aborted:
                    # Not claimed: the other replicas claim them, or the catch-up does.
                    log.warning(
                        "stopping with %d occurrence(s) of a burst unclaimed",
                        sum(len(rest) for rest in slices[index:]),
                    )
                    return
                to_run, held = self._claim(part, paused)
                records += held
                if to_run:
                    records += self._dispatcher.enqueue(to_run, signal, record=False)
        finally:
            self._records.write(records)

    def _claim_and_dispatch(
        self, planned: Sequence[Planned], paused: dict[str, control.Pause]
    ) -> None:
        won, records = self._claim([p for p in planned if p.job.is_cluster], paused)
        local, held = self._hold_paused([p for p in planned if not p.job.is_cluster], paused)
        self._dispatcher.dispatch(local + won)
        self._records.write(records + held)

    def _hold_paused(
        self, items: list[Planned], paused: dict[str, control.Pause]
    ) -> tuple[list[Planned], list[RunRecord]]:
        """Those of ``items`` to run, and a ``skipped-paused`` record for each paused one."""
        run, held = [], []
        for item in items:
            pause = paused.get(item.job.name)
            if pause is None:
                run.append(item)
            else:
                held.append(self._records.of(item, "skipped-paused", reason=pause.describe()))
        return run, held

    def _claim(
        self, cluster: Sequence[Planned], paused: dict[str, control.Pause]
    ) -> tuple[list[Planned], list[RunRecord]]:
        """Claim in one batch: what to run, and the records of the claims lost, the missed
        and the paused (a paused occurrence is claimed too, so one replica records it)."""
        if not cluster:
            return [], []
        trips = self.store.stats.this_thread
        # Pending its send: what another replica may send in its place should this one die
        # first, which is only what a copy of can be refused (takes_over).
        flags = [p.run and p.job.name not in paused and self._takes_over(p.job) for p in cluster]
        try:
            won = self.store.claim_many(
                [p.occurrence for p in cluster], self.replica, pending=flags
            )
            won = self.unanswered.adopt(self.store, self.replica, cluster, won)
        except StoreUnavailable as exc:
            self._health.failed(exc)
            self.unanswered.add(cluster)  # the store may have made them all the same
            self.unclaimed.keep(cluster)  # unclaimed: nothing runs until a claim succeeds
            return [], []
        self._health.ok()
        self.stats.add(len(cluster), sum(won), self.store.stats.this_thread - trips)
        records: list[RunRecord] = []
        to_run = []
        lost: list[Planned] = []
        for item, mine, flag in zip(cluster, won, flags, strict=True):
            if not mine:
                lost.append(item)
            elif not item.run:
                records.append(self._records.of(item, "missed", reason=item.reason))
            else:
                to_run.append(replace(item, pending=flag) if flag else item)
        self._stood_aside(cluster, lost)
        to_run, held = self._hold_paused(to_run, paused)
        return to_run, records + held

    def _stood_aside(self, asked: Sequence[Planned], lost: list[Planned]) -> None:
        """Note the claims others won in the ledger and the metrics: no record per
        occurrence (cron_bridge.control.lost_claims)."""
        self.ledger.asked([p.occurrence.scheduled_at for p in asked], len(lost))
        try:
            self.ledger.flush(self.store)  # at once when a span opened, else now and then
        except StoreUnavailable as exc:
            log.debug("ledger not written yet: %s", exc)
        if not lost:
            return
        for job, n in Counter(p.job.name for p in lost).items():
            telemetry.count(job, "skipped-claimed", n)
        first = lost[0].occurrence.id
        if len(lost) == 1:
            log.info("skipped-claimed %s on %s (claimed by another replica)", first, self.replica)
        else:
            log.info(
                "skipped-claimed %d occurrences on %s (claimed by other replicas), from %s",
                len(lost),
                self.replica,
                first,
            )
