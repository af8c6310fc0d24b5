"""The beat in one process, on a fake clock: claims, targets, triggers, shutdown, the guard."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cron_bridge import Beat, ConfigError, Every, JobContext, Registry, cluster_task, declare
from cron_bridge.beat.claiming import SLICES_MAX
from cron_bridge.beat.enqueue import NOT_SENT_AGAIN
from cron_bridge.control import lost_claims
from cron_bridge.control.audit import audit, occurrence_report
from cron_bridge.jobs import Job, Occurrence
from cron_bridge.plumbing.keys import lock_key
from cron_bridge.queues import installed
from cron_bridge.queues.adapter import Adapter, Dispatch, TaskRef
from cron_bridge.queues.installed import register
from cron_bridge.queues.sending import DropInSender
from cron_bridge.stores import MemoryStore, RunRecord, Store
from cron_bridge.stores.records import PLAIN_TASK
from cron_bridge.testing import FakeClock
from tests.blips import AnswerLost, ClaimsDown, LockBlips
from tests.waiting import wait_for

START = datetime(2026, 5, 1, 12, 0, 0, 500_000, tzinfo=UTC)


class ListQueue(Adapter, name="listqueue"):
    """A queue library of our own, in memory: the test adapter for the queue seam."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.again: list[bool] = []  # each send's Dispatch.again
        self.calls = 0
        self.down = False
        self.lost_answers = 0  # sends that land, then fail as a connection closed does

    def accepts(self, obj: object, queue: object | None) -> bool:
        return isinstance(obj, QueueTask)

    def describe(self, obj: object, queue: object | None) -> TaskRef:
        assert isinstance(obj, QueueTask)
        return TaskRef(
            task=obj.name, name=obj.name, queue=queue if isinstance(queue, str) else None
        )

    def wrap(self, obj: Any, job: Job) -> Any:
        return obj

    def enqueue_many(self, dispatches: Sequence[Dispatch]) -> list[Exception | None]:
        self.calls += 1
        if self.down:
            return [ConnectionError("broker down") for _ in dispatches]
        self.sent.extend(d.meta() for d in dispatches)
        self.again.extend(d.again for d in dispatches)
        if self.lost_answers:
            self.lost_answers -= 1
            return [ConnectionResetError("Connection closed by server.") for _ in dispatches]
        return [None for _ in dispatches]


class QueueTask:
    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: Any) -> None:
        raise AssertionError("the beat never calls a queue target")


@pytest.fixture
def queue(monkeypatch: pytest.MonkeyPatch) -> ListQueue:
    """The test adapter, registered for this test only."""
    monkeypatch.setattr(installed, "_registered", dict(installed._registered))
    adapter = ListQueue()
    register(adapter)
    return adapter


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def beats() -> Iterator[list[Beat]]:
    started: list[Beat] = []
    yield started
    for beat in started:
        beat.stop()


def write_ledgers(beats: Iterable[Beat]) -> None:
    """Write each beat's ledger as its next heartbeat would (every 5 s of a running beat):
    ``history`` shows a replica standing aside once its ledger says that it asked."""
    for beat in beats:
        beat._ledger.flush(beat.store, moved=True)


def outcomes(store: Store, job: str, beats: Iterable[Beat] = ()) -> dict[str, Counter[str]]:
    write_ledgers(beats)
    found: dict[str, Counter[str]] = {}
    for record in lost_claims.history(store, job, 1000):  # what `history` shows
        found.setdefault(record.occurrence_id, Counter())[record.outcome] += 1
    return found


def total(store: Store, job: str, beats: Iterable[Beat] = ()) -> int:
    write_ledgers(beats)
    return len(lost_claims.history(store, job, 1000))


def inline(name: str, every: str = "1s", **options: Any) -> tuple[Job, list[JobContext]]:
    seen: list[JobContext] = []
    job = declare(
        name, every=every, target="inline", handler=lambda ctx: seen.append(ctx), **options
    )
    return job, seen


