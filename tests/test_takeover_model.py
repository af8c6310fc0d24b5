"""A model check of the claim path (hypothesis stateful testing): replicas claim occurrences
pending their send, send them, settle them, take over what others left, and crash between
any two of those steps; a worker delivers any copy in any order through the real guard (its
overlap lock, completion mark and began mark), and a run may fail and its copy come back (the
queue's redelivery or retry); the clock jumps. On the memory store, whatever the
interleaving, no handler runs for two copies of one occurrence's message (one copy's own
retries are the queue's), none completes twice, and once the replicas left alive have looked
again, every occurrence someone claimed has run (an inline run's settle and its start are one
step here: a replica that dies between the two in earnest loses that one, as
docs/guarantee.md says of a run that began)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cron_bridge import JobContext, declare
from cron_bridge.jobs import Job, Occurrence
from cron_bridge.plumbing.keys import parse_claim_key
from cron_bridge.run.guard import Guard
from cron_bridge.schedules import EPOCH
from cron_bridge.stores import MemoryStore
from cron_bridge.stores.base import PENDING_LEASE
from cron_bridge.testing import FakeClock

AT = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
REPLICAS = 3


def _job(name: str) -> Job:
    return declare(name, every="1m", target="inline", handler=lambda ctx: None, lock_ttl="30s")


QUEUED = _job("model.queued")  # run by the worker as a queue delivery (trigger "queue")
INLINE = _job("model.inline")  # run by its claimer right after it settles the claim
OCCURRENCES = [
    Occurrence(job=job.name, scheduled_at=AT + timedelta(minutes=n))
    for job in (QUEUED, INLINE)
    for n in range(3)
]
JOBS = {QUEUED.name: QUEUED, INLINE.name: INLINE}


class ClaimPath(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock(AT)
        self.store = MemoryStore(clock=self.clock)
        self.alive = [True] * REPLICAS
        self.generation = [1] * REPLICAS
        # Per replica: claimed (or taken over) and not yet sent; sent and not yet settled.
        self.to_send: list[list[Occurrence]] = [[] for _ in range(REPLICAS)]
        self.sent: list[list[Occurrence]] = [[] for _ in range(REPLICAS)]
        self.queue: list[tuple[Occurrence, str]] = []  # the broker: copies in any order
        self.sends = 0  # each send is a copy of its own name (Dispatch.copy)
        self.claimed: set[str] = set()
        self.began: dict[str, set[str]] = {}  # the copies whose handler ran, per occurrence
        self.completed: Counter[str] = Counter()

    def name(self, replica: int) -> str:
        return f"r{replica}-{self.generation[replica]}"

    def run(
        self,
        occurrence: Occurrence,
        trigger: Any,
        replica: str,
        copy: str | None = None,
        fails: bool = False,
    ) -> str:
        def handler(ctx: JobContext) -> None:
            self.began.setdefault(ctx.occurrence_id, set()).add(copy or replica)
            if fails:
                raise RuntimeError("the handler failed")

        record = Guard(self.store, replica, clock=self.clock).run(
            JOBS[occurrence.job], occurrence, trigger=trigger, call=handler, copy=copy
        )
        self.completed[occurrence.id] += record.outcome == "completed"
        return record.outcome

    @rule(replica=st.integers(0, REPLICAS - 1), which=st.sampled_from(OCCURRENCES))
    def claim(self, replica: int, which: Occurrence) -> None:
        if not self.alive[replica]:
            return
        if self.store.claim_many([which], self.name(replica), pending=[True]) == [True]:
            self.claimed.add(which.id)
            self.to_send[replica].append(which)

    @rule(replica=st.integers(0, REPLICAS - 1), first=st.booleans())
    def send(self, replica: int, first: bool) -> None:
        """Send one: a queued job's message goes to the broker (settled later, in a step of
        its own); an inline job's claim is settled and, if still this replica's, run."""
        if not self.alive[replica] or not self.to_send[replica]:
            return
        occurrence = self.to_send[replica].pop(0 if first else -1)
        if occurrence.job == QUEUED.name:
            self.sends += 1
            self.queue.append((occurrence, f"copy{self.sends}"))
            self.sent[replica].append(occurrence)
        elif self.store.settle_many([occurrence], self.name(replica)) == [True]:
            self.run(occurrence, "schedule", self.name(replica))

    @rule(replica=st.integers(0, REPLICAS - 1))
    def settle(self, replica: int) -> None:
        if self.alive[replica] and self.sent[replica]:
            self.store.settle_many([self.sent[replica].pop(0)], self.name(replica))

    @rule(replica=st.integers(0, REPLICAS - 1))
    def renew(self, replica: int) -> None:
        """A claimer still sending renews what it holds; it drops what was taken over."""
        if not self.alive[replica] or not self.to_send[replica]:
            return
        held = self.store.settle_many(self.to_send[replica], self.name(replica), keep=PENDING_LEASE)
        self.to_send[replica] = [
            o for o, mine in zip(self.to_send[replica], held, strict=True) if mine
        ]

    @rule(replica=st.integers(0, REPLICAS - 1))
    def take_over(self, replica: int) -> None:
        if not self.alive[replica]:
            return
        held = {o.id for o in self.to_send[replica] + self.sent[replica]}
        for key, _ in self.store.take_over(self.name(replica)):
            named = parse_claim_key(key)
            assert named is not None, key
            occurrence = Occurrence(
                job=named[0], scheduled_at=EPOCH + timedelta(milliseconds=named[1])
            )
            if occurrence.id not in held:  # its own, still held: slow, not dead (holds)
                self.to_send[replica].append(occurrence)

    @rule(replica=st.integers(0, REPLICAS - 1), restart=st.booleans())
    def crash(self, replica: int, restart: bool) -> None:
        """SIGKILL: what it held in memory is gone; it may come back under a new id."""
        self.to_send[replica] = []
        self.sent[replica] = []
        self.alive[replica] = restart
        self.generation[replica] += 1

    @rule(seconds=st.sampled_from([0.5, 2.0, PENDING_LEASE.total_seconds() + 0.1, 40.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @precondition(lambda self: self.queue)
    @rule(index=st.integers(0, 100), fails=st.booleans(), back=st.booleans())
    def deliver(self, index: int, fails: bool = False, back: bool = False) -> None:
        """The worker takes any copy from the broker and runs it through its guard; a run
        that fails may come back (the queue's retry, or its redelivery after a lost ack)."""
        occurrence, copy = self.queue.pop(index % len(self.queue))
        outcome = self.run(occurrence, "queue", "worker", copy=copy, fails=fails)
        if back and outcome == "failed":
            self.queue.append((occurrence, copy))

    @invariant()
    def no_handler_runs_for_two_copies(self) -> None:
        assert all(len(copies) == 1 for copies in self.began.values()), self.began
        assert all(count <= 1 for count in self.completed.values()), self.completed

    def teardown(self) -> None:
        """Those alive look again until nothing is left: every claimed occurrence ran."""
        if not any(self.alive):
            return
        for _ in range(5):
            self.clock.advance(PENDING_LEASE.total_seconds() + 1)
            for replica in range(REPLICAS):
                self.take_over(replica)
                while self.to_send[replica]:
                    self.send(replica, first=True)
                while self.sent[replica]:
                    self.settle(replica)
            while self.queue:
                self.deliver(0)
        self.no_handler_runs_for_two_copies()
        assert set(self.began) == self.claimed, (self.claimed - set(self.began), self.began)


ClaimPath.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
TestClaimPath = ClaimPath.TestCase
