"""The guard's steps, each alone: admitting a run (the overlap lock and the completion mark),
the attempt (the handler's call and how it ended), the helpers around it (watchdog, heartbeat,
timeout), handing the lock back (marked before it is freed), and reporting the attempt."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest

from cron_bridge import JobContext, declare
from cron_bridge.context import AbortSignal, Trigger
from cron_bridge.errors import QueueRetry, StoreUnavailable
from cron_bridge.jobs import Job, Occurrence
from cron_bridge.monitors import CheckIn
from cron_bridge.plumbing.keys import began_key, lock_key, lock_owner
from cron_bridge.run.guard import Guard, _Attempt, _attempt, _context
from cron_bridge.run.lease import Lease
from cron_bridge.schedules import Schedule
from cron_bridge.stores import MemoryStore, RunRecord
from cron_bridge.testing import FakeClock
from tests.blips import FinishBlips
from tests.waiting import wait_for

AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def job_of(name: str, handler: object = None, **options: Any) -> Job:
    options.setdefault("lock_ttl", "5s")
    return declare(
        name, every="1s", target="inline", handler=handler or (lambda ctx: None), **options
    )  # type: ignore[arg-type]


def lock_of(job: Job, occurrence: Occurrence, replica: str = "r1") -> tuple[str, str]:
    return lock_key(job.name), lock_owner(replica, occurrence.id, "0123abcd")


def record_maker(
    job: Job, occurrence: Occurrence, *, trigger: Trigger = "schedule", attempt: int = 1
) -> Callable[..., RunRecord]:
    return partial(
        RunRecord,
        job=job.name,
        occurrence_id=occurrence.id,
        trigger=trigger,
        replica="r1",
        started_at=AT,
        attempt=attempt,
    )


class Journal(MemoryStore):
    """A memory store that keeps the lock and mark requests it is sent, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str] = []

    def acquire(self, key: str, owner: str, ttl: timedelta) -> bool:
        self.sent.append(f"acquire {key}")
        return super().acquire(key, owner, ttl)

    def acquire_fenced(self, key: str, owner: str, ttl: timedelta) -> int | None:
        self.sent.append(f"acquire {key}")
        return super().acquire_fenced(key, owner, ttl)

    def extend(self, key: str, owner: str, ttl: timedelta) -> bool:
        self.sent.append(f"extend {key}")
        return super().extend(key, owner, ttl)

    def release(self, key: str, owner: str) -> bool:
        self.sent.append(f"release {key}")
        return super().release(key, owner)

    def finished(self, occurrence: Occurrence) -> bool:
        self.sent.append(f"finished {occurrence.id}")
        return super().finished(occurrence)


class Told:
    """A monitor that keeps what it is told, and what the store held when it was told."""

    def __init__(self, store: MemoryStore | None = None) -> None:
        self.store = store
        self.said: list[tuple[str, Any]] = []

    def check(
        self, job: str, schedule: Schedule, misfire_grace: timedelta, timeout: timedelta | None
    ) -> None:
        pass

    def started(self, check_in: CheckIn) -> None:
        self.said.append(("started", check_in.attempt))

    def finished(self, check_in: CheckIn, *, ok: bool, duration: float | None) -> None:
        recorded = None if self.store is None else len(self.store.history(check_in.job))
        self.said.append(("finished", (ok, recorded)))


def guard_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "cron-bridge-guard" and t.is_alive()]


# Admitting a run: the overlap lock and the completion mark.


@pytest.mark.parametrize("options", [{"overlap": "allow"}, {"scope": "instance"}])
def test_a_job_that_takes_no_lock_is_admitted_without_asking_the_store(
    options: dict[str, str],
) -> None:
    """overlap="allow" and instance-scope jobs start with no lease, and nothing is sent."""
    store = Journal()
    job = job_of("free.job", **options)
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    admitted = Guard(store, "r1")._admit(
        job, occurrence, "queue", 1, lock_of(job, occurrence), AbortSignal()
    )
    assert admitted == (None, None)
    assert store.sent == []