def test_three_beats_share_each_occurrence(clock: FakeClock, beats: list[Beat]) -> None:
    """One claim winner per occurrence; history shows the other two skipped-claimed, from
    their ledgers (written at their heartbeats): the store holds one record per occurrence,
    not one per replica."""
    store = MemoryStore(clock=clock)
    job, seen = inline("tick")
    beats += [Beat(store, [job], clock=clock, replica_id=f"r{i}") for i in range(3)]
    for beat in beats:
        beat.start()
    for step in range(1, 6):
        clock.advance(1)
        wait_for(
            lambda n=step: len(store.history("tick", 100)) == n,
            30,
            f"occurrence {step}",
            every=0.01,
        )
    for beat in beats:
        beat.stop()  # each writes where its ledger reached (else its next heartbeat does)
    assert total(store, "tick") == 3 * 5
    for counts in outcomes(store, "tick").values():
        assert counts == Counter({"completed": 1, "skipped-claimed": 2})
    assert [r.outcome for r in store.history("tick", 1000)] == ["completed"] * 5
    assert sorted(ctx.occurrence_id for ctx in seen) == sorted(outcomes(store, "tick"))
    assert {ctx.trigger for ctx in seen} == {"schedule"}


def test_instance_scope_runs_on_every_replica_without_claims(
    clock: FakeClock, beats: list[Beat]
) -> None:
    """scope="instance" runs everywhere; its claim key is never taken."""
    store = MemoryStore(clock=clock)
    job, seen = inline("local", scope="instance")
    beats += [Beat(store, [job], clock=clock, replica_id=f"r{i}") for i in range(3)]
    for beat in beats:
        beat.start()
    clock.advance(1)
    wait_for(lambda: len(seen) == 3, 30, "three runs", every=0.01)
    assert len({ctx.replica for ctx in seen}) == 3
    assert store.claimed_by(Occurrence.parse(seen[0].occurrence_id)) is None


def test_on_demand_jobs_are_not_armed_and_trigger_claims_once(
    clock: FakeClock, beats: list[Beat]
) -> None:
    """on_demand=True only runs when triggered; two triggers of one scheduled time run it once."""
    store = MemoryStore(clock=clock)
    job, seen = inline("manual.only", every="1m", on_demand=True)
    beat = Beat(store, [job], clock=clock)
    beats.append(beat)
    beat.start()
    clock.advance(120)
    time.sleep(0.2)
    assert seen == []
    first, second = beat.trigger("manual.only"), beat.trigger("manual.only")
    assert (first.outcome, second.outcome) == ("completed", "skipped-claimed")
    assert first.occurrence_id == "manual.only@2026-05-01T12:02:00.000Z"
    forced = beat.trigger("manual.only", force=True)
    assert forced.outcome == "completed"
    assert forced.occurrence_id == "manual.only@2026-05-01T12:02:00.500Z"
    assert [ctx.trigger for ctx in seen] == ["manual", "manual"]
    with pytest.raises(ConfigError, match="no such job"):
        beat.trigger("nope")


def test_jobs_can_be_added_and_removed_while_running(clock: FakeClock, beats: list[Beat]) -> None:
    """add() arms a job from its next occurrence; remove() stops it."""
    store = MemoryStore(clock=clock)
    beat = Beat(store, [], clock=clock)
    beats.append(beat)
    beat.start()
    job, seen = inline("later")
    beat.add(job)
    clock.advance(1)
    wait_for(lambda: len(seen) == 1, 30, "a run after add", every=0.01)
    assert [j.name for j in beat.jobs()] == ["later"]
    beat.remove("later")
    clock.advance(3)
    time.sleep(0.2)
    assert len(seen) == 1


