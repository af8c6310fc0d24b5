"""The overlap lock's lease on the runner's own clock, its release after a store blip, and
skipped-overlap records that name the run holding the lock."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from cron_bridge import Aborted, JobContext, declare
from cron_bridge.beat.inline import InlineRunner
from cron_bridge.beat.planning import Planned
from cron_bridge.beat.store_health import Records, StoreHealth
from cron_bridge.clock import SystemClock
from cron_bridge.context import AbortSignal, Trigger
from cron_bridge.errors import StoreUnavailable
from cron_bridge.jobs import Job, Occurrence
from cron_bridge.plumbing.keys import lock_key
from cron_bridge.run.guard import Guard
from cron_bridge.run.lease import Lease, Releaser
from cron_bridge.stores import MemoryStore
from tests.blips import FinishBlips, LockAnswerLost, ReleaseBlips
from tests.waiting import waited

AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def job_of(name: str, handler: object, lock_ttl: str = "300ms") -> Job:
    return declare(name, every="1s", target="inline", handler=handler, lock_ttl=lock_ttl)  # type: ignore[arg-type]


class FrozenAfterAcquire(MemoryStore):
    """The lock is granted, but the answer arrives only after the lock's lifetime: what a
    process frozen (SIGSTOP) right after its request sees when it wakes."""

    def acquire_fenced(self, key: str, owner: str, ttl: timedelta) -> int | None:
        granted = super().acquire_fenced(key, owner, ttl)
        time.sleep(ttl.total_seconds() * 1.2)
        return granted


class FrozenWhileAskingIfCompleted(MemoryStore):
    """The lock is granted in time, then the process freezes while it reads the completion
    mark (a queue delivery reads it under the lock) until the lock's lifetime is over."""

    def finished(self, occurrence: Occurrence) -> bool:
        time.sleep(0.36)  # past the 300 ms lock
        return super().finished(occurrence)


@pytest.mark.parametrize(
    ("frozen", "trigger"),
    [(FrozenAfterAcquire, "schedule"), (FrozenWhileAskingIfCompleted, "queue")],
    ids=["answer-to-the-acquire", "reading-the-completion-mark"],
)
def test_a_lease_that_ran_out_before_the_handler_starts_never_starts_it(
    frozen: type[MemoryStore], trigger: Trigger
) -> None:
    """The lease counts from before the request, and the last look at it is right before the
    handler, after every step that follows the acquire: a run frozen in any of them is
    recorded aborted (lock-lost), its handler is never called, and the lock it may still
    hold is released."""
    calls: list[str] = []
    store = frozen()
    job = job_of("frozen.job", lambda ctx: calls.append(ctx.occurrence_id))
    record = Guard(store, "r1").run(job, Occurrence(job=job.name, scheduled_at=AT), trigger=trigger)
    assert calls == []
    assert (record.outcome, record.reason) == ("aborted", "lock-lost")
    assert store.holder(lock_key(job.name)) is None


class HangingExtend(MemoryStore):
    """Extending the lock hangs, as a store that stopped answering without closing."""

    returned = False

    def extend(self, key: str, owner: str, ttl: timedelta) -> bool:
        time.sleep(3)
        self.returned = True
        return super().extend(key, owner, ttl)


def test_the_watchdog_aborts_the_run_when_the_lease_ends_even_if_the_heartbeat_hangs() -> None:
    """The heartbeat is stuck in a store call; the run is aborted with lock-lost when the
    lease runs out, not when (or if) the call returns."""

    store = HangingExtend()
    seen: list[bool] = []

    def handler(ctx: JobContext) -> None:
        ctx.signal.wait(10)
        seen.append(store.returned)  # was the stuck extend back when the abort came?
        ctx.signal.raise_if_aborted()

    job = job_of("hanging.job", handler, lock_ttl="600ms")
    record = Guard(store, "r1").run(
        job, Occurrence(job=job.name, scheduled_at=AT), trigger="schedule"
    )
    assert (record.outcome, record.reason) == ("aborted", "lock-lost")
    assert seen == [False]  # aborted while the heartbeat was still stuck in the store