def test_an_admitted_run_holds_the_lock_with_a_lease_counted_from_before_the_request() -> None:
    store = MemoryStore()
    job = job_of("held.job", lock_ttl="30s")
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    lock = lock_of(job, occurrence)
    guard = Guard(store, "r1")
    before = time.monotonic()
    lease, refused = guard._admit(job, occurrence, "schedule", 1, lock, AbortSignal())
    assert refused is None and lease is not None
    assert store.holder(lock[0]) == lock[1]
    assert before + 29.0 <= lease.until <= time.monotonic() + 29.0  # 30 s less a 1 s margin
    guard.release_all()  # a run it admitted is one whose lock it releases on shutdown
    assert store.holder(lock[0]) is None


def test_a_queue_delivery_of_a_marked_occurrence_is_refused_before_the_lock_is_asked() -> None:
    store = Journal()
    job = job_of("marked.job")
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    store.finish(occurrence)
    store.sent.clear()
    admitted = Guard(store, "r1")._admit(
        job, occurrence, "queue", 1, lock_of(job, occurrence), AbortSignal()
    )
    assert admitted == (None, ("skipped-completed", None))
    assert store.sent == [f"finished {occurrence.id}"]


class MarkedWhileAsking(MemoryStore):
    """The run that completes the occurrence writes its mark and frees the lock just after
    this delivery's first look: it takes the lock and finds the mark there."""

    def __init__(self, lock: tuple[str, str]) -> None:
        super().__init__()
        self.looks = 0
        self.first_owner = lock_owner("r0", "other", "ffff0000")
        self.acquire(lock[0], self.first_owner, timedelta(seconds=30))

    def finished(self, occurrence: Occurrence) -> bool:
        self.looks += 1
        if self.looks == 1:
            answer = super().finished(occurrence)
            super().finish(occurrence, (lock_key(occurrence.job), self.first_owner))
            return answer
        return super().finished(occurrence)


def test_a_delivery_that_finds_the_mark_under_the_lock_is_refused_and_frees_it() -> None:
    job = job_of("racing.job")
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    lock = lock_of(job, occurrence)
    store = MarkedWhileAsking(lock)
    guard = Guard(store, "r1")
    admitted = guard._admit(job, occurrence, "queue", 1, lock, AbortSignal())
    assert admitted == (None, ("skipped-completed", None))
    assert store.looks == 2  # before the lock was asked for, and under it
    assert store.holder(lock[0]) is None
    assert guard._held == {}


@pytest.mark.parametrize("trigger", ["schedule", "misfire", "manual"])
def test_only_a_queue_delivery_reads_the_completion_mark(trigger: Trigger) -> None:
    """Nothing but a queue message is delivered twice: other runs never ask for the mark."""
    store = Journal()
    job = job_of("once.job")
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    lease, refused = Guard(store, "r1")._admit(
        job, occurrence, trigger, 1, lock_of(job, occurrence), AbortSignal()
    )
    assert lease is not None and refused is None
    assert store.sent == [f"acquire {lock_key(job.name)}"]


def test_a_first_attempt_behind_another_run_is_refused_naming_it() -> None:
    store = MemoryStore()
    job = job_of("busy.job")
    other = Occurrence(job=job.name, scheduled_at=AT - timedelta(seconds=1))
    store.acquire(*lock_of(job, other, "r0"), job.lock_ttl)
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    admitted = Guard(store, "r1")._admit(
        job, occurrence, "schedule", 1, lock_of(job, occurrence), AbortSignal()
    )
    assert admitted == (None, ("skipped-overlap", f"held by {other.id} on r0"))


def test_a_skip_is_stamped_when_the_lock_was_seen_held_not_when_it_was_asked_for() -> None:
    """A slow store's answer: the attempt began at AT, the acquire came back 2 s later, and
    the skip's record says when the holder was seen, which is what a reader compares with
    the holder's run."""
    clock = FakeClock(AT)

    class Slow(MemoryStore):
        def acquire_fenced(self, key: str, owner: str, ttl: timedelta) -> int | None:
            clock.advance(2.0)
            return super().acquire_fenced(key, owner, ttl)

    store = Slow()
    job = job_of("slow.job")
    other = Occurrence(job=job.name, scheduled_at=AT - timedelta(seconds=1))
    store.acquire(*lock_of(job, other, "r0"), job.lock_ttl)
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    record = Guard(store, "r1", clock=clock).run(job, occurrence, trigger="schedule")
    assert (record.outcome, record.reason) == ("skipped-overlap", f"held by {other.id} on r0")
    assert record.started_at == AT + timedelta(seconds=2)
    assert store.history(job.name) == [record]