def test_replace_takes_over_where_the_old_schedule_stopped(clock: FakeClock) -> None:
    """A schedule swapped right after an occurrence both share was fired does not fire it
    again; one swapped before it fires it once; a new occurrence after the swap runs."""
    store = MemoryStore(clock=clock)
    beat = Beat(store, [], clock=clock, replica_id="r0", stored_schedules=False)
    seen: list[str] = []
    first = declare(
        "swap", every="2s", target="inline", handler=lambda ctx: seen.append(ctx.occurrence_id)
    )
    beat.add(first)
    beat.run_pending()  # armed at 12:00:02
    clock.set(START.replace(second=2, microsecond=0))
    beat.run_pending()  # fires 12:00:02
    wait_for(lambda: len(seen) == 1, 30, "the first run", every=0.01)
    # Its lock is freed before its record is written: 12:00:03 must not meet it (on a loaded
    # machine the run's thread can be held between the handler's return and the release).
    wait_for(
        lambda: [r.outcome for r in store.history("swap", 10)] == ["completed"],
        30,
        "the first run's record",
        every=0.01,
    )
    every_second = declare("swap", every="1s", target="inline", handler=first.handler)
    beat.replace(every_second)  # 12:00:02 was fired: not again; 12:00:03 is new
    assert beat.run_pending() == START.replace(second=3, microsecond=0)
    clock.set(START.replace(second=3, microsecond=0))
    beat.run_pending()
    wait_for(lambda: len(seen) == 2, 30, "the run of the new schedule", every=0.01)
    # Its lock is freed before its record is written: 12:00:04 must not meet it.
    wait_for(
        lambda: len([r for r in store.history("swap", 10) if r.outcome == "completed"]) == 2,
        30,
        "the second run's record",
        every=0.01,
    )
    beat.replace(first)  # back to 2 s before 12:00:04 came: fired once, by the new job
    clock.set(START.replace(second=4, microsecond=0))
    beat.run_pending()
    wait_for(lambda: len(seen) == 3, 30, "the shared occurrence", every=0.01)
    time.sleep(0.1)
    assert [s[-13:-5] for s in seen] == ["12:00:02", "12:00:03", "12:00:04"]
    assert len(set(seen)) == 3
    beat.stop()


def test_add_since_arms_from_that_time(clock: FakeClock) -> None:
    """add(since=) arms the first occurrence after ``since``: one already past comes due at
    once, before the start as well as after it."""
    store = MemoryStore(clock=clock)
    beat = Beat(store, [], clock=clock, replica_id="r0", stored_schedules=False)
    seen: list[str] = []
    past = START - timedelta(seconds=5)
    job = declare(
        "once",
        at=past + timedelta(seconds=2),
        target="inline",
        handler=lambda ctx: seen.append(ctx.occurrence_id),
    )
    beat.add(job, since=past)
    assert beat.run_pending() is None  # due at once
    wait_for(lambda: len(seen) == 1, 30, "the run armed in the past", every=0.01)
    late = declare(
        "late",
        at=past + timedelta(seconds=3),
        target="inline",
        handler=lambda ctx: seen.append(ctx.occurrence_id),
    )
    beat.add(late)  # without since: armed from now, so its one time has passed
    beat.run_pending()
    time.sleep(0.1)
    assert len(seen) == 1
    beat.stop()


def test_a_queue_target_is_enqueued_by_name_with_json_metadata(
    clock: FakeClock, beats: list[Beat], queue: ListQueue
) -> None:
    """The claimer enqueues through the adapter and records enqueued; the meta is plain JSON."""
    registry = Registry()
    cluster_task(every="1s", queue="reports", attempts=3, registry=registry)(QueueTask("report"))
    store = MemoryStore(clock=clock)
    beats += [Beat(store, registry, clock=clock, replica_id=f"r{i}") for i in range(2)]
    for beat in beats:
        beat.start()
    clock.advance(1)
    wait_for(
        lambda: len(queue.sent) == 1 and total(store, "report", beats) == 2,
        30,
        "enqueue",
        every=0.01,
    )
    (meta,) = queue.sent
    # The beat's trace context travels too once an OpenTelemetry provider is set (the
    # telemetry tests set one for the whole process): a W3C traceparent.
    trace = meta.pop("trace", None)
    assert trace is None or re.fullmatch(
        r"00-[0-9a-f]{32}-[0-9a-f]{16}-0[0-3]", trace["traceparent"]
    )
    assert meta == {
        "job": "report",
        "occurrence_id": "report@2026-05-01T12:00:01.000Z",
        "scheduled_at": "2026-05-01T12:00:01+00:00",
        "trigger": "schedule",
        "replica": meta["replica"],
        "attempts": 3,
        "copy": meta["copy"],  # the send's own name: tests/test_wire.py pins its form
    }
    assert Counter(r.outcome for r in lost_claims.history(store, "report")) == {
        "enqueued": 1,
        "skipped-claimed": 1,
    }
    assert [r.outcome for r in store.history("report")] == ["enqueued"]