def test_a_lock_whose_release_failed_is_released_once_the_store_answers() -> None:
    """After a failed release the lock is released again in the background: the next
    occurrence runs long before the lock's 30 s lifetime would have freed it."""
    store = ReleaseBlips(1)
    job = job_of("blip.job", lambda ctx: None, lock_ttl="30s")
    guard = Guard(store, "r1")
    first = guard.run(job, Occurrence(job=job.name, scheduled_at=AT), trigger="schedule")
    assert first.outcome == "completed"
    waited(lambda: store.holder("active:blip.job") is None, 30, every=0.05)
    assert store.holder("active:blip.job") is None
    later = Occurrence(job=job.name, scheduled_at=AT + timedelta(seconds=1))
    assert Guard(store, "r2").run(job, later, trigger="schedule").outcome == "completed"


def test_the_next_run_in_the_same_process_sends_the_failed_release_before_it_asks() -> None:
    """The store did not answer a run's release; the job's next occurrence comes at once, in
    the same process (a worker's next delivery, the beat's next inline run): the release goes
    first and it runs, where it was skipped behind the finished run's lock until the
    background retry came (issue 39: "behind a finished run's lock")."""
    store = ReleaseBlips(1)
    job = job_of("blip.job", lambda ctx: None, lock_ttl="30s")
    releaser = Releaser(store.release, store.finish, first_wait=60)  # no background retry
    first = Guard(store, "r1", releaser=releaser).run(
        job, Occurrence(job=job.name, scheduled_at=AT), trigger="queue"
    )
    assert first.outcome == "completed" and releaser.pending() == 1
    assert store.holder(lock_key(job.name)) is not None  # the finished run's, still held
    later = Occurrence(job=job.name, scheduled_at=AT + timedelta(seconds=1))
    record = Guard(store, "r1", releaser=releaser).run(job, later, trigger="queue")
    assert record.outcome == "completed", record
    assert releaser.pending() == 0


def test_a_lock_taken_whose_answer_was_lost_does_not_hold_back_the_retry() -> None:
    """The store took the lock, but its answer was lost: the inline runner asks again (a new
    owner) and, before, skipped behind that lock of its own, which nobody would run or
    release until its lifetime ran out. Now the retry releases it first and runs."""
    store = LockAnswerLost(1)
    ran: list[str] = []
    job = job_of("lost.job", lambda ctx: ran.append(ctx.occurrence_id), lock_ttl="30s")
    runner = InlineRunner(
        Guard(store, "r1"),
        records=Records(store, StoreHealth(), replica="r1", clock=SystemClock()),
        health=StoreHealth(),
    )
    planned = Planned(
        job=job, occurrence=Occurrence(job=job.name, scheduled_at=AT), trigger="schedule", run=True
    )
    record = runner.attempts(planned, AbortSignal())
    assert record is not None and record.outcome == "completed", record
    assert len(ran) == 1 and store.holder(lock_key(job.name)) is None


class Answers:
    """A store's release and finish that fail while ``down``, and what was sent."""

    def __init__(self) -> None:
        self.down = True
        self.sent: list[str] = []

    def release(self, key: str, owner: str) -> bool:
        self.sent.append(f"release {key} {'down' if self.down else 'ok'}")
        if self.down:
            raise StoreUnavailable("down", host="memory")
        return True

    def finish(self, occurrence: Occurrence, lock: tuple[str, str]) -> None:
        self.sent.append(f"finish {occurrence.id} {'down' if self.down else 'ok'}")
        if self.down:
            raise StoreUnavailable("down", host="memory")


def test_a_flush_sends_what_is_pending_once_and_keeps_what_the_store_refuses() -> None:
    """While the store is down a flush leaves each pending one pending; once it answers, a
    flush sends each once, and neither the flush nor the background retry sends it again."""
    store = Answers()
    releaser = Releaser(store.release, store.finish, first_wait=0.05, max_wait=0.1)
    occurrence = Occurrence(job="mark.job", scheduled_at=AT)
    releaser.later("active:a", "r1|a@x|0001", 30)
    releaser.finish_later(occurrence, ("active:mark.job", "r1|mark@x|0002"))
    releaser.flush()
    assert releaser.pending() == 2
    store.down = False
    releaser.flush()
    assert releaser.pending() == 0
    time.sleep(0.3)  # the background retries' time: they send nothing more
    sent_ok = [line for line in store.sent if line.endswith(" ok")]
    assert sorted(sent_ok) == sorted(["release active:a ok", f"finish {occurrence.id} ok"]), (
        store.sent
    )