def test_admitting_raises_when_the_lock_cannot_be_asked_for() -> None:
    """At most once wins: a store that does not answer the acquire starts nothing."""

    class Down(MemoryStore):
        def acquire_fenced(self, key: str, owner: str, ttl: timedelta) -> int | None:
            raise StoreUnavailable("down", host="memory")

    job = job_of("down.job")
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    with pytest.raises(StoreUnavailable):
        Guard(Down(), "r1")._admit(
            job, occurrence, "schedule", 1, lock_of(job, occurrence), AbortSignal()
        )


def test_of_two_copies_of_a_message_the_one_that_began_runs_and_the_other_is_refused() -> None:
    """A takeover's copy beside the claimer's (or a resend's beside a send that landed): the
    first copy to begin is the occurrence's run, however it ends; the other is refused
    (``skipped-claimed``, naming the copy that began) and frees the lock, while the first
    copy's own redelivery and the queue's retry of it run as before."""
    ran: list[int] = []

    def failing(ctx: JobContext) -> None:
        ran.append(ctx.attempt)
        raise RuntimeError("the ledger is locked")

    store = MemoryStore()
    job = job_of("copied.job", failing)
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    guard = Guard(store, "w1")
    first = guard.run(job, occurrence, trigger="queue", copy="copy-a")
    assert first.outcome == "failed" and ran == [1]
    other = Guard(store, "w2").run(job, occurrence, trigger="queue", copy="copy-b")
    assert (other.outcome, other.reason) == (
        "skipped-claimed",
        "another copy of its message began (copy-a)",
    )
    assert ran == [1] and store.holder(lock_key(job.name)) is None
    assert guard.run(job, occurrence, trigger="queue", copy="copy-a").outcome == "failed"
    assert guard.run(job, occurrence, trigger="queue", attempt=2, copy="copy-a").outcome == "failed"
    assert ran == [1, 1, 2]
    # A message from a beat naming no copy is told apart by the completion mark only.
    assert guard.run(job, occurrence, trigger="queue").outcome == "failed"
    assert ran == [1, 1, 2, 1]


def test_a_copy_that_gave_up_while_the_store_was_down_leaves_no_began_mark() -> None:
    """Its first try's mark was written and the answer lost; its second try, asking again
    while the store is still down, must not drop the first's takeback: once the store
    answers, the mark is taken back, and another copy runs the occurrence (found by the
    review of ``Store.admit``: the takeback was dropped before the store was asked)."""

    class Lossy(MemoryStore):
        mode = "ok"  # "lose": the began mark is written, its answer lost, then all is down

        def _gate(self) -> None:
            if self.mode == "down":
                raise StoreUnavailable("down", host="memory")

        def acquire(self, key: str, owner: str, ttl: timedelta) -> bool:
            self._gate()
            taken = super().acquire(key, owner, ttl)
            if self.mode == "lose" and key.startswith("began:"):
                self.mode = "down"
                raise StoreUnavailable("the answer was lost", host="memory")
            return taken

        def acquire_fenced(self, key: str, owner: str, ttl: timedelta) -> int | None:
            self._gate()
            return super().acquire_fenced(key, owner, ttl)

        def release(self, key: str, owner: str) -> bool:
            self._gate()
            return super().release(key, owner)

        def holder(self, key: str) -> str | None:
            self._gate()
            return super().holder(key)

        def record_many(self, records: Any) -> None:
            self._gate()
            super().record_many(records)

    ran: list[str] = []
    job = job_of("gave.up", lambda ctx: ran.append(ctx.replica))
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    store = Lossy()
    guard = Guard(store, "w1")
    store.mode = "lose"
    for _ in range(2):  # the try whose answer was lost, then the next, still down
        with pytest.raises(StoreUnavailable):
            guard.run(job, occurrence, trigger="queue", copy="copy-a")
    store.mode = "ok"  # copy-a gives up; the store answers again
    mark = began_key(job.name, occurrence.epoch_ms)
    wait_for(lambda: store.holder(mark) is None, 5, "the mark taken back")
    wait_for(lambda: store.holder(lock_key(job.name)) is None, 5, "the lock freed")
    other = Guard(store, "w2").run(job, occurrence, trigger="queue", copy="copy-b")
    assert (other.outcome, ran) == ("completed", ["w2"]), (other, ran)