class PlainSender(DropInSender, name="plainsender", what="test entries"):
    """A drop-in sender: it sends another scheduler's entries, whose tasks run unguarded."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def enqueue_many(self, dispatches: Sequence[Dispatch]) -> list[Exception | None]:
        self.sent += [d.job.name for d in dispatches]
        return [None for _ in dispatches]


def test_a_drop_in_senders_occurrences_are_audited_as_sent_plain_tasks(
    clock: FakeClock, beats: list[Beat], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A beat_schedule entry's task records nothing on the worker: its enqueued record says it
    is a plain task, and the audit counts its occurrences sent, not never completed (exit 0),
    while an occurrence of it that was never sent is still one to look into."""
    monkeypatch.setattr(installed, "_registered", dict(installed._registered))
    sender = PlainSender()
    register(sender)
    store = MemoryStore(clock=clock)
    job = Job(name="every-2s", schedule=Every("2s"), adapter="plainsender", task="proj.t")
    beats.append(Beat(store, [job], clock=clock, replica_id="r0"))
    beats[0].start()
    for sends in (1, 2, 3):
        clock.advance(2)
        wait_for(lambda sends=sends: len(sender.sent) == sends, 30, "a send", every=0.01)
    wait_for(lambda: len(store.history("every-2s")) == 3, 30, "3 records", every=0.01)
    assert {(r.outcome, r.reason) for r in store.history("every-2s")} == {("enqueued", PLAIN_TASK)}
    found = audit(store, "every-2s", START, clock.now(), job.schedule)
    assert (found.occurrences, found.sent, found.once, found.never) == (3, 3, 0, {})
    assert found.clean
    earlier = audit(store, "every-2s", START - timedelta(seconds=4), clock.now(), job.schedule)
    assert earlier.sent == 3 and len(earlier.never) == 2 and not earlier.clean
    assert all(why.startswith("never claimed") for why in earlier.why.values())
    first = Occurrence(job="every-2s", scheduled_at=datetime(2026, 5, 1, 12, 0, 2, tzinfo=UTC))
    assert occurrence_report(store, first).final == "enqueued"
    assert audit(store, "every-2s", START, clock.now()).sent == 3, "from the records alone too"


def test_a_broker_that_is_down_is_retried_within_the_grace_then_failed(
    clock: FakeClock, beats: list[Beat], queue: ListQueue
) -> None:
    """Enqueue errors are retried until misfire_grace runs out, then recorded failed with the
    broker's error; the beat goes on and enqueues the next occurrence once the broker is up."""
    registry = Registry()
    cluster_task(every="1m", misfire_grace="10s", registry=registry)(QueueTask("sync"))
    store = MemoryStore(clock=clock)
    beat = Beat(store, registry, clock=clock)
    beats.append(beat)
    beat.start()
    queue.down = True
    clock.advance(60)
    wait_for(lambda: queue.calls >= 3, 30, "retries", every=0.01)
    assert store.history("sync") == []
    clock.advance(11)
    wait_for(lambda: len(store.history("sync")) == 1, 30, "the failed record", every=0.01)
    (failed,) = store.history("sync")
    assert (failed.outcome, failed.error) == ("failed", "ConnectionError: broker down")
    queue.down = False
    clock.advance(50)
    wait_for(lambda: len(store.history("sync")) == 2, 30, "the next occurrence", every=0.01)
    assert store.history("sync")[0].outcome == "enqueued"


def test_a_send_whose_answer_was_lost_goes_again_marked_again_where_copies_are_refused(
    clock: FakeClock, beats: list[Beat], queue: ListQueue
) -> None:
    """An adapter whose worker guard refuses a second copy (the default): the send that landed
    and then failed goes again, marked ``again``, and the occurrence is recorded enqueued."""
    registry = Registry()
    cluster_task(every="1m", misfire_grace="10s", registry=registry)(QueueTask("landed"))
    store = MemoryStore(clock=clock)
    beat = Beat(store, registry, clock=clock)
    beats.append(beat)
    queue.lost_answers = 1
    beat.start()
    clock.advance(60)
    wait_for(lambda: len(store.history("landed")) == 1, 30, "the enqueued record", every=0.01)
    assert queue.again == [False, True]
    assert [r.outcome for r in store.history("landed")] == ["enqueued"]