def test_a_flush_while_the_store_is_down_asks_it_once_however_many_are_pending() -> None:
    """A run asking for its lock during an outage flushes first: one request that the store
    does not answer ends the flush, rather than one timeout per pending release."""
    store = Answers()
    releaser = Releaser(store.release, store.finish, first_wait=60)
    for n in range(50):
        releaser.later(f"active:job-{n}", f"r1|job-{n}@x|0001", 30)
    releaser.flush()
    assert len(store.sent) == 1 and releaser.pending() == 50
    store.down = False
    releaser.flush()
    assert releaser.pending() == 0 and len(store.sent) == 51


def test_an_error_other_than_the_stores_is_kept_and_never_reaches_the_next_run() -> None:
    """A release refused with an error that is no ``StoreUnavailable`` (a read-only standby
    after a failover, a driver's own error) stays pending and is tried again; the flush that
    the next run of another job makes never raises it."""
    errors = iter([RuntimeError("cannot execute DELETE in a read-only transaction")] * 3)
    store = MemoryStore()

    def release(key: str, owner: str) -> bool:
        error = next(errors, None)
        if error is not None:
            raise error
        return store.release(key, owner)

    releaser = Releaser(release, store.finish, first_wait=0.05, max_wait=0.1)
    assert store.acquire("active:a", "r1|a@x|0001", timedelta(seconds=30))
    releaser.later("active:a", "r1|a@x|0001", 30)
    job = job_of("other.job", lambda ctx: None, lock_ttl="30s")
    guard = Guard(store, "r1", releaser=releaser)
    record = guard.run(job, Occurrence(job=job.name, scheduled_at=AT), trigger="schedule")
    assert record.outcome == "completed"
    assert waited(lambda: releaser.pending() == 0, 10, every=0.02)
    assert store.holder("active:a") is None


def test_one_thread_retries_however_many_are_pending() -> None:
    """Marks that keep failing for many deliveries are retried by one thread, not one each."""
    store = Answers()
    before = set(threading.enumerate())  # other tests' releasers may still be retrying

    def ours() -> list[threading.Thread]:
        return [
            t for t in threading.enumerate() if t.name == "cron-bridge-release" and t not in before
        ]

    releaser = Releaser(store.release, store.finish, first_wait=0.05, max_wait=0.1)
    for n in range(200):
        occurrence = Occurrence(job="mark.job", scheduled_at=AT + timedelta(minutes=n))
        releaser.finish_later(occurrence, ("active:mark.job", f"r1|mark@{n}|0001"))
    time.sleep(0.3)
    assert len(ours()) == 1 and releaser.pending() == 200
    finishes = len(store.sent)
    assert finishes < 20, finishes  # one request a retry while the store is down, not 200
    store.down = False
    assert waited(lambda: releaser.pending() == 0, 10, every=0.02)
    assert waited(lambda: not ours(), 5)


def test_the_background_retry_sends_it_when_nobody_flushes() -> None:
    """With no run and no claim to flush it, a pending release still goes once the store
    answers, within the retry's longest wait."""
    store = Answers()
    releaser = Releaser(store.release, store.finish, first_wait=0.05, max_wait=0.1)
    releaser.later("active:a", "r1|a@x|0001", 30)
    store.down = False
    assert waited(lambda: releaser.pending() == 0, 10, every=0.02)
    assert store.sent.count("release active:a ok") == 1


def test_a_completed_run_whose_mark_failed_is_marked_before_its_lock_is_freed() -> None:
    """The store fails just as a queue delivery completes (a Postgres failover in a chaos run):
    the completion mark is tried again in the background, and the lock is released only after
    it. A redelivery that takes the lock once it is free (Celery gives back a message not
    acknowledged within its visibility timeout) finds the mark and does not run the occurrence
    again. Before, the lock alone was released again, and the redelivery ran it twice."""
    store = FinishBlips(1)
    calls: list[str] = []
    job = job_of("mark.job", lambda ctx: calls.append(ctx.replica), lock_ttl="30s")
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    first = Guard(store, "worker-a").run(job, occurrence, trigger="queue")
    assert first.outcome == "completed"
    waited(lambda: store.holder(lock_key(job.name)) is None, 30, every=0.05)
    assert store.holder(lock_key(job.name)) is None  # freed long before its 30 s
    assert store.finished(occurrence)
    again = Guard(store, "worker-b").run(job, occurrence, trigger="queue")
    assert again.outcome == "skipped-completed"
    assert calls == ["worker-a"]