def test_a_copy_that_cannot_mark_itself_begun_does_not_run_and_frees_its_lock() -> None:
    """Not knowing which copy began is not a run: the store's outage goes to the caller
    (which asks again within misfire_grace), and the lock is not left held: the lock and the
    mark are asked for in one step (``Store.admit``), so the guard cannot tell which of them
    the store took, and the releaser frees the lock once the store answers (its first try a
    quarter second on, or the next try's flush, whichever comes first)."""

    class BeganDown(MemoryStore):
        def acquire(self, key: str, owner: str, ttl: timedelta) -> bool:
            if key.startswith("began:"):
                raise StoreUnavailable("down", host="memory")
            return super().acquire(key, owner, ttl)

    store = BeganDown()
    ran: list[str] = []
    job = job_of("unsure.job", ran.append)
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    with pytest.raises(StoreUnavailable):
        Guard(store, "w1").run(job, occurrence, trigger="queue", copy="copy-a")
    wait_for(lambda: store.holder(lock_key(job.name)) is None, 5, "the lock freed")
    assert ran == [] and store.history(job.name) == []


class SlowToMark(MemoryStore):
    """Marking the first copy as begun takes longer than the run's lease (a freeze, a slow
    store)."""

    def acquire(self, key: str, owner: str, ttl: timedelta) -> bool:
        taken = super().acquire(key, owner, ttl)
        if key.startswith("began:") and owner.startswith("copy-a|"):
            time.sleep(1.2)
        return taken


def test_a_copy_marked_begun_whose_handler_never_started_leaves_the_mark_to_another() -> None:
    """Its lease ran out while it was being marked, so the last look before the handler
    stops it (aborted, lock-lost): it did not begin, its mark is taken back, and another copy
    then runs the occurrence."""
    ran: list[str] = []
    store = SlowToMark()
    job = job_of("late.copy", lambda ctx: ran.append(ctx.replica), lock_ttl="1s")
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    first = Guard(store, "w1").run(job, occurrence, trigger="queue", copy="copy-a")
    assert (first.outcome, first.reason, ran) == ("aborted", "lock-lost", [])
    assert store.holder(f"began:{job.name}:{occurrence.epoch_ms}") is None
    second = Guard(store, "w2").run(job, occurrence, trigger="queue", copy="copy-b")
    assert (second.outcome, ran) == ("completed", ["w2"])


class MarkAnswerLost(MemoryStore):
    """Marking a copy as begun is written, and its answer lost (then the store answers)."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = 1

    def acquire(self, key: str, owner: str, ttl: timedelta) -> bool:
        taken = super().acquire(key, owner, ttl)
        if key.startswith("began:") and self.lost:
            self.lost -= 1
            raise StoreUnavailable("the answer was lost", host="memory")
        return taken


def test_a_copy_that_gave_up_after_its_mark_was_written_does_not_refuse_another() -> None:
    """The mark was written but its answer lost, and this copy gave up (the store stayed out
    past its retries): its guard takes the mark back once the store answers, so the copy
    that comes next runs the occurrence instead of being refused by one that never began.
    The same copy trying again marks it afresh and runs it once."""
    ran: list[str] = []
    store = MarkAnswerLost()
    job = job_of("lost.mark", lambda ctx: ran.append(ctx.replica))
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    gave_up = Guard(store, "w1")
    with pytest.raises(StoreUnavailable):
        gave_up.run(job, occurrence, trigger="queue", copy="copy-a")
    assert str(store.holder(f"began:{job.name}:{occurrence.epoch_ms}")).startswith("copy-a|")
    gave_up.flush_releases()  # the store answers again
    assert store.holder(f"began:{job.name}:{occurrence.epoch_ms}") is None
    assert Guard(store, "w2").run(job, occurrence, trigger="queue", copy="copy-b").outcome == (
        "completed"
    )
    store.lost = 1
    again = Guard(store, "w3")
    occurrence = Occurrence(job=job.name, scheduled_at=AT + timedelta(minutes=1))
    with pytest.raises(StoreUnavailable):
        again.run(job, occurrence, trigger="queue", copy="copy-c")
    assert again.run(job, occurrence, trigger="queue", copy="copy-c").outcome == "completed"
    assert ran == ["w2", "w3"]


class SlowToReadTheMark(MemoryStore):
    """Reading who marked the occurrence begun takes longer than a run's lease, once."""

    def __init__(self) -> None:
        super().__init__()
        self.slow = False

    def holder(self, key: str) -> str | None:
        if key.startswith("began:") and self.slow:
            self.slow = False
            time.sleep(1.2)
        return super().holder(key)