def test_a_job_whose_worker_refuses_no_copy_is_not_sent_again_whatever_its_adapter(
    clock: FakeClock, beats: list[Beat], queue: ListQueue
) -> None:
    """``overlap="allow"``: its worker takes no lock and reads no mark, so a copy of a send
    that failed but landed would run too; its adapter refusing copies of other jobs does not
    change that. Recorded failed at once, sent once; an ``overlap="skip"`` job beside it in
    the same batch is sent again."""
    registry = Registry()
    cluster_task(every="1m", overlap="allow", registry=registry)(QueueTask("unlocked"))
    cluster_task(every="1m", registry=registry)(QueueTask("locked"))
    store = MemoryStore(clock=clock)
    beat = Beat(store, registry, clock=clock)
    beats.append(beat)
    queue.lost_answers = 1
    beat.start()
    clock.advance(60)
    wait_for(
        lambda: len(store.history("unlocked")) == len(store.history("locked")) == 1,
        30,
        "both records",
        every=0.01,
    )
    (failed,) = store.history("unlocked")
    assert (failed.outcome, failed.reason) == ("failed", NOT_SENT_AGAIN)
    assert [r.outcome for r in store.history("locked")] == ["enqueued"]
    sent = Counter(message["job"] for message in queue.sent)
    assert sent == {"unlocked": 1, "locked": 2}


def test_a_sender_with_no_guard_behind_it_never_sends_a_failed_send_again(
    clock: FakeClock, beats: list[Beat], queue: ListQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drop-in sender (periodiq's actors, a beat_schedule entry: unchanged tasks, no guard
    on the worker): a send that failed may have reached the broker, so it is not sent again,
    which could run it twice; it is recorded failed at once, saying why. The next occurrence
    is sent as usual."""
    monkeypatch.setattr(queue, "refuses_copies", False)
    registry = Registry()
    cluster_task(every="1m", misfire_grace="10s", registry=registry)(QueueTask("unguarded"))
    store = MemoryStore(clock=clock)
    beat = Beat(store, registry, clock=clock)
    beats.append(beat)
    queue.lost_answers = 1
    beat.start()
    clock.advance(60)
    wait_for(lambda: len(store.history("unguarded")) == 1, 30, "the failed record", every=0.01)
    (failed,) = store.history("unguarded")
    assert failed.outcome == "failed"
    assert failed.error == "ConnectionResetError: Connection closed by server."
    assert failed.reason == NOT_SENT_AGAIN
    assert len(queue.sent) == 1 and queue.calls == 1  # landed once, never sent again
    queue.down = True
    clock.advance(60)
    wait_for(
        lambda: len(store.history("unguarded")) == 2, 30, "the second failed record", every=0.01
    )
    assert queue.calls == 2
    queue.down = False
    clock.advance(60)
    wait_for(lambda: len(store.history("unguarded")) == 3, 30, "the next occurrence", every=0.01)
    assert [r.outcome for r in store.history("unguarded")] == ["enqueued", "failed", "failed"]
    assert queue.calls == 3 and queue.again == [False, False]


def test_a_claimed_occurrence_asks_again_for_its_lock_through_a_store_blip(
    clock: FakeClock, beats: list[Beat]
) -> None:
    """The claim is won, then the store fails the overlap-lock request twice: the run still
    happens once, since no other replica will run an occurrence this one claimed."""
    store = LockBlips(2, clock=clock)
    job, seen = inline("blip", misfire_grace="30s")
    beat = Beat(store, [job], clock=clock)
    beats.append(beat)
    beat.start()
    clock.advance(1)
    wait_for(lambda: len(store.history("blip")) == 1, 30, "the run after the blip", every=0.01)
    (record,) = store.history("blip")
    assert record.outcome == "completed"
    assert [ctx.occurrence_id for ctx in seen] == [record.occurrence_id]
    assert store.failures == 0


def test_a_claim_made_whose_answer_was_lost_is_run_once_when_asked_again(
    clock: FakeClock, beats: list[Beat]
) -> None:
    """The store made the claim and its answer was lost: asked again, the claim is this
    replica's own and is read as won, so the occurrence runs once (before, it was lost:
    "claimed by" a live replica that never ran it). Another replica never gets it."""
    store = AnswerLost(1, clock=clock)
    job, seen = inline("lost.answer", misfire_grace="30s")
    beat, other = Beat(store, [job], clock=clock), Beat(store, [job], clock=clock)
    beats.extend([beat, other])
    beat.start()
    clock.advance(1)
    wait_for(
        lambda: store.failures == 0 and len(seen) == 1,
        30,
        "the run after the lost answer",
        every=0.01,
    )
    other.start()
    clock.advance(1)
    wait_for(lambda: len(seen) == 2, 30, "the next occurrence", every=0.01)
    first = seen[0].occurrence_id

    def recorded() -> list[str]:
        return [
            r.outcome
            for r in store.history("lost.answer", 50)
            if r.occurrence_id == first and r.outcome != "skipped-claimed"
        ]

    # The handler has run; its record is written after it returns (late on a loaded machine).
    wait_for(recorded, 30, "the first occurrence's record", every=0.01)
    time.sleep(0.3)  # time for a second run, if one were coming
    assert len({ctx.occurrence_id for ctx in seen}) == len(seen) == 2, seen
    assert recorded() == ["completed"]


def test_a_manual_run_of_an_occurrence_whose_claim_went_unanswered_never_runs_it_twice(
    clock: FakeClock, beats: list[Beat]
) -> None:
    """The schedule's claim batch failed (unmade); "run now" then claims that occurrence and
    runs it; when the schedule asks again, the claim is this replica's own, but the manual
    run's: it is not read as the lost batch's, and the occurrence runs once."""
    store = ClaimsDown(clock=clock)
    job, seen = inline("pressed", misfire_grace="30s")
    beat = Beat(store, [job], clock=clock)
    beats.append(beat)
    beat.start()
    clock.advance(1)
    wait_for(lambda: store.refused > 0, 30, "a claim batch that failed", every=0.01)
    result = beat.trigger("pressed")
    assert result.outcome == "completed" and result.trigger == "manual", result
    store.down = False
    clock.advance(0.5)
    clock.advance(0.5)
    wait_for(lambda: len(seen) >= 2, 30, "the next occurrence", every=0.01)
    time.sleep(0.3)
    ran = [ctx.occurrence_id for ctx in seen]
    assert ran.count(result.occurrence_id) == 1, ran


def test_a_batch_failure_noted_after_a_manual_run_does_not_run_the_occurrence_again() -> None:
    """The claim batch raised, then a manual trigger claimed and ran its occurrence, and
    only then did the batch's thread note its failure (a loaded machine): asked again, the
    claim is this replica's own, the manual run's, and is not read as the batch's. A
    failure noted before the trigger is read as the batch's, as it should."""
    from cron_bridge.beat.claiming import Unanswered
    from cron_bridge.beat.planning import Planned

    store = MemoryStore()
    job = declare("pressed", every="1s", target="inline", handler=lambda ctx: None)
    item = Planned(
        job=job,
        occurrence=Occurrence(job="pressed", scheduled_at=datetime(2026, 5, 1, tzinfo=UTC)),
        trigger="schedule",
        run=True,
    )
    unanswered = Unanswered()
    unanswered.forget(item.occurrence.claim_key)  # the trigger, first
    assert store.claim(item.occurrence, "r1")
    unanswered.add([item])  # the batch's failure, noted late
    assert unanswered.adopt(store, "r1", [item], [False]) == [False]
    other = Planned(
        job=job,
        occurrence=Occurrence(job="pressed", scheduled_at=datetime(2026, 5, 2, tzinfo=UTC)),
        trigger="schedule",
        run=True,
    )
    unanswered.add([other])  # made by the store, its answer lost
    assert store.claim(other.occurrence, "r1")
    assert unanswered.adopt(store, "r1", [other], [False]) == [True]


