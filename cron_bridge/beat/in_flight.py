"""Running claimed occurrences on their targets, in a bounded thread pool.

Inline targets go to ``InlineRunner`` (``beat.inline``), queue targets to ``Enqueuer``
(``beat.enqueue``). The dispatcher keeps the abort signal of everything in flight, so the
beat can drain it on shutdown.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta
from typing import Any, TypeVar

from cron_bridge.beat.enqueue import Enqueuer
from cron_bridge.beat.inline import InlineRunner
from cron_bridge.beat.pending import PendingSends
from cron_bridge.beat.planning import Planned
from cron_bridge.beat.store_health import Records, StoreHealth
from cron_bridge.clock import Clock
from cron_bridge.context import AbortSignal
from cron_bridge.monitors import settle as settle_check_ins
from cron_bridge.plumbing.outbound import logged_traceback
from cron_bridge.run.guard import Guard
from cron_bridge.stores.base import Store
from cron_bridge.stores.records import RunRecord

__all__ = ["InFlight"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class InFlight:
    """Hands claimed occurrences to their targets and keeps track of what is in flight.

    Args:
        store: the store the guard locks and records in.
        replica: who runs them.
        clock: the time source for records and deadlines.
        max_workers: threads for inline runs and enqueues.
        records: where the run records go.
        health: told when the store could not be reached.
    """

    def __init__(
        self,
        store: Store,
        replica: str,
        *,
        clock: Clock,
        max_workers: int,
        records: Records,
        health: StoreHealth,
        resend_all: bool = False,
    ) -> None:
        self.replica = replica
        self.clock = clock
        self._records = records
        self._health = health
        self._guard = Guard(store, replica, clock=clock)
        # When the store answers again: first the locks of runs that ended while it was down,
        # then the records the guard kept meanwhile.
        health.when_up(self._guard.flush_releases)
        health.when_up(self._guard.flush_records)
        # The pending sends this replica holds, from dispatch until settled: renewed while
        # they wait (cron_bridge.beat.pending); its own takeover leaves them to it.
        self.pending = PendingSends(store, replica, health=health)
        self._inline = InlineRunner(
            self._guard,
            records=records,
            health=health,
            settle=self.pending.settle_one,
            taken=self.pending.taken,
        )
        self._enqueuer = Enqueuer(
            replica,
            clock=clock,
            records=records,
            settle=self.pending.settle,
            taken=self.pending.taken,
            left=lambda items: self.pending.done([item.occurrence.id for item in items]),
            resend_all=resend_all,
        )
        self._pool = ThreadPoolExecutor(max_workers, thread_name_prefix="cron-bridge-run")
        self._lock = threading.Lock()
        self._inflight: dict[Future[Any], AbortSignal] = {}

    def dispatch(self, items: Sequence[Planned]) -> None:
        """Start every item on its target, in the background."""
        queued = []
        for item in items:
            if item.job.target == "inline":
                self._submit_held(self._run_inline, [item], item)
            else:
                queued.append(item)
        if queued:
            self._submit_held(self._enqueue_held, queued, queued)

    def _submit_held(
        self, work: Callable[[Any, AbortSignal], T], items: list[Planned], arg: object
    ) -> Future[T] | None:
        """``submit``, holding the pending sends of ``items`` from now (queued in the pool
        too) until ``work`` ends."""
        ids = self.pending.hold(items)
        future = self.submit(work, arg)
        if future is None:
            self.pending.done(ids)  # the pool shut down: not sent here, its lease runs out
        else:
            future.add_done_callback(lambda _: self.pending.done(ids))
        return future

    def drain(self, timeout: timedelta) -> None:
        """Wait for what is in flight, abort it with ``shutdown`` at ``timeout``, release locks,
        and wait for the monitors' check-ins still leaving within what is left of ``timeout``."""
        with self._lock:
            pending = dict(self._inflight)
        deadline = time.monotonic() + timeout.total_seconds()
        for future in pending:
            _wait(future, deadline - time.monotonic())
        late = [(f, s) for f, s in pending.items() if not f.done()]
        for _, signal in late:
            signal.abort("shutdown")
        if late:
            log.warning("aborting %d run(s) still going after %s", len(late), timeout)
            finish_by = time.monotonic() + 1.0
            for future, _ in late:
                _wait(future, finish_by - time.monotonic())
        self._guard.release_all()
        self.pending.stop()  # what was not sent is taken over once its lease runs out
        self._pool.shutdown(wait=False, cancel_futures=True)
        # The check-ins of the runs that ended leave on threads of their own, each within its
        # deadline: given what is left of the timeout here (and a moment at exit, atexit).
        settle_check_ins(deadline - time.monotonic())

    def submit(self, work: Callable[[Any, AbortSignal], T], item: object) -> Future[T] | None:
        """Run ``work(item, signal)`` in the bounded pool; None once the pool has shut down."""
        signal = AbortSignal()
        try:
            future = self._pool.submit(work, item, signal)
        except RuntimeError:  # the pool shut down while stopping
            return None
        with self._lock:
            self._inflight[future] = signal
        future.add_done_callback(self._forget)
        return future

    def run_now(self, item: Planned) -> RunRecord | None:
        """Run one claimed occurrence on its target as a timer run would: in the bounded pool,
        under the same overlap rule; wait for it (an inline run) or its enqueue.

        Returns None when it did not run: the store could not be asked for the overlap lock,
        or the beat is stopping.
        """
        if item.job.target == "inline":
            ran = self._submit_held(self._run_inline, [item], item)
            return None if ran is None else ran.result()
        sent = self._submit_held(self._enqueue_held, [item], [item])
        return None if sent is None else sent.result()[0]

    def _run_inline(self, item: Planned, signal: AbortSignal) -> RunRecord | None:
        return self._inline.run(item, signal)

    def _enqueue_held(self, items: list[Planned], signal: AbortSignal) -> list[RunRecord]:
        return self._enqueuer.enqueue(items, signal)

    def _forget(self, future: Future[Any]) -> None:
        with self._lock:
            self._inflight.pop(future, None)
        failure = None if future.cancelled() else future.exception()
        if failure is not None:  # its text, sanitised: never the raw exception (exc_info)
            log.error("a run failed outside its handler:\n%s", logged_traceback(failure))

    def enqueue(
        self, items: list[Planned], signal: AbortSignal, *, record: bool = True
    ) -> list[RunRecord]:
        """Send claimed occurrences to their queues now (``Enqueuer.enqueue``), holding their
        pending sends meanwhile."""
        ids = self.pending.hold(items)
        try:
            return self._enqueuer.enqueue(items, signal, record=record)
        finally:
            self.pending.done(ids)


def _wait(future: Future[Any], timeout: float) -> None:
    with contextlib.suppress(TimeoutError):
        future.exception(timeout=max(0.0, timeout))