def test_a_retry_that_never_started_leaves_its_copys_mark_to_it() -> None:
    """Copy a began (and failed); its retry finds the mark its first try made, and its lease
    runs out before the handler: the mark stays copy a's, since a try of it began, so copy b
    is still refused."""
    ran: list[int] = []

    def failing(ctx: JobContext) -> None:
        ran.append(ctx.attempt)
        raise RuntimeError("the ledger is locked")

    store = SlowToReadTheMark()
    job = job_of("retried.copy", failing, lock_ttl="1s", attempts=3)
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    guard = Guard(store, "w1")
    assert guard.run(job, occurrence, trigger="queue", copy="copy-a").outcome == "failed"
    store.slow = True
    late = guard.run(job, occurrence, trigger="queue", attempt=2, copy="copy-a")
    assert (late.outcome, late.reason, ran) == ("aborted", "lock-lost", [1])
    other = Guard(store, "w2").run(job, occurrence, trigger="queue", copy="copy-b")
    assert other.outcome == "skipped-claimed" and ran == [1]


def test_a_resumable_runs_lock_is_kept_by_a_stop_that_releases_the_others() -> None:
    """A stop releases the locks of runs still going whose handlers ignored the abort, but
    not a resumable run's: another replica that takes its claim over waits behind it
    instead of running beside it. The run frees it when it ends, marked completed."""
    release = threading.Event()
    store = MemoryStore()
    job = job_of("stubborn.job", lambda ctx: release.wait(30), attempts=2, lock_ttl="3s")
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    guard = Guard(store, "r1")
    ended: list[RunRecord] = []
    thread = threading.Thread(
        target=lambda: ended.append(guard.run(job, occurrence, trigger="schedule", resumable=True))
    )
    thread.start()
    wait_for(lambda: store.holder(lock_key(job.name)) is not None, 10, "the run's lock")
    guard.release_all()
    assert store.holder(lock_key(job.name)) is not None
    release.set()
    thread.join(10)
    assert [r.outcome for r in ended] == ["completed"]
    assert store.holder(lock_key(job.name)) is None and store.finished(occurrence)


def test_a_resumed_attempt_waits_behind_its_own_occurrences_run_as_long_as_it_goes() -> None:
    """The taker's attempt waits past its patience (misfire_grace, lock_ttl) while a run of
    its own occurrence holds the lock (a claimer only cut off, still running): that run's
    end decides, here completed, so the attempt is refused by the mark, not yielded."""
    store = MemoryStore()
    job = job_of("long.attempt", attempts=2, lock_ttl="1s", misfire_grace="1s")
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    running = (lock_key(job.name), lock_owner("claimer", occurrence.id, "feedface"))
    assert store.acquire(*running, timedelta(seconds=1))
    stop = threading.Event()

    def heartbeat() -> None:  # the claimer's run, going for 2.5 s, then completed
        until = time.monotonic() + 2.5
        while time.monotonic() < until and not stop.wait(0.2):
            store.extend(*running, timedelta(seconds=1))
        store.finish(occurrence, running)

    beating = threading.Thread(target=heartbeat)
    beating.start()
    record = Guard(store, "taker").run(
        job, occurrence, trigger="schedule", attempt=2, resumable=True
    )
    stop.set()
    beating.join(10)
    assert record.outcome == "skipped-completed", (record.outcome, record.reason)


# The attempt: the handler's call and how it ended.


