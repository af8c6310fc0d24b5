"""Taking over a claim its replica made and never sent (cron_bridge.beat.takeover), on the
memory store and a fake clock: the claim is pending its send, leased to its claimer; once the
lease has run out another replica sends it, marked ``again``, or runs it inline, and a
claimer that was only slow finds it taken and does not run it too."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from cron_bridge import Beat, JobContext, Registry, cluster_task, declare
from cron_bridge.beat import pending
from cron_bridge.beat.enqueue import takes_over
from cron_bridge.beat.in_flight import InFlight
from cron_bridge.beat.planning import Planned
from cron_bridge.beat.store_health import Records, StoreHealth
from cron_bridge.beat.takeover import TakeOver
from cron_bridge.clock import SystemClock
from cron_bridge.errors import ConfigError, StoreUnavailable
from cron_bridge.jobs import Occurrence
from cron_bridge.plumbing.keys import lock_key, lock_owner
from cron_bridge.stores import MemoryStore, RunRecord
from cron_bridge.stores.base import PENDING_LEASE
from cron_bridge.testing import FakeClock
from tests.test_beat import START, ListQueue, QueueTask, beats, clock, queue
from tests.waiting import wait_for

__all__ = ["beats", "clock", "queue"]  # fixtures

MINUTE = START.replace(second=0, microsecond=0) + timedelta(minutes=1)


class Flags(MemoryStore):
    """A memory store that keeps the pending flags of every claim batch."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.flags: dict[str, bool] = {}

    def claim_many(
        self, occurrences: Sequence[Occurrence], owner: str, **options: Any
    ) -> list[bool]:
        flags = options.get("pending") or [False] * len(occurrences)
        self.flags.update({o.job: flag for o, flag in zip(occurrences, flags, strict=True)})
        return super().claim_many(occurrences, owner, **options)


def test_a_claim_whose_replica_died_before_sending_it_is_sent_by_another_marked_again(
    clock: FakeClock, beats: list[Beat], queue: ListQueue
) -> None:
    """A replica claimed the occurrence and died before its send: the claim is the dead
    one's, so the live replica stands aside, then takes the claim over once its lease ran
    out and sends it, marked as possibly sent before, recorded as taken over."""
    registry = Registry()
    cluster_task(every="1m", misfire_grace="30s", registry=registry)(QueueTask("orphan"))
    store = MemoryStore(clock=clock)
    occurrence = Occurrence(job="orphan", scheduled_at=MINUTE)
    assert store.claim_many([occurrence], "dead", pending=[True])
    beat = Beat(store, registry, clock=clock, replica_id="alive")
    beats.append(beat)
    beat.start()
    clock.advance(60)  # the minute comes due: the claim is the dead replica's
    wait_for(lambda: queue.sent, 30, "the send taken over", every=0.01)
    assert [m["occurrence_id"] for m in queue.sent] == [occurrence.id]
    assert queue.again == [True]
    wait_for(lambda: store.history("orphan"), 30, "its record", every=0.01)
    (sent,) = store.history("orphan")
    assert (sent.outcome, sent.replica, sent.reason) == (
        "enqueued",
        "alive",
        "taken over from dead",
    )
    assert store.settle_many([occurrence], "dead") == [False]  # the taker's, settled by it
    clock.advance(PENDING_LEASE.total_seconds() + 1)
    assert store.take_over("another") == []


def test_an_inline_claim_whose_replica_died_is_run_once_by_another(
    clock: FakeClock, beats: list[Beat]
) -> None:
    job, seen = inline_job("orphan.inline")
    store = MemoryStore(clock=clock)
    occurrence = Occurrence(job=job.name, scheduled_at=MINUTE)
    assert store.claim_many([occurrence], "dead", pending=[True])
    beat = Beat(store, [job], clock=clock, replica_id="alive")
    beats.append(beat)
    beat.start()
    clock.advance(60)
    wait_for(lambda: seen, 30, "the run taken over", every=0.01)
    wait_for(lambda: store.history(job.name), 30, "its record", every=0.01)
    assert [(ctx.occurrence_id, ctx.replica) for ctx in seen] == [(occurrence.id, "alive")]
    assert [r.outcome for r in store.history(job.name)] == ["completed"]
    clock.advance(PENDING_LEASE.total_seconds() + 1)
    assert store.take_over("another") == []


