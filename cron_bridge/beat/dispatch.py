"""Running claimed occurrences on their targets.

Inline targets run under the guard in a bounded thread pool, with the job's attempts and
backoff; queue targets go to their adapter, grouped per adapter, with failed enqueues retried
within the job's ``misfire_grace``. The dispatcher keeps the abort signal of everything in
flight, so the beat can drain it on shutdown.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any, TypeVar

from cron_bridge import telemetry
from cron_bridge.beat.planning import Planned
from cron_bridge.clock import Clock
from cron_bridge.context import AbortSignal
from cron_bridge.errors import StoreUnavailable
from cron_bridge.plugins import Dispatch, get_adapter
from cron_bridge.run.guard import Guard
from cron_bridge.stores.base import Outcome, RunRecord, Store

__all__ = ["Dispatcher"]

log = logging.getLogger(__name__)
T = TypeVar("T")

ENQUEUE_RETRY_FIRST = 0.25  # seconds before the first retry of a failed enqueue; then doubled
STORE_RETRY_MAX = 1.0  # seconds between asks for an overlap lock while the store is down


class Dispatcher:
    """Hands claimed occurrences to their targets and keeps track of what is in flight.

    Args:
        store: the store the guard locks and records in.
        replica: who runs them.
        clock: the time source for records and deadlines.
        max_workers: threads for inline runs and enqueues.
        record: how outcomes are written (the beat batches them and watches the store).
        store_failed: told when the store could not be reached.
    """

    def __init__(
        self,
        store: Store,
        replica: str,
        *,
        clock: Clock,
        max_workers: int,
        record: Callable[[Sequence[RunRecord]], None],
        store_failed: Callable[[StoreUnavailable], None],
    ) -> None:
        self.replica = replica
        self.clock = clock
        self._record = record
        self._store_failed = store_failed
        self._guard = Guard(store, replica, clock=clock)
        self._pool = ThreadPoolExecutor(max_workers, thread_name_prefix="cron-bridge-run")
        self._lock = threading.Lock()
        self._inflight: dict[Future[Any], AbortSignal] = {}
        self._running_local: set[str] = set()

    def dispatch(self, items: Sequence[Planned]) -> None:
        """Start every item on its target, in the background."""
        queued = []
        for item in items:
            if item.job.target == "inline":
                self.submit(self.run_inline, item)
            else:
                queued.append(item)
        if queued:
            self.submit(self.enqueue, queued)

    def drain(self, timeout: timedelta) -> None:
        """Wait for what is in flight, abort it with ``shutdown`` at ``timeout``, release locks."""
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
        self._pool.shutdown(wait=False, cancel_futures=True)

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
            ran = self.submit(self.run_inline, item)
            return None if ran is None else ran.result()
        sent = self.submit(self.enqueue, [item])
        return None if sent is None else sent.result()[0]

    def _forget(self, future: Future[Any]) -> None:
        with self._lock:
            self._inflight.pop(future, None)
        if not future.cancelled() and future.exception() is not None:
            log.error("a run failed outside its handler", exc_info=future.exception())

    def run_inline(self, item: Planned, signal: AbortSignal) -> RunRecord | None:
        job = item.job
        if not job.is_cluster and job.overlap == "skip":
            with self._lock:
                busy = job.name in self._running_local
                self._running_local.add(job.name)
            if busy:
                skipped = self.record_of(item, "skipped-overlap")
                self._record([skipped])
                return skipped
        try:
            return self.attempts(item, signal)
        finally:
            if not job.is_cluster and job.overlap == "skip":
                with self._lock:
                    self._running_local.discard(job.name)

    def flush_records(self) -> None:
        """Write the run records kept while the store was down (the guard's)."""
        self._guard.flush_records()

    def attempts(self, item: Planned, signal: AbortSignal) -> RunRecord | None:
        """Run an inline occurrence with the job's attempts and backoff.

        The occurrence is claimed, so no other replica will run it: when the store cannot be
        asked for the overlap lock, asking again is tried within the job's ``misfire_grace``.
        Returns None when it never could (the occurrence did not run).
        """
        job = item.job
        give_up_at = time.monotonic() + job.misfire_grace.total_seconds()
        wait = ENQUEUE_RETRY_FIRST
        record = None
        attempt = 1
        while attempt <= job.attempts:
            try:
                record = self._guard.run(
                    job, item.occurrence, trigger=item.trigger, attempt=attempt, signal=signal
                )
            except StoreUnavailable as exc:
                self._store_failed(exc)
                # Up to the end of the grace, and once more at its end: a store back for a
                # few seconds between two outages is not missed.
                left = give_up_at - time.monotonic()
                if left > 0 and not signal.wait(min(wait, left)):
                    wait = min(wait * 2, STORE_RETRY_MAX)
                    continue
                log.error(
                    "%s did not run: the store could not be asked for its overlap lock "
                    "within misfire_grace (%s)",
                    item.occurrence.id,
                    exc,
                )
                self._record([self.record_of(item, "failed", error=_describe(exc))])
                return None
            if record.outcome != "failed" or attempt == job.attempts:
                return record
            if signal.wait(job.backoff.delay(attempt)):
                return record
            attempt += 1
        return record

    def enqueue(
        self, items: list[Planned], signal: AbortSignal, *, record: bool = True
    ) -> list[RunRecord]:
        """Send claimed occurrences to their queues; retry failures within misfire_grace.
        Their records are written, or only returned when not ``record``."""
        pending = list(items)
        wait = ENQUEUE_RETRY_FIRST
        records: list[RunRecord] = []
        # A late run (a catch-up, a manual trigger of an old occurrence) gets the grace from now.
        started = self.clock.now()
        # One span per occurrence around its enqueue; its context travels in the message.
        # Without a tracer provider there is nothing to record or carry: asked once.
        traced = telemetry.tracing()
        spans = {
            id(item): telemetry.start_span(
                item.job, item.occurrence, trigger=item.trigger, replica=self.replica,
                attempt=1, kind="producer",
            ) if traced else telemetry.NO_SPAN
            for item in items
        }  # fmt: skip
        try:
            self._enqueue(pending, spans, started, wait, records, signal)
        finally:
            by_id = {record.occurrence_id: record for record in records}
            for item in items:
                span = spans[id(item)]
                done = by_id.get(item.occurrence.id)
                if done is not None:
                    span.set_outcome(done.outcome, done.error)
                span.end()
        if record:
            self._record(records)
        return records

    def _enqueue(
        self,
        pending: list[Planned],
        spans: dict[int, telemetry.RunSpan],
        started: datetime,
        wait: float,
        records: list[RunRecord],
        signal: AbortSignal,
    ) -> None:
        again = False
        while pending:
            failed: list[tuple[Planned, Exception]] = []
            by_adapter: dict[str, list[Planned]] = {}
            for item in pending:
                by_adapter.setdefault(item.job.adapter or "", []).append(item)
            for name, group in by_adapter.items():
                carriers = [spans[id(item)].carrier() for item in group]
                sent = self._send(name, group, carriers, again=again)
                sent_at = self.clock.now()
                for item, error in zip(group, sent, strict=True):
                    if error is None:
                        records.append(self.record_of(item, "enqueued", at=sent_at))
                    else:
                        failed.append((item, error))
            pending = []
            again = True
            now = self.clock.now()
            for item, error in failed:
                deadline = max(item.occurrence.scheduled_at, started) + item.job.misfire_grace
                if now + timedelta(seconds=wait) < deadline and not signal.aborted:
                    pending.append(item)
                else:
                    records.append(self.record_of(item, "failed", error=_describe(error)))
            if pending:
                log.warning(
                    "enqueue of %d occurrence(s) failed, trying again in %.2fs: %s",
                    len(pending),
                    wait,
                    _describe(failed[0][1]),
                )
                if signal.wait(wait):
                    records += [self.record_of(i, "aborted", reason="shutdown") for i in pending]
                    pending = []
                wait *= 2

    def _send(
        self,
        adapter_name: str,
        items: list[Planned],
        traces: list[dict[str, str]],
        *,
        again: bool = False,
    ) -> list[Exception | None]:
        dispatches = [
            Dispatch(
                job=i.job,
                occurrence=i.occurrence,
                trigger=i.trigger,
                replica=self.replica,
                trace=trace or None,
                again=again,
            )
            for i, trace in zip(items, traces, strict=True)
        ]
        try:
            return get_adapter(adapter_name).enqueue_many(dispatches)
        except Exception as exc:  # noqa: BLE001 - a broken adapter fails its occurrences, not the beat
            return [exc] * len(items)

    def record_of(
        self, item: Planned, outcome: Outcome, *, at: datetime | None = None, **extra: Any
    ) -> RunRecord:
        """The record of ``item``, started ``at`` (now when not given)."""
        return RunRecord(
            job=item.job.name,
            occurrence_id=item.occurrence.id,
            outcome=outcome,
            trigger=item.trigger,
            replica=self.replica,
            started_at=at or self.clock.now(),
            **extra,
        )


def _wait(future: Future[Any], timeout: float) -> None:
    with contextlib.suppress(TimeoutError):
        future.exception(timeout=max(0.0, timeout))


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"