def attempt_of(
    job: Job,
    *,
    signal: AbortSignal | None = None,
    call: Callable[[JobContext], Any] | None = None,
    trigger: Trigger = "schedule",
) -> _Attempt:
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    ctx = _context(job, occurrence, trigger, 1, "r1", signal or AbortSignal())
    return _attempt(job, occurrence, ctx, call, record_maker(job, occurrence, trigger=trigger))


def test_a_handler_that_returns_is_a_completed_attempt_with_its_duration() -> None:
    told = Told()
    seen: list[JobContext] = []
    ended = attempt_of(job_of("fine.job", seen.append, monitor=told))
    assert ended.record.outcome == "completed" and ended.record.duration_ms is not None
    assert (ended.failure, ended.retried, ended.escaping) == (None, False, None)
    assert ended.watch is not None and told.said == [("started", 1)]
    [ctx] = seen
    assert (ctx.name, ctx.occurrence_id, ctx.trigger, ctx.replica) == (
        "fine.job",
        Occurrence(job="fine.job", scheduled_at=AT).id,
        "schedule",
        "r1",
    )


def test_an_attempt_whose_signal_was_aborted_before_it_starts_never_calls_the_handler() -> None:
    """The last look before the handler: no call, no monitor check-in, no duration."""
    calls: list[str] = []
    told = Told()
    signal = AbortSignal()
    signal.abort("lock-lost")
    ended = attempt_of(job_of("late.job", calls.append, monitor=told), signal=signal)
    assert (ended.record.outcome, ended.record.reason) == ("aborted", "lock-lost")
    assert ended.record.duration_ms is None and ended.watch is None
    assert calls == [] and told.said == []


def test_a_handler_that_raises_is_a_failed_attempt_with_its_error_and_traceback() -> None:
    error = RuntimeError("the ledger is locked")

    def broken(ctx: JobContext) -> None:
        raise error

    ended = attempt_of(job_of("broken.job", broken))
    assert ended.record.outcome == "failed"
    assert ended.record.error == "RuntimeError: the ledger is locked"
    assert "in broken" in (ended.record.traceback or "")
    assert (ended.failure, ended.retried, ended.escaping) == (error, False, None)


def test_a_library_retry_is_a_failed_attempt_with_the_handlers_own_error() -> None:
    cause = ValueError("try again")

    def retried(ctx: JobContext) -> None:
        raise QueueRetry(RuntimeError("Retry in 5s"), cause)

    ended = attempt_of(job_of("retried.job"), call=retried)
    assert (ended.record.outcome, ended.record.error) == ("failed", "ValueError: try again")
    assert (ended.failure, ended.retried) == (cause, True)


def test_whatever_a_handler_raises_once_asked_to_stop_the_stop_is_why_it_ended() -> None:
    signal = AbortSignal()

    def stopped(ctx: JobContext) -> None:
        signal.abort("timeout")
        raise RuntimeError("interrupted mid-write")

    ended = attempt_of(job_of("stopped.job", stopped), signal=signal)
    assert (ended.record.outcome, ended.record.reason) == ("aborted", "timeout")
    assert ended.record.duration_ms is not None and ended.failure is None


@pytest.mark.parametrize("raised", [SystemExit(3), KeyboardInterrupt()])
def test_a_handlers_exit_is_a_failed_attempt_that_goes_on_as_raised(
    raised: BaseException,
) -> None:
    def leaving(ctx: JobContext) -> None:
        raise raised

    ended = attempt_of(job_of("leaving.job", leaving))
    assert ended.record.outcome == "failed" and ended.escaping is raised


def test_a_base_exception_beyond_an_exit_is_not_an_attempt_it_goes_on_as_raised() -> None:
    class Cancelled(BaseException):
        pass

    def cancelled(ctx: JobContext) -> None:
        raise Cancelled

    with pytest.raises(Cancelled):
        attempt_of(job_of("cancelled.job", cancelled))


def test_the_call_given_is_made_instead_of_the_jobs_handler() -> None:
    calls: list[str] = []
    job = job_of("called.job", lambda ctx: calls.append("handler"))
    ended = attempt_of(job, call=lambda ctx: calls.append("call"))
    assert ended.record.outcome == "completed" and calls == ["call"]


# The helpers around the handler: the lease's watchdog, the heartbeat, the timeout.