def test_a_lock_the_store_never_answers_for_fails_the_occurrence_out_loud(
    clock: FakeClock, beats: list[Beat]
) -> None:
    """When the store stays down past misfire_grace the handler never runs, and the occurrence
    is recorded failed with the store's error (once the store takes records again)."""
    store = LockBlips(10**6, clock=clock)
    job, seen = inline("down", misfire_grace="1s")
    beat = Beat(store, [job], clock=clock)
    beats.append(beat)
    beat.start()
    clock.advance(1)
    wait_for(lambda: len(store.history("down")) == 1, 30, "the failed record", every=0.01)
    (record,) = store.history("down")
    assert (record.outcome, record.error) == ("failed", "StoreUnavailable: blip (store at memory)")
    assert seen == []


def test_a_burst_is_claimed_in_slices_and_enqueued_once(
    clock: FakeClock, beats: list[Beat], queue: ListQueue
) -> None:
    """600 queue jobs due at once on 3 beats: each beat claims them in its own order, slice by
    slice (at most SLICES_MAX claims each), and every occurrence is enqueued exactly once."""
    registry = Registry()
    for n in range(600):
        cluster_task(every="1m", registry=registry)(QueueTask(f"burst.{n:03d}"))
    store = MemoryStore(clock=clock)
    beats += [Beat(store, registry, clock=clock, replica_id=f"r{i}") for i in range(3)]
    for beat in beats:
        beat.start()
    clock.advance(60)
    wait_for(lambda: len(queue.sent) == 600, 30, "the burst", every=0.01)
    wait_for(
        lambda: sum(total(store, f"burst.{n:03d}", beats) for n in range(600)) == 1800,
        30,
        "the records",
        every=0.01,
    )
    assert len({sent["occurrence_id"] for sent in queue.sent}) == 600
    for n in range(600):
        for counts in outcomes(store, f"burst.{n:03d}").values():
            assert counts == Counter({"enqueued": 1, "skipped-claimed": 2})
    # store writes grow with the occurrences, not with occurrences x replicas
    assert sum(len(store.history(f"burst.{n:03d}", 10)) for n in range(600)) == 600
    for beat in beats:
        assert beat.claim_stats.asked == 600
        # One round trip per batch, counted on the claiming thread alone (the three beats
        # share one in-process store, whose total counts all of them).
        assert beat.claim_stats.batches <= SLICES_MAX
        assert beat.claim_stats.round_trips == beat.claim_stats.batches
    assert sum(beat.claim_stats.won for beat in beats) == 600