def test_a_claimer_that_was_only_slow_finds_its_inline_run_taken_and_does_not_start_it(
    clock: FakeClock,
) -> None:
    """Its lease ran out before its run started (a starved pool, a pause) and another
    replica took it over: settling before the start fails, so only the taker runs it."""
    job, seen = inline_job("slow.inline")
    store = MemoryStore(clock=clock)
    occurrence = Occurrence(job=job.name, scheduled_at=MINUTE)
    assert store.claim_many([occurrence], "slow", pending=[True])
    clock.advance(PENDING_LEASE.total_seconds() + 1)
    assert store.take_over("taker") == [(occurrence.claim_key, "slow")]
    health = StoreHealth()
    dispatcher = InFlight(
        store,
        "slow",
        clock=clock,
        max_workers=1,
        records=Records(store, health, replica="slow", clock=clock),
        health=health,
    )
    item = Planned(job=job, occurrence=occurrence, trigger="schedule", run=True, pending=True)
    assert dispatcher.run_now(item) is None
    assert seen == [] and store.history(job.name) == []
    dispatcher.drain(timedelta(seconds=1))


def test_a_claim_taken_over_past_its_misfire_grace_is_recorded_missed_not_run(
    clock: FakeClock, beats: list[Beat]
) -> None:
    job, seen = inline_job("late.inline", every="1h", misfire_grace="5s")
    store = MemoryStore(clock=clock)
    occurrence = Occurrence(job=job.name, scheduled_at=START - timedelta(seconds=30))
    assert store.claim_many([occurrence], "dead", pending=[True])
    beat = Beat(store, [job], clock=clock, replica_id="alive")
    beats.append(beat)
    beat.start()
    clock.advance(PENDING_LEASE.total_seconds() + 1)
    wait_for(
        lambda: any(r.occurrence_id == occurrence.id for r in store.history(job.name)),
        30,
        "the missed record",
        every=0.01,
    )
    (missed,) = [r for r in store.history(job.name) if r.occurrence_id == occurrence.id]
    assert missed.outcome == "missed"
    assert missed.reason == (
        "claimed by dead, which did not send it; taken over past misfire_grace (0:00:05)"
    )
    assert occurrence.id not in {ctx.occurrence_id for ctx in seen}
    clock.advance(PENDING_LEASE.total_seconds() + 1)
    assert store.take_over("another") == []  # settled by the replica that recorded it