def test_the_heartbeat_extends_a_held_lock_while_the_handler_runs_and_stops_with_it() -> None:
    store = Journal()
    job = job_of("beating.job", lock_ttl="1500ms")
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    lock = lock_of(job, occurrence)
    assert store.acquire(*lock, job.lock_ttl)
    lease = Lease(job.lock_ttl, time.monotonic())
    signal = AbortSignal()
    with Guard(store, "r1")._helped(job, lock, lease, signal):
        wait_for(lambda: store.sent.count(f"extend {lock[0]}") >= 2, 30, "two extends", every=0.01)
        assert not signal.aborted  # renewed: the first lease ran out after 1.35 s
    assert guard_threads() == []
    assert store.holder(lock[0]) == lock[1]  # the helpers never free the lock themselves


def test_a_lease_that_ran_out_aborts_the_signal_at_the_first_look() -> None:
    job = job_of("frozen.job", lock_ttl="1s")
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    lease = Lease(job.lock_ttl, time.monotonic() - 5)  # sent before a freeze
    signal = AbortSignal()
    with Guard(MemoryStore(), "r1")._helped(job, lock_of(job, occurrence), lease, signal):
        assert signal.aborted and signal.reason == "lock-lost"
    assert guard_threads() == []


def test_the_timeout_aborts_the_signal_and_a_job_without_a_lock_sends_nothing() -> None:
    store = Journal()
    job = job_of("slow.job", timeout="200ms", overlap="allow")
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    signal = AbortSignal()
    with Guard(store, "r1")._helped(job, lock_of(job, occurrence), None, signal):
        assert signal.wait(10) and signal.reason == "timeout"
    assert store.sent == [] and guard_threads() == []


def test_the_helpers_are_stopped_and_joined_when_the_handler_raises() -> None:
    job = job_of("raising.job", lock_ttl="30s", timeout="30s")
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    lock = lock_of(job, occurrence)
    store = MemoryStore()
    assert store.acquire(*lock, job.lock_ttl)
    lease = Lease(job.lock_ttl, time.monotonic())
    signal = AbortSignal()
    with (
        pytest.raises(RuntimeError),
        Guard(store, "r1")._helped(job, lock, lease, signal),
    ):
        assert len(guard_threads()) == 3  # the watchdog, the heartbeat, the timeout
        raise RuntimeError("the handler failed")
    assert guard_threads() == [] and not signal.aborted


# Handing the lock back: a completed delivery's marked before it is freed.


def test_a_completed_queue_delivery_is_marked_before_its_lock_is_freed() -> None:
    store = Journal()
    job = job_of("paid.job")
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    lock = lock_of(job, occurrence)
    assert store.acquire(*lock, job.lock_ttl)
    store.sent.clear()
    completed = record_maker(job, occurrence, trigger="queue")(outcome="completed")
    Guard(store, "r1")._hand_back(occurrence, True, lock, job.lock_ttl, completed)
    assert store.sent == [f"acquire done:{job.name}:{occurrence.epoch_ms}", f"release {lock[0]}"]
    assert store.finished(occurrence) and store.holder(lock[0]) is None


def test_a_lock_whose_mark_failed_stays_held_until_the_mark_is_written() -> None:
    """Never released first: until the store takes the mark, a redelivery finds the lock
    held; once it does, the mark is there and then the lock is free."""
    store = FinishBlips(1)
    job = job_of("blip.job", lock_ttl="30s")
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    lock = lock_of(job, occurrence)
    assert store.acquire(*lock, job.lock_ttl)
    completed = record_maker(job, occurrence, trigger="queue")(outcome="completed")
    guard = Guard(store, "r1")
    guard._hand_back(occurrence, True, lock, job.lock_ttl, completed)
    assert store.failures == 0  # the mark was asked for, and refused

    def freed() -> bool:
        held = store.holder(lock[0]) is not None  # read first: the mark is written first
        assert held or store.finished(occurrence), "the lock was freed before the mark"
        return not held

    wait_for(freed, 30, "the lock freed in the background", every=0.01)