def test_stop_aborts_runs_still_going_with_shutdown(clock: FakeClock) -> None:
    """stop() waits shutdown_timeout, aborts with "shutdown", releases the lock, keeps the claim."""
    store = MemoryStore(clock=clock)
    started = threading.Event()
    reasons: list[str | None] = []

    def long_run(ctx: JobContext) -> None:
        started.set()
        ctx.signal.wait(30)
        reasons.append(ctx.signal.reason)
        ctx.signal.raise_if_aborted()

    job = declare("long", every="1s", target="inline", handler=long_run)
    beat = Beat(store, [job], clock=clock, shutdown_timeout="300ms")
    beat.start()
    clock.advance(1)
    assert started.wait(10)
    began = time.monotonic()
    beat.stop()
    assert time.monotonic() - began < 5
    assert reasons == ["shutdown"]
    (record,) = store.history("long")
    assert (record.outcome, record.reason) == ("aborted", "shutdown")
    assert store.acquire(lock_key("long"), "someone-else", timedelta(seconds=1))
    assert store.claimed_by(Occurrence.parse(record.occurrence_id)) == beat.replica_id


def test_timeout_aborts_the_run(clock: FakeClock) -> None:
    """timeout= aborts ctx.signal with reason "timeout"."""
    store = MemoryStore(clock=clock)

    def slow(ctx: JobContext) -> None:
        ctx.signal.wait(30)
        ctx.signal.raise_if_aborted()

    beat = Beat(
        store,
        [
            declare(
                "slow", every="1h", timeout="200ms", on_demand=True, target="inline", handler=slow
            )
        ],
        clock=clock,
    )
    result = beat.trigger("slow")
    assert (result.outcome, result.reason) == ("aborted", "timeout")


def test_inline_attempts_retry_with_the_backoff(clock: FakeClock) -> None:
    """attempts=3: three tries, ctx.attempt 1, 2, 3, each recorded, then failed."""
    store = MemoryStore(clock=clock)
    attempts: list[int] = []

    def flaky(ctx: JobContext) -> None:
        attempts.append(ctx.attempt)
        raise ValueError(f"try {ctx.attempt}")

    job = declare(
        "flaky",
        every="1h",
        attempts=3,
        on_demand=True,
        target="inline",
        handler=flaky,
        backoff=None,
    )
    result = Beat(store, [job], clock=clock).trigger("flaky")
    assert attempts == [1, 2, 3]
    assert (result.outcome, result.error) == ("failed", "ValueError: try 3")
    assert [(r.attempt, r.outcome) for r in store.history("flaky")] == [
        (3, "failed"),
        (2, "failed"),
        (1, "failed"),
    ]