def test_only_what_a_copy_of_is_refused_is_left_pending(
    clock: FakeClock, beats: list[Beat], queue: ListQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An inline job and a @cluster_task one are claimed pending their send; a drop-in
    sender's plain task (no guard on the worker to refuse a second copy) is not: it stays at
    most once; nor is an instance job, which is not claimed at all."""
    registry = Registry()
    cluster_task(every="1m", registry=registry)(QueueTask("guarded"))
    job, _ = inline_job("inline.job", every="1m", registry=registry)
    store = Flags(clock=clock)
    beat = Beat(store, registry, clock=clock)
    beats.append(beat)
    beat.start()
    clock.advance(60)
    wait_for(lambda: len(store.flags) == 2, 30, "the claims", every=0.01)
    assert store.flags == {"guarded": True, job.name: True}
    monkeypatch.setattr(queue, "refuses_copies", False)
    clock.advance(60)
    wait_for(lambda: len(queue.sent) == 2, 30, "the second send", every=0.01)
    assert store.flags == {"guarded": False, job.name: True}


def test_opted_in_a_plain_tasks_send_is_taken_over_and_a_failed_one_sent_again(
    clock: FakeClock, beats: list[Beat], queue: ListQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``take_over="all"``: a plain task (nothing on the worker refuses a copy) is claimed
    pending its send all the same, a dead claimer's is sent by another replica, and a send
    that failed is sent again (at least once, as the team chose); an unknown choice is a
    ConfigError naming the option."""
    monkeypatch.setattr(queue, "refuses_copies", False)
    registry = Registry()
    cluster_task(every="1m", misfire_grace="30s", registry=registry)(QueueTask("plain"))
    (job,) = registry.jobs()
    assert not takes_over(job) and takes_over(job, unrefused=True)
    store = Flags(clock=clock)
    occurrence = Occurrence(job="plain", scheduled_at=MINUTE)
    assert store.claim_many([occurrence], "dead", pending=[True])
    beat = Beat(store, registry, clock=clock, replica_id="alive", take_over="all")
    beats.append(beat)
    beat.start()
    clock.advance(60)
    wait_for(lambda: queue.sent, 30, "the send taken over", every=0.01)
    assert [m["occurrence_id"] for m in queue.sent] == [occurrence.id]
    wait_for(lambda: store.history("plain"), 30, "its record", every=0.01)
    assert [(r.outcome, r.reason) for r in store.history("plain")] == [
        ("enqueued", "taken over from dead")
    ]
    queue.lost_answers = 1  # the next minute's send lands and fails: it is sent again
    clock.advance(60)
    wait_for(lambda: len(queue.sent) == 3, 30, "the next minute's send, twice", every=0.01)
    assert queue.again == [True, False, True]
    assert store.flags == {"plain": True}
    with pytest.raises(ConfigError) as refused:
        Beat(store, registry, take_over="plain")
    assert (refused.value.option, refused.value.value) == ("take_over", "plain")


def inline_job(
    name: str, every: str = "1m", registry: Registry | None = None, **options: Any
) -> tuple[Any, list[JobContext]]:
    seen: list[JobContext] = []
    job = declare(
        name, every=every, target="inline", handler=lambda ctx: seen.append(ctx), **options
    )
    if registry is not None:
        registry.add(job)
    return job, seen


def test_an_inline_send_a_store_brought_back_after_its_run_is_not_run_again(
    clock: FakeClock, beats: list[Beat]
) -> None:
    """A store that lost its last writes can hand back a pending send its claimer settled
    and ran: its record says it ran, so the replica that takes it over does not run it."""
    job, seen = inline_job("ran.inline")
    store = MemoryStore(clock=clock)
    occurrence = Occurrence(job=job.name, scheduled_at=MINUTE)
    assert store.claim_many([occurrence], "gone", pending=[True])  # the settle was lost
    store.record(
        RunRecord(
            job=job.name,
            occurrence_id=occurrence.id,
            outcome="completed",
            trigger="schedule",
            replica="gone",
            started_at=MINUTE,
        )
    )
    beat = Beat(store, [job], clock=clock, replica_id="alive")
    beats.append(beat)
    beat.start()
    clock.advance(60)
    wait_for(lambda: beat._takeover.taken, 30, "the takeover", every=0.01)
    clock.advance(PENDING_LEASE.total_seconds() + 1)
    assert store.take_over("another") == []  # settled: it ran
    assert seen == [] and [r.replica for r in store.history(job.name)] == ["gone"]


def retrying(store: MemoryStore, replica: str, job: Any) -> tuple[InFlight, Planned]:
    """A replica's dispatcher, on the real clock, and a pending send of ``job`` it claimed."""
    health = StoreHealth()
    dispatcher = InFlight(
        store,
        replica,
        clock=SystemClock(),
        max_workers=1,
        records=Records(store, health, replica=replica, clock=SystemClock()),
        health=health,
    )
    occurrence = Occurrence(job=job.name, scheduled_at=SystemClock().now())
    assert store.claim_many([occurrence], replica, pending=[True], lease=timedelta(seconds=0.3))
    item = Planned(job=job, occurrence=occurrence, trigger="schedule", run=True, pending=True)
    return dispatcher, item


def test_a_claimer_retrying_its_send_keeps_its_lease_then_settles_it(
    queue: ListQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its broker is down: while it retries, it renews its lease, so neither another replica
    nor its own takeover takes the claim (both find it leased or its own); once the broker
    is back it sends it once and settles it."""
    monkeypatch.setattr(pending, "RENEW_EVERY", 0.05)
    monkeypatch.setattr(pending, "RENEW_AFTER", 0.05)
    registry = Registry()
    cluster_task(every="1m", misfire_grace="1m", registry=registry)(QueueTask("retried"))
    store = MemoryStore()
    dispatcher, item = retrying(store, "slow", registry.get("retried"))
    assert dispatcher.pending.holds(item.occurrence.id) is False
    queue.down = True
    dispatcher.dispatch([item])
    wait_for(lambda: queue.calls >= 3, 30, "three tries", every=0.01)  # over a second: 4 leases
    assert dispatcher.pending.holds(item.occurrence.id)
    assert store.take_over("other") == []  # renewed, never ran out
    queue.down = False
    wait_for(lambda: queue.sent, 30, "the send", every=0.01)
    wait_for(lambda: not dispatcher.pending.holds(item.occurrence.id), 30, "settled", every=0.01)
    assert store.settle_many([item.occurrence], "other") == [False]  # settled by its send
    assert [m["occurrence_id"] for m in queue.sent] == [item.occurrence.id]
    dispatcher.drain(timedelta(seconds=1))


class Taken(MemoryStore):
    """A memory store where another replica takes over every pending send as its claimer
    renews it (a claimer frozen past its lease, as seen by it once it runs again)."""

    def settle_many(
        self, occurrences: Sequence[Occurrence], owner: str, *, keep: timedelta | None = None
    ) -> list[bool]:
        if keep is not None:
            self._pending.update({o.claim_key: ("taker", SystemClock().now()) for o in occurrences})
        return super().settle_many(occurrences, owner, keep=keep)


def test_a_claimer_retrying_its_send_leaves_it_once_another_replica_took_it_over(
    queue: ListQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its renewal finds the claim taken over: it stops sending it and records nothing (the
    taker sends and records it)."""
    monkeypatch.setattr(pending, "RENEW_EVERY", 0.05)
    monkeypatch.setattr(pending, "RENEW_AFTER", 0.05)
    registry = Registry()
    cluster_task(every="1m", misfire_grace="1m", registry=registry)(QueueTask("left"))
    store = Taken()
    dispatcher, item = retrying(store, "slow", registry.get("left"))
    queue.down = True
    dispatcher.dispatch([item])
    wait_for(lambda: not dispatcher.pending.holds(item.occurrence.id), 30, "given up", every=0.01)
    queue.down = False
    assert queue.calls == 1 and queue.sent == []
    assert store.history("left") == []
    dispatcher.drain(timedelta(seconds=1))


class SettleAnswerLost(MemoryStore):
    """A store whose first settle is applied and its answer lost (a connection cut)."""

    lost = 1

    def settle_many(
        self, occurrences: Sequence[Occurrence], owner: str, **options: Any
    ) -> list[bool]:
        answers = super().settle_many(occurrences, owner, **options)
        if self.lost and options.get("keep") is None:
            self.lost -= 1
            raise StoreUnavailable("the answer was lost")
        return answers


class NeverPending(MemoryStore):
    """A store that makes no claim pending (a Postgres schema without the pending table, a
    Redis key of the pending sends of another type): claims are made as before."""

    def claim_many(
        self, occurrences: Sequence[Occurrence], owner: str, **options: Any
    ) -> list[bool]:
        options.pop("pending", None)
        return super().claim_many(occurrences, owner, **options)


@pytest.mark.parametrize("store_class", [SettleAnswerLost, NeverPending])
def test_an_inline_run_whose_claim_is_not_known_pending_still_runs_once(
    store_class: type[MemoryStore],
) -> None:
    """Its settle's answer was lost and asked again, or the store never left it pending:
    either way no other replica holds it, so its claimer runs it, once."""
    job, seen = inline_job("unknown.pending")
    store = store_class()
    dispatcher, item = retrying(store, "me", job)
    record = dispatcher.run_now(item)
    assert record is not None and record.outcome == "completed"
    assert [ctx.occurrence_id for ctx in seen] == [item.occurrence.id]
    dispatcher.drain(timedelta(seconds=1))


def test_a_queued_send_its_store_never_left_pending_is_retried_until_sent(
    queue: ListQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Renewing a claim the store never left pending says it is still this replica's: the
    retries go on and the occurrence is sent."""
    monkeypatch.setattr(pending, "RENEW_EVERY", 0.05)
    monkeypatch.setattr(pending, "RENEW_AFTER", 0.05)
    registry = Registry()
    cluster_task(every="1m", misfire_grace="1m", registry=registry)(QueueTask("never.pending"))
    store = NeverPending()
    dispatcher, item = retrying(store, "me", registry.get("never.pending"))
    queue.down = True
    dispatcher.dispatch([item])
    wait_for(lambda: queue.calls >= 3, 30, "three tries", every=0.01)
    queue.down = False
    wait_for(lambda: queue.sent, 30, "the send", every=0.01)
    assert [m["occurrence_id"] for m in queue.sent] == [item.occurrence.id]
    dispatcher.drain(timedelta(seconds=1))


def test_a_send_that_blocks_past_the_lease_keeps_its_claim(
    queue: ListQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker takes a second to answer, three times the claim's first lease: the lease
    is renewed meanwhile, so another replica finds nothing to take over, and one copy goes."""
    monkeypatch.setattr(pending, "RENEW_EVERY", 0.05)
    monkeypatch.setattr(pending, "RENEW_AFTER", 0.05)
    registry = Registry()
    cluster_task(every="1m", misfire_grace="1m", registry=registry)(QueueTask("slow.broker"))
    store = MemoryStore()
    dispatcher, item = retrying(store, "slow", registry.get("slow.broker"))
    answered = threading.Event()
    sending = queue.enqueue_many

    def slow(dispatches: Sequence[Any]) -> list[Exception | None]:
        answered.wait(30)
        return sending(dispatches)

    monkeypatch.setattr(queue, "enqueue_many", slow)
    dispatcher.dispatch([item])
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:  # three times the first lease, looked at all along
        assert store.take_over("other") == []
        time.sleep(0.05)
    answered.set()
    wait_for(lambda: queue.sent, 30, "the send", every=0.01)
    assert queue.again == [False]
    dispatcher.drain(timedelta(seconds=1))


def test_a_pending_send_waiting_in_a_busy_pool_is_held_from_its_dispatch(
    queue: ListQueue,
) -> None:
    """The pool's one thread is busy: a dispatched send waits in its queue, held (so its own
    takeover leaves it alone) and renewed, not only once a thread starts it."""
    registry = Registry()
    cluster_task(every="1m", misfire_grace="1m", registry=registry)(QueueTask("queued.behind"))
    store = MemoryStore()
    dispatcher, item = retrying(store, "busy", registry.get("queued.behind"))
    free = threading.Event()
    dispatcher.submit(lambda _, signal: free.wait(30), None)
    dispatcher.dispatch([item])
    assert dispatcher.pending.holds(item.occurrence.id)
    free.set()
    wait_for(lambda: queue.sent, 30, "the send", every=0.01)
    wait_for(lambda: not dispatcher.pending.holds(item.occurrence.id), 30, "done", every=0.01)
    dispatcher.drain(timedelta(seconds=1))


def test_an_overlap_allow_job_is_not_left_pending(queue: ListQueue) -> None:
    """Its worker takes no lock and reads no completion mark: nothing would refuse a copy,
    so it stays at most once, as a plain task does."""
    registry = Registry()
    cluster_task(every="1m", registry=registry)(QueueTask("skipping"))
    cluster_task(every="1m", overlap="allow", registry=registry)(QueueTask("allowing"))
    assert takes_over(registry.get("skipping"))  # type: ignore[arg-type]
    assert not takes_over(registry.get("allowing"))  # type: ignore[arg-type]


def test_a_job_this_replica_does_not_know_is_handed_back_for_one_that_does(
    clock: FakeClock,
) -> None:
    """A replica of an older version (a rolling deploy) takes over a send of a job it does
    not know: it hands it back at once, records nothing, and a replica that knows the job
    takes it next and sends it."""
    store = MemoryStore(clock=clock)
    occurrence = Occurrence(job="new.job", scheduled_at=MINUTE)
    assert store.claim_many([occurrence], "dead", pending=[True])
    clock.advance(PENDING_LEASE.total_seconds() + 1)
    health = StoreHealth()
    records = Records(store, health, replica="old", clock=clock)
    old = TakeOver(
        store,
        "old",
        jobs=lambda name: None,
        dispatcher=InFlight(
            store, "old", clock=clock, max_workers=1, records=records, health=health
        ),
        records=records,
        health=health,
        clock=clock,
    )
    old.maybe_scan()
    assert store.history("new.job") == []
    assert store.take_over("new") == [(occurrence.claim_key, "old")]


def test_a_send_stopped_by_shutdown_is_left_to_its_lease(queue: ListQueue) -> None:
    """The beat stops while it retries a send: the occurrence is recorded aborted here and
    left pending, so a replica still up takes it over once the lease runs out and sends it."""
    registry = Registry()
    cluster_task(every="1m", misfire_grace="1m", registry=registry)(QueueTask("stopping"))
    store = MemoryStore()
    dispatcher, item = retrying(store, "stopping", registry.get("stopping"))
    queue.down = True
    dispatcher.dispatch([item])
    wait_for(lambda: queue.calls >= 1, 30, "a try", every=0.01)
    dispatcher.drain(timedelta(seconds=0.1))
    wait_for(lambda: store.history("stopping"), 30, "its record", every=0.01)
    assert [(r.outcome, r.reason) for r in store.history("stopping")] == [("aborted", "shutdown")]
    found: list[list[tuple[str, str]]] = []
    wait_for(lambda: found.append(store.take_over("up")) or found[-1], 30, "its lease's end")
    assert found[-1] == [(item.occurrence.claim_key, "stopping")]


def test_a_send_that_fails_as_the_beat_stops_is_left_to_its_lease(
    queue: ListQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The send was on its way when the beat stopped, and failed after: recorded aborted
    (with the broker's error), not failed, and left pending for a replica still up."""
    registry = Registry()
    cluster_task(every="1m", misfire_grace="10m", registry=registry)(QueueTask("cut.off"))
    store = MemoryStore()
    dispatcher, item = retrying(store, "stopping", registry.get("cut.off"))
    stopped = threading.Event()

    def failing(dispatches: Sequence[Any]) -> list[Exception | None]:
        stopped.wait(30)
        return [ConnectionError("broker timed out") for _ in dispatches]

    monkeypatch.setattr(queue, "enqueue_many", failing)
    dispatcher.dispatch([item])
    threading.Timer(0.3, stopped.set).start()
    dispatcher.drain(timedelta(seconds=0.1))
    wait_for(lambda: store.history("cut.off"), 30, "its record", every=0.01)
    [record] = store.history("cut.off")
    assert (record.outcome, record.reason) == ("aborted", "shutdown")
    assert record.error == "ConnectionError: broker timed out"
    found: list[list[tuple[str, str]]] = []
    wait_for(lambda: found.append(store.take_over("up")) or found[-1], 30, "its lease's end")
    assert found[-1] == [(item.occurrence.claim_key, "stopping")]


def test_a_send_held_here_and_taken_back_by_this_replica_is_its_own_again(
    queue: ListQueue,
) -> None:
    """A renewal found the send taken by another replica, which died in turn; this replica's
    own takeover gets it back while it still holds it: not dispatched a second time, and
    the send it holds is no longer counted taken."""
    registry = Registry()
    cluster_task(every="1m", registry=registry)(QueueTask("back.again"))
    store = MemoryStore()
    dispatcher, item = retrying(store, "me", registry.get("back.again"))
    held = dispatcher.pending
    assert held.hold([item]) == [item.occurrence.id]
    held._taken.add(item.occurrence.id)  # as a renewal that met the other replica records
    assert held.taken(item)
    assert held.reclaim(item.occurrence.id)
    assert not held.taken(item) and held.holds(item.occurrence.id)
    held.done([item.occurrence.id])
    assert not held.reclaim(item.occurrence.id)  # no longer held: taken over as any other
    dispatcher.drain(timedelta(seconds=1))


def test_a_send_this_replica_would_not_make_pending_is_not_taken_over(
    clock: FakeClock, beats: list[Beat], queue: ListQueue
) -> None:
    """Another version made it pending (overlap="skip" there); here the job allows overlap,
    so a copy would not be refused: recorded failed, settled, not sent."""
    registry = Registry()
    cluster_task(every="1m", overlap="allow", registry=registry)(QueueTask("changed"))
    store = MemoryStore(clock=clock)
    occurrence = Occurrence(job="changed", scheduled_at=MINUTE)
    assert store.claim_many([occurrence], "old-version", pending=[True])
    beat = Beat(store, registry, clock=clock, replica_id="new-version")
    beats.append(beat)
    beat.start()
    clock.advance(60 + PENDING_LEASE.total_seconds() + 1)
    wait_for(lambda: store.history("changed"), 30, "its record", every=0.01)
    [record] = [r for r in store.history("changed") if r.occurrence_id == occurrence.id]
    assert record.outcome == "failed" and "would not refuse a copy" in (record.reason or "")
    assert occurrence.id not in [m["occurrence_id"] for m in queue.sent]
    assert store.take_over("another") == []


class TakesFirst(MemoryStore):
    """Another replica takes over the first occurrence named in the first renewal."""

    took = False

    def settle_many(
        self, occurrences: Sequence[Occurrence], owner: str, *, keep: timedelta | None = None
    ) -> list[bool]:
        if keep is not None and occurrences and not self.took:
            self.took = True
            self._pending[occurrences[0].claim_key] = ("other", SystemClock().now() + keep)
        return super().settle_many(occurrences, owner, keep=keep)


def test_a_send_dropped_as_taken_is_no_longer_held_nor_settled_here(
    queue: ListQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Of a batch of two retrying a broker that is down, a renewal finds one taken over: it
    is dropped from the retries and no longer held (a later takeover by this replica
    dispatches it afresh, not into a batch that left it), and the batch's end does not
    settle it; the other is sent and settled."""
    monkeypatch.setattr(pending, "RENEW_EVERY", 0.05)
    monkeypatch.setattr(pending, "RENEW_AFTER", 0.05)
    registry = Registry()
    cluster_task(every="1m", misfire_grace="1m", registry=registry)(QueueTask("pair"))
    store = TakesFirst()
    dispatcher, first = retrying(store, "me", registry.get("pair"))
    second_at = first.occurrence.scheduled_at + timedelta(minutes=1)
    second = replace(first, occurrence=Occurrence(job="pair", scheduled_at=second_at))
    assert store.claim_many([second.occurrence], "me", pending=[True])
    queue.down = True
    dispatcher.dispatch([first, second])
    wait_for(lambda: not dispatcher.pending.holds(first.occurrence.id), 30, "dropped", every=0.01)
    assert dispatcher.pending.holds(second.occurrence.id)
    queue.down = False
    wait_for(lambda: queue.sent, 30, "the send", every=0.01)
    wait_for(lambda: not dispatcher.pending.holds(second.occurrence.id), 30, "done", every=0.01)
    assert [m["occurrence_id"] for m in queue.sent] == [second.occurrence.id]
    assert store.settle_many([first.occurrence], "me") == [False]  # still the other's
    assert store.settle_many([second.occurrence], "other") == [False]  # settled by me
    dispatcher.drain(timedelta(seconds=1))


def test_an_inline_send_whose_history_holds_only_a_skip_is_run_by_its_taker(
    clock: FakeClock, beats: list[Beat]
) -> None:
    """A manual "run now" of the occurrence found it claimed and recorded skipped-claimed:
    that is no run, so the replica that takes the pending send over runs it."""
    job, seen = inline_job("skipped.inline")
    store = MemoryStore(clock=clock)
    occurrence = Occurrence(job=job.name, scheduled_at=MINUTE)
    assert store.claim_many([occurrence], "gone", pending=[True])
    store.record(
        RunRecord(
            job=job.name,
            occurrence_id=occurrence.id,
            outcome="skipped-claimed",
            trigger="manual",
            replica="alive",
            started_at=MINUTE,
        )
    )
    beat = Beat(store, [job], clock=clock, replica_id="alive")
    beats.append(beat)
    beat.start()
    clock.advance(60)
    wait_for(lambda: seen, 30, "the run taken over", every=0.01)
    assert [ctx.occurrence_id for ctx in seen] == [occurrence.id]


# A job that may run an occurrence more than once (attempts > 1): its claimer's death in an
# attempt leaves the next attempt to the replica that takes the claim over.


def failed_attempt(job: Any, occurrence: Occurrence, attempt: int) -> RunRecord:
    return RunRecord(
        job=job.name,
        occurrence_id=occurrence.id,
        outcome="failed",
        trigger="schedule",
        replica="dead",
        started_at=MINUTE,
        attempt=attempt,
        error="RuntimeError: the ledger is locked",
    )


def test_a_retryable_inline_run_whose_claimer_died_in_it_is_attempted_again_by_another(
    clock: FakeClock, beats: list[Beat]
) -> None:
    """attempts=3: the claimer failed its first attempt and died in the second, its lock
    still held. The replica that takes the claim over counts that one too (the lock names
    the occurrence), waits for the lock until it expires, then makes attempt 3."""
    job, seen = inline_job("retry.inline", attempts=3, lock_ttl="2m", misfire_grace="30s")
    store = MemoryStore(clock=clock)
    occurrence = Occurrence(job=job.name, scheduled_at=MINUTE)
    clock.advance(50)
    assert store.claim_many([occurrence], "dead", pending=[True])
    store.record(failed_attempt(job, occurrence, 1))
    dead_run = lock_owner("dead", occurrence.id, "0badc0de")
    assert store.acquire_fenced(lock_key(job.name), dead_run, timedelta(minutes=2))
    beat = Beat(store, [job], clock=clock, replica_id="alive")
    beats.append(beat)
    beat.start()
    clock.advance(10)  # due, and the claimer's lease has run out: taken over
    wait_for(lambda: beat._takeover.taken == 1, 30, "the takeover", every=0.01)
    time.sleep(0.3)  # what would start now would be a run beside the dead one's lock
    assert seen == []
    clock.advance(120)  # the dead run's lock expires
    wait_for(lambda: seen, 30, "the next attempt", every=0.01)

    def of_it() -> list[tuple[str, int, str]]:
        records = store.history(job.name, 50)
        return [(r.outcome, r.attempt, r.replica) for r in records if r.occurrence_id == key]

    key = occurrence.id
    wait_for(lambda: len(of_it()) == 2, 30, "its record", every=0.01)
    assert [(ctx.replica, ctx.attempt) for ctx in seen if ctx.occurrence_id == key] == [
        ("alive", 3)
    ]
    assert of_it() == [("completed", 3, "alive"), ("failed", 1, "dead")]
    assert store.finished(occurrence)  # marked, so that a slow claimer's attempt finds it
    assert store.settle_many([occurrence], "dead") == [False]  # settled by the taker


@pytest.mark.parametrize("ended", ["completed", "all attempts"])
def test_a_retryable_inline_run_that_ended_is_not_attempted_again(
    ended: str, clock: FakeClock, beats: list[Beat]
) -> None:
    """Its history says it completed, or made every attempt: the taker settles it and runs
    nothing."""
    job, seen = inline_job("ended.inline", attempts=2)
    store = MemoryStore(clock=clock)
    occurrence = Occurrence(job=job.name, scheduled_at=MINUTE)
    clock.advance(50)
    assert store.claim_many([occurrence], "dead", pending=[True])
    store.record(failed_attempt(job, occurrence, 1))
    last = failed_attempt(job, occurrence, 2)
    store.record(replace(last, outcome="completed", error=None) if ended == "completed" else last)
    beat = Beat(store, [job], clock=clock, replica_id="alive")
    beats.append(beat)
    beat.start()
    clock.advance(10)
    wait_for(lambda: beat._takeover.taken == 1, 30, "the takeover", every=0.01)
    wait_for(lambda: store.settle_many([occurrence], "dead") == [False], 30, "settled", every=0.01)
    assert seen == [] and len(store.history(job.name)) == 2


def test_a_slow_claimer_and_its_taker_run_a_retryable_occurrence_once(
    clock: FakeClock, beats: list[Beat], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claimer's handler is running when its lease runs out (its renewals stopped
    getting through) and another replica takes the claim over: the taker waits behind the
    run's lock, finds the completion mark once it completes, and runs nothing; the
    claimer's settle afterwards is told the taker holds it."""
    release = threading.Event()
    occurrence = Occurrence(job="slow.retry", scheduled_at=MINUTE)
    ran: list[str] = []

    def slow(ctx: JobContext) -> None:
        if ctx.occurrence_id == occurrence.id:
            ran.append(ctx.replica)
            release.wait(30)

    job = declare(
        "slow.retry", every="1m", target="inline", handler=slow, attempts=2, lock_ttl="5m"
    )
    store = MemoryStore(clock=clock)
    claimer = Beat(store, [job], clock=clock, replica_id="claimer")
    beats.append(claimer)
    claimer.start()
    clock.advance(60)
    wait_for(lambda: ran == ["claimer"], 30, "the claimer's run", every=0.01)
    # Its renewals stop getting through, and so do its own looks for expired leases (one
    # would lease its own run back to it: slow, not dead).
    claimer._dispatcher.pending.stop()
    monkeypatch.setattr(claimer._takeover, "maybe_scan", lambda: None)
    taker = Beat(store, [job], clock=clock, replica_id="taker")
    beats.append(taker)
    taker.start()
    # The next minute wakes the taker's loop: the lease has run out, and so has the
    # occurrence's misfire_grace; its attempt began, so its next attempt is owed all the same.
    clock.advance(60)
    wait_for(lambda: taker._takeover.taken >= 1, 30, "the takeover", every=0.01)
    time.sleep(0.3)
    assert ran == ["claimer"]  # the taker waits behind the run's lock
    release.set()

    def outcomes() -> list[tuple[str, str]]:
        records = store.history(job.name, 50)
        return [(r.outcome, r.replica) for r in records if r.occurrence_id == occurrence.id]

    wait_for(
        lambda: outcomes() == [("skipped-completed", "taker"), ("completed", "claimer")],
        30,
        "the taker's look at the mark",
        every=0.01,
    )
    assert ran == ["claimer"]
    assert store.settle_many([occurrence], "claimer") == [False]


class SettleBlips(MemoryStore):
    """A memory store whose first settle after a send is not answered."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.blips = 1
        self.settled: list[str] = []  # who settled, once answered

    def settle_many(
        self, occurrences: Sequence[Occurrence], owner: str, **options: Any
    ) -> list[bool]:
        if options.get("keep") is not None:
            return super().settle_many(occurrences, owner, **options)
        if self.blips:
            self.blips -= 1
            raise StoreUnavailable("blip", host="memory")
        answers = super().settle_many(occurrences, owner, **options)
        self.settled.append(owner)
        return answers


def test_a_settle_the_store_did_not_answer_is_asked_again_not_left_to_a_takeover(
    clock: FakeClock, beats: list[Beat], queue: ListQueue
) -> None:
    """Sent, and its settle not answered: the claimer asks again until the store answers,
    so no replica (itself included) takes the send over and sends it a second time."""
    registry = Registry()
    cluster_task(every="1m", registry=registry)(QueueTask("blipped"))
    store = SettleBlips(clock=clock)
    beat = Beat(store, registry, clock=clock, replica_id="claimer")
    beats.append(beat)
    beat.start()
    clock.advance(60)
    wait_for(lambda: store.settled == ["claimer"], 30, "the settle asked again", every=0.01)
    assert store.blips == 0
    occurrence = Occurrence(job="blipped", scheduled_at=MINUTE)
    clock.advance(PENDING_LEASE.total_seconds() + 1)
    assert store.take_over("other") == []
    assert [m["occurrence_id"] for m in queue.sent] == [occurrence.id]