@pytest.mark.parametrize(
    ("trigger", "outcome"),
    [("schedule", "completed"), ("manual", "completed"), ("queue", "failed"), ("queue", "aborted")],
)
def test_any_other_run_frees_its_lock_without_a_mark(trigger: Trigger, outcome: str) -> None:
    store = Journal()
    job = job_of("plain.job")
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    lock = lock_of(job, occurrence)
    assert store.acquire(*lock, job.lock_ttl)
    store.sent.clear()
    ended = record_maker(job, occurrence, trigger=trigger)(outcome=outcome)
    Guard(store, "r1")._hand_back(occurrence, trigger == "queue", lock, job.lock_ttl, ended)
    assert store.sent == [f"release {lock[0]}"]
    assert not store.finished(occurrence) and store.holder(lock[0]) is None


# Reporting the attempt: its record, its log line, then its monitor.


@pytest.mark.parametrize(
    ("trigger", "target", "attempt", "retried", "said"),
    [
        ("queue", "queue", 1, False, "attempt 1 (attempts remain)"),
        ("queue", "queue", 3, False, "attempt 3, the last"),
        ("queue", "queue", 3, True, "attempt 3 (attempts remain)"),
        ("manual", "queue", 1, False, "called directly: the task's own retries decide"),
        ("manual", "inline", 3, False, "attempt 3, the last"),
    ],
)
def test_a_failed_attempt_is_reported_as_the_last_only_when_it_is(
    caplog: pytest.LogCaptureFixture,
    trigger: Trigger,
    target: str,
    attempt: int,
    retried: bool,
    said: str,
) -> None:
    if target == "queue":
        job = declare("failing.job", every="1s", adapter="test", task="t", attempts=3)
    else:
        job = job_of("failing.job", attempts=3)
    store = MemoryStore()
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    failed = record_maker(job, occurrence, trigger=trigger, attempt=attempt)(
        outcome="failed", error="RuntimeError: locked"
    )
    with caplog.at_level(logging.INFO, logger="cron_bridge.run.guard"):
        Guard(store, "r1")._report(job, _Attempt(failed, time.monotonic(), retried=retried))
    [line] = [r for r in caplog.records if r.name == "cron_bridge.run.guard"]
    assert said in line.getMessage()
    assert line.levelno == (logging.ERROR if "attempts remain" not in said else logging.WARNING)
    assert store.history(job.name) == [failed]


def test_the_monitor_is_told_after_the_record_is_written() -> None:
    store = MemoryStore()
    told = Told(store)
    job = job_of("watched.job", monitor=told)
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    guard = Guard(store, "r1", clock=FakeClock(AT))
    record = guard.run(job, occurrence, trigger="schedule")
    assert record.started_at == AT
    assert told.said == [("started", 1), ("finished", (True, 1))]


# The whole run, where the steps meet.


def test_a_base_exception_beyond_an_exit_frees_the_lock_and_leaves_no_record() -> None:
    class Cancelled(BaseException):
        pass

    def cancelled(ctx: JobContext) -> None:
        raise Cancelled

    store = MemoryStore()
    job = job_of("cancelled.job", cancelled, lock_ttl="30s")
    guard = Guard(store, "r1")
    with pytest.raises(Cancelled):
        guard.run(job, Occurrence(job=job.name, scheduled_at=AT), trigger="queue")
    assert store.holder(lock_key(job.name)) is None and guard._held == {}
    assert store.history(job.name) == []
    assert guard_threads() == []


def test_each_run_holding_the_lock_gets_a_greater_fencing_token_and_others_none() -> None:
    """``ctx.fencing_token``: from the store's taking of the overlap lock, greater for each
    run after; None for a job that takes no lock (``overlap="allow"``)."""
    seen: list[int | None] = []
    store = MemoryStore()
    guarded = job_of("fenced.job", lambda ctx: seen.append(ctx.fencing_token))
    free = job_of("free.job", lambda ctx: seen.append(ctx.fencing_token), overlap="allow")
    for minute in range(3):
        at = AT + timedelta(minutes=minute)
        Guard(store, "r1").run(
            guarded, Occurrence(job=guarded.name, scheduled_at=at), trigger="schedule"
        )
    Guard(store, "r1").run(free, Occurrence(job=free.name, scheduled_at=AT), trigger="schedule")
    tokens = seen[:3]
    assert all(isinstance(t, int) for t in tokens) and tokens == sorted(set(tokens)), seen
    assert seen[3] is None