def test_several_beats_in_one_process_keep_to_their_stores(
    clock: FakeClock, beats: list[Beat]
) -> None:
    """Two beats with two stores in one process: each claims in its own store only."""
    first, second = MemoryStore(clock=clock), MemoryStore(clock=clock)
    job, seen = inline("shared.name")
    beats += [Beat(first, [job], clock=clock), Beat(second, [job], clock=clock)]
    for beat in beats:
        beat.start()
    clock.advance(1)
    wait_for(lambda: len(seen) == 2, 30, "a run in each store", every=0.01)
    # the record is written after the handler returns: wait for it, then compare
    wait_for(
        lambda: first.history("shared.name") and second.history("shared.name"),
        30,
        "a record in each store",
        every=0.01,
    )
    time.sleep(0.1)
    assert [r.outcome for r in first.history("shared.name")] == ["completed"]
    assert [r.outcome for r in second.history("shared.name")] == ["completed"]


def test_cluster_jobs_refuse_the_memory_store_in_production(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beat.start() refuses cluster jobs on the memory store under CRON_BRIDGE_ENV=production."""
    monkeypatch.setenv("CRON_BRIDGE_ENV", "production")
    job, _ = inline("tick")
    with pytest.raises(ConfigError, match="allow_local_cluster"):
        Beat(MemoryStore(clock=clock), [job], clock=clock).start()
    local, _ = inline("local", scope="instance")
    beat = Beat(MemoryStore(clock=clock), [local], clock=clock)
    beat.start()
    beat.stop()


def test_records_carry_the_replica_and_the_trigger(clock: FakeClock) -> None:
    """Every record names the replica and the trigger."""
    store = MemoryStore(clock=clock)
    job, _ = inline("x", on_demand=True)
    Beat(store, [job], clock=clock, replica_id="host-1-abcd").trigger("x")
    (record,) = store.history("x")
    assert isinstance(record, RunRecord)
    assert (record.replica, record.trigger) == ("host-1-abcd", "manual")


def test_inline_jobs_can_be_declared_on_the_beat_itself(
    clock: FakeClock, beats: list[Beat]
) -> None:
    """@beat.every and @beat.cron add inline jobs to that beat only, named after the function
    (module and qualified name) unless name= says otherwise; a bad option is a ConfigError
    naming the job."""
    store = MemoryStore(clock=clock)
    beat = Beat(store, [], clock=clock)
    beats.append(beat)
    seen: list[str] = []

    beat.every("1h", misfire="run-once")(module_level_handler)

    @beat.every("1s", name="tick")
    def tick(ctx: JobContext) -> None:
        seen.append(ctx.name)

    @beat.cron("*/5 * * * *", tz="Europe/Warsaw", name="five")
    def five(ctx: JobContext) -> None:
        seen.append(ctx.name)

    assert {job.name: job.target for job in beat.jobs()} == {
        f"{__name__}.module_level_handler": "inline",
        "tick": "inline",
        "five": "inline",
    }
    with pytest.raises(ConfigError, match=r"'bad'.*misfire"):
        beat.every("1s", name="bad", misfire="later")(tick)
    beat.start()
    clock.advance(1)
    wait_for(lambda: len(seen) == 1, 30, "the interval job", every=0.01)
    clock.advance(299)
    wait_for(lambda: "five" in seen, 30, "the cron job", every=0.01)


def module_level_handler(ctx: JobContext) -> None:
    """An inline job declared on a beat without a name."""


def test_a_stop_that_comes_while_the_beat_starts_stops_it(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGTERM can come while ``start()`` runs, after the signal handlers are in and before
    the loop's thread is started (a pod stopped as it starts): the stop, on a thread of its
    own, waits for the loop to start and then stops it. It tried to join the thread before
    it was started, died of a RuntimeError, and the beat never stopped."""
    job, _ = inline("tick")
    beat = Beat(MemoryStore(clock=clock), [job], clock=clock)
    stopper = threading.Thread(target=beat.stop, name="as-the-signal-handler-does")
    jobs = beat.jobs

    def stopped_meanwhile() -> list[Job]:
        if beat._thread is not None and not stopper.is_alive() and not beat._stopping.is_set():
            stopper.start()  # as on_signal does, from inside start(), before the loop starts
            wait_for(beat._stopping.is_set, 30, "the stop to begin", every=0.01)
        return jobs()

    monkeypatch.setattr(beat, "jobs", stopped_meanwhile)
    beat.start()
    stopper.join(30)
    assert not stopper.is_alive() and beat._stopped.is_set()
    assert beat._thread is not None and not beat._thread.is_alive()