class CountingAcquires(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.acquires = 0

    def acquire_fenced(self, key: str, owner: str, ttl: timedelta) -> int | None:
        self.acquires += 1
        return super().acquire_fenced(key, owner, ttl)


def test_a_redelivery_of_a_completed_occurrence_never_takes_the_lock() -> None:
    """A message given back after its run completed (a broker's crash lost the ack) is
    recorded skipped-completed without asking for the lock: holding it even a moment to read
    the mark made the next occurrence, due then, skip behind it."""
    store = CountingAcquires()
    calls: list[str] = []
    job = job_of("redelivered.job", lambda ctx: calls.append(ctx.occurrence_id), lock_ttl="30s")
    first = Occurrence(job=job.name, scheduled_at=AT)
    assert Guard(store, "worker-a").run(job, first, trigger="queue").outcome == "completed"
    asked = store.acquires
    again = Guard(store, "worker-b").run(job, first, trigger="queue")
    assert again.outcome == "skipped-completed"
    assert store.acquires == asked  # the lock was never asked for
    later = Occurrence(job=job.name, scheduled_at=AT + timedelta(seconds=5))
    assert Guard(store, "worker-a").run(job, later, trigger="queue").outcome == "completed"
    assert calls == [first.id, later.id]


def test_a_skipped_overlap_record_names_the_run_holding_the_lock() -> None:
    """Who holds the lock (occurrence and replica) is in the skipped run's record."""
    store = MemoryStore()
    started, release = threading.Event(), threading.Event()

    def slow(ctx: JobContext) -> None:
        started.set()
        release.wait(10)

    job = job_of("held.job", slow, lock_ttl="5s")
    first = Occurrence(job=job.name, scheduled_at=AT)
    runner = threading.Thread(
        target=Guard(store, "beat-a").run, args=(job, first), kwargs={"trigger": "schedule"}
    )
    runner.start()
    assert started.wait(10)
    second = Occurrence(job=job.name, scheduled_at=AT + timedelta(seconds=1))
    skipped = Guard(store, "worker-b").run(job, second, trigger="queue")
    release.set()
    runner.join(10)
    assert skipped.outcome == "skipped-overlap"
    assert skipped.reason == f"held by {first.id} on beat-a"


def test_the_lease_runs_from_before_the_request_less_a_margin() -> None:
    """A 30 s lock sent at t=100 is believed held until 129 s (a margin of 1 s), and each
    extend moves that on from when it was sent."""
    now = [100.0]
    lease = Lease(timedelta(seconds=30), sent_at=100.0, clock=lambda: now[0])
    assert lease.until == 129.0
    now[0] = 110.0
    lease.renewed(sent_at=110.0)
    assert lease.until == 139.0 and lease.left() == 29.0
    lease.lost()
    assert lease.left() < 0


def test_a_redelivery_of_a_completed_occurrence_is_acknowledged_never_run() -> None:
    """The ack was lost and the queue delivers the occurrence again once the lock is free:
    recorded skipped-completed, the handler is not called a second time."""
    store = MemoryStore()
    calls: list[str] = []
    job = job_of("paid.job", lambda ctx: calls.append(ctx.occurrence_id), lock_ttl="5s")
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    first = Guard(store, "worker-a").run(job, occurrence, trigger="queue")
    again = Guard(store, "worker-b").run(job, occurrence, trigger="queue")
    assert (first.outcome, again.outcome) == ("completed", "skipped-completed")
    assert calls == [occurrence.id]
    assert store.finished(occurrence)


def test_a_redelivery_of_a_run_that_died_midway_runs_again() -> None:
    """No completion mark (the first run failed, or its worker died): the delivery runs, at
    least once on the worker side as documented."""
    store = MemoryStore()
    calls: list[int] = []

    def flaky(ctx: JobContext) -> None:
        calls.append(ctx.attempt)
        if len(calls) == 1:
            raise RuntimeError("the ledger is locked")

    job = job_of("flaky.job", flaky, lock_ttl="5s")
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    first = Guard(store, "worker-a").run(job, occurrence, trigger="queue")
    second = Guard(store, "worker-b").run(job, occurrence, trigger="queue", attempt=2)
    assert (first.outcome, second.outcome) == ("failed", "completed")
    third = Guard(store, "worker-c").run(job, occurrence, trigger="queue")
    assert third.outcome == "skipped-completed" and calls == [1, 2]


def test_a_handler_sees_its_lease_is_gone_at_its_first_look_after_a_freeze() -> None:
    """The signal compares the lease at every look: after a freeze the handler's first
    ``wait``, ``aborted`` or ``raise_if_aborted`` says lock-lost, even before the watchdog
    thread has run (which a process that just woke cannot count on)."""
    expired = [False]
    signal = AbortSignal()
    signal.expires(lambda: "lock-lost" if expired[0] else None)
    assert not signal.aborted and not signal.wait(0)
    expired[0] = True  # the process wakes: the lease ran out while it was frozen
    assert signal.wait(0) and signal.reason == "lock-lost"
    with pytest.raises(Aborted, match="lock-lost"):
        signal.raise_if_aborted()


def _hold_lock(store: MemoryStore, job: Job, occurrence: Occurrence, replica: str) -> str:
    """Take the job's lock as a run of ``occurrence`` on ``replica`` would."""
    from cron_bridge.plumbing.keys import lock_owner

    owner = lock_owner(replica, occurrence.id, "abcd1234")
    assert store.acquire(lock_key(job.name), owner, job.lock_ttl)
    return owner


def test_a_retry_that_meets_a_later_occurrences_lock_waits_for_it_and_runs() -> None:
    """Attempt 2 of an occurrence arrives while the next occurrence holds the lock: it waits
    (within misfire_grace) and runs once the lock is freed, instead of being skipped."""
    store = MemoryStore()
    ran: list[int] = []
    job = replace(
        job_of("retry.job", lambda ctx: ran.append(ctx.attempt), lock_ttl="5s"),
        attempts=3,
        misfire_grace=timedelta(seconds=10),
    )
    retried = Occurrence(job=job.name, scheduled_at=AT)
    later = Occurrence(job=job.name, scheduled_at=AT + timedelta(seconds=1))
    owner = _hold_lock(store, job, later, "worker-a")
    threading.Timer(0.6, store.release, args=(lock_key(job.name), owner)).start()
    began = time.monotonic()
    record = Guard(store, "worker-b").run(job, retried, trigger="queue", attempt=2)
    assert record.outcome == "completed", record
    assert ran == [2]
    assert 0.5 <= time.monotonic() - began < 5


def test_a_retry_held_back_past_misfire_grace_names_the_run_it_yielded_to() -> None:
    store = MemoryStore()
    ran: list[int] = []
    job = replace(
        job_of("retry.job", lambda ctx: ran.append(ctx.attempt), lock_ttl="5s"),
        attempts=3,
        misfire_grace=timedelta(seconds=1),
    )
    retried = Occurrence(job=job.name, scheduled_at=AT)
    later = Occurrence(job=job.name, scheduled_at=AT + timedelta(seconds=1))
    _hold_lock(store, job, later, "worker-a")
    began = time.monotonic()
    record = Guard(store, "worker-b").run(job, retried, trigger="queue", attempt=2)
    assert 1.0 <= time.monotonic() - began < 5
    assert record.outcome == "skipped-overlap"
    assert record.reason == (
        f"attempt 2 yielded to {later.id} on worker-a, which held the lock past misfire_grace (1s)"
    )
    assert ran == []
    assert store.history(job.name, 5)[0].reason == record.reason


@pytest.mark.parametrize("case", ["first-attempt", "same-occurrence"])
def test_a_first_attempt_or_a_redelivery_beside_itself_is_skipped_at_once(case: str) -> None:
    """overlap="skip" skips a first attempt behind another run at once; a retry that meets its
    own occurrence's lock (a redelivery while it runs) must not wait to run beside itself."""
    store = MemoryStore()
    job = replace(
        job_of("retry.job", lambda ctx: None, lock_ttl="5s"),
        attempts=3,
        misfire_grace=timedelta(seconds=10),
    )
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    other = Occurrence(job=job.name, scheduled_at=AT + timedelta(seconds=1))
    holder = other if case == "first-attempt" else occurrence
    _hold_lock(store, job, holder, "worker-a")
    began = time.monotonic()
    attempt = 1 if case == "first-attempt" else 2
    record = Guard(store, "worker-b").run(job, occurrence, trigger="queue", attempt=attempt)
    assert time.monotonic() - began < 0.5
    assert (record.outcome, record.reason) == (
        "skipped-overlap",
        f"held by {holder.id} on worker-a",
    )


def test_a_held_back_retry_stops_waiting_when_its_run_is_aborted() -> None:
    """A beat shutting down aborts an inline retry that waits for the lock: it gives up at
    once, with the run it yielded to."""
    store = MemoryStore()
    job = replace(
        job_of("retry.job", lambda ctx: None, lock_ttl="5s"),
        attempts=3,
        misfire_grace=timedelta(seconds=30),
    )
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    later = Occurrence(job=job.name, scheduled_at=AT + timedelta(seconds=1))
    _hold_lock(store, job, later, "worker-a")
    signal = AbortSignal()
    threading.Timer(0.3, signal.abort, args=("shutdown",)).start()
    began = time.monotonic()
    record = Guard(store, "beat-b").run(
        job, occurrence, trigger="schedule", attempt=2, signal=signal
    )
    assert time.monotonic() - began < 5
    assert (record.outcome, record.reason) == (
        "skipped-overlap",
        f"attempt 2 yielded to {later.id} on worker-a",
    )


def test_a_failed_attempt_is_a_warning_and_the_last_an_error_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``--log-level warning`` shows every failure: attempts that will be tried again as a
    WARNING with the error, the last one as an ERROR with the traceback."""
    import logging

    def broken(ctx: JobContext) -> None:
        raise RuntimeError(f"ledger locked (attempt {ctx.attempt})")

    job = replace(job_of("failing.job", broken, lock_ttl="5s"), attempts=3)
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    guard = Guard(MemoryStore(), "worker-a")
    with caplog.at_level(logging.INFO, logger="cron_bridge.run.guard"):
        guard.run(job, occurrence, trigger="queue", attempt=1)
        guard.run(job, occurrence, trigger="queue", attempt=3)
    first, last = [r for r in caplog.records if "failed" in r.getMessage()]
    assert first.levelno == logging.WARNING and first.exc_info is None
    assert "attempt 1 (attempts remain): RuntimeError: ledger locked (attempt 1)" in (
        first.getMessage()
    )
    assert last.levelno == logging.ERROR and "attempt 3, the last" in last.getMessage()
    # The traceback is in the message, sanitised, never the raw exception as exc_info.
    assert last.exc_info is None and "| RuntimeError: ledger locked" in last.getMessage()
    assert "in broken" in last.getMessage()  # the traceback names the handler's frame


def test_a_failed_run_keeps_its_traceback_in_its_record_without_the_password() -> None:
    """The record of a failed run holds the traceback (the handler's frame and the error),
    with a password in the error's URL masked; a completed run has none."""

    def broken(ctx: JobContext) -> None:
        raise ConnectionError("redis://:hunter2@cache:6379/0 refused")

    store = MemoryStore()
    guard = Guard(store, "worker-a")
    job = job_of("failing.job", broken, lock_ttl="5s")
    record = guard.run(job, Occurrence(job=job.name, scheduled_at=AT), trigger="schedule")
    assert record.outcome == "failed" and record.traceback is not None
    assert record.traceback.startswith("Traceback (most recent call last):")
    assert ", in broken\n" in record.traceback
    assert record.traceback.endswith("ConnectionError: redis://:***@cache:6379/0 refused\n")
    assert "hunter2" not in record.traceback + str(record.error)
    assert store.history(job.name) == [record]
    done = guard.run(
        job_of("fine.job", lambda ctx: None, lock_ttl="5s"),
        Occurrence(job="fine.job", scheduled_at=AT),
        trigger="schedule",
    )
    assert done.outcome == "completed" and done.traceback is None
