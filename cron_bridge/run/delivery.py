"""The worker side of a queue target, shared by every adapter.

An adapter's wrapper calls ``run_delivery`` with what its queue library says about the
message (the occurrence metadata the beat put in it, the attempt number the queue counts);
this runs the handler under the guard with ``ctx.trigger == "queue"`` and tells the adapter
whether to let the queue retry.

A worker process has one store and one ``Recorder`` (made again after a fork), shared by its
deliveries: a record the store did not take is kept there, not in the delivery's guard, and
written with the next delivery's, or at the process's exit. Exit is where the queue
libraries differ: a process that returns from its main runs ``atexit``, and a
``multiprocessing`` child (Dramatiq's worker processes) its finalizers, but an RQ work horse
ends with ``os._exit`` right after its job, and a Celery prefork child in billiard's
``os._exit`` after ``worker_process_shutdown``: the RQ adapter calls
``flush_worker_records`` after each job, and the Celery adapter on that signal.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing.util
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cron_bridge.clock import SystemClock
from cron_bridge.context import JobContext, Trigger
from cron_bridge.errors import InvalidMessage, QueueRetry, StoreUnavailable
from cron_bridge.jobs import Job, Occurrence
from cron_bridge.monitors import settle as settle_check_ins
from cron_bridge.plumbing import aio
from cron_bridge.plumbing.identity import make_replica_id
from cron_bridge.run.guard import Guard
from cron_bridge.run.lease import Releaser
from cron_bridge.run.recording import Recorder
from cron_bridge.stores import Store, store_from_url
from cron_bridge.stores.records import RunRecord
from cron_bridge.stores.urls import DEFAULT_STORE

__all__ = [
    "META_KEY",
    "Delivery",
    "configure",
    "flush_worker_records",
    "run_delivery",
    "worker_recorder",
    "worker_store",
]

log = logging.getLogger(__name__)

META_KEY = "cron_bridge"
"""Where the occurrence travels: a Celery header, RQ job meta key, Dramatiq message option."""


_lock = threading.Lock()
_state: dict[str, Any] = {}
_hooked: set[int] = set()  # the processes whose exit hooks are registered

EXIT_FLUSH = 5.0  # seconds an exiting worker process asks the store to take kept records


def configure(store: Store | str | None = None) -> None:
    """Set the store workers of this process use (default: ``$CRON_BRIDGE_STORE``)."""
    with _lock:
        _state.clear()
        if store is not None:
            _state["configured"] = store


def worker_store() -> Store:
    """This process's store, opened once per process (after a fork, opened again)."""
    with _lock:
        if _state.get("pid") != os.getpid():
            chosen = _state.get("configured") or os.environ.get("CRON_BRIDGE_STORE")
            if chosen is None:
                log.warning("no CRON_BRIDGE_STORE on this worker; using %s", DEFAULT_STORE)
                chosen = DEFAULT_STORE
            _state["store"] = store_from_url(chosen) if isinstance(chosen, str) else chosen
            _state["replica"] = make_replica_id()
            # A forked child starts with none kept: the parent's are the parent's to write.
            _state["recorder"] = Recorder(_state["store"])
            _state["releaser"] = Releaser(_state["store"].release, _state["store"].finish)
            if os.getpid() not in _hooked:
                _hooked.add(os.getpid())
                atexit.register(_flush_at_exit)
                # A multiprocessing child ends in os._exit after its finalizers, never atexit;
                # the registry is emptied in each child, so this is per process too.
                multiprocessing.util.Finalize(None, _flush_at_exit, exitpriority=10)
            _state["pid"] = os.getpid()
        store: Store = _state["store"]
        return store


def _releaser() -> Releaser:
    """This process's releaser: a release the store did not take outlives the delivery, and
    the next delivery sends it before it asks for the lock."""
    worker_store()
    releaser: Releaser = _state["releaser"]
    return releaser


def worker_recorder() -> Recorder:
    """This process's recorder: what the store did not take outlives the delivery."""
    worker_store()
    recorder: Recorder = _state["recorder"]
    return recorder


def flush_worker_records(within: float = EXIT_FLUSH) -> bool:
    """Write the run records this worker process kept while the store was down, asking
    again for up to ``within`` seconds (for a process about to end without exit hooks: an RQ
    work horse, a Celery prefork child). Returns whether none is left.

    A process that made no recorder (no delivery ran here) has nothing to write."""
    with _lock:
        recorder: Recorder | None = (
            _state.get("recorder") if _state.get("pid") == os.getpid() else None
        )
    return recorder is None or recorder.flush_within(within)


def _flush_at_exit() -> None:
    flush_worker_records(EXIT_FLUSH)


def worker_replica() -> str:
    worker_store()
    replica: str = _state["replica"]
    return replica


@dataclass(frozen=True, kw_only=True, slots=True)
class Delivery:
    """What the guard made of one delivery of a message.

    Attributes:
        record: the run record (also written to the store).
        retry_in: seconds the queue should wait before the next attempt, when a run the beat
            sent failed and attempts remain; None when the job's attempts do not retry it (a
            direct call is left to the task's own retry options, and a ``QueueRetry`` to the
            library that scheduled it).
        error: the handler's exception, when it raised one.
    """

    record: RunRecord
    retry_in: float | None
    error: BaseException | None
    value: Any = None

    @property
    def failed(self) -> bool:
        """The run failed or was aborted: the queue should see an error."""
        return self.record.outcome in ("failed", "aborted")

    def raise_if_failed(self) -> None:
        """Give a failed or aborted run to the queue as an error: the handler's own, or one
        that says what became of the occurrence."""
        if isinstance(self.error, QueueRetry):
            raise self.error.retry  # the library's own signal: its next try is scheduled
        if self.failed:
            raise self.error or RuntimeError(
                f"{self.record.occurrence_id} {self.record.outcome}: "
                f"{self.record.reason or self.record.error}"
            )


def run_delivery(
    job: Job,
    meta: Mapping[str, Any] | None,
    *,
    attempt: int,
    call: Callable[[JobContext], Any],
) -> Delivery:
    """Run one delivery of ``job`` under the guard.

    Args:
        job: the job the task belongs to.
        meta: the occurrence metadata the beat sent (``Dispatch.meta()``); None when the task
            was called directly (``.delay()``, ``.send()``, ``enqueue``), which runs a fresh
            occurrence with trigger ``manual``.
        attempt: the try number the queue counts, from 1.
        call: calls the original handler with the context (and the message's arguments).

    Raises:
        StoreUnavailable: the overlap lock could not be asked for; the handler did not run.
        InvalidMessage: the metadata is malformed, names another job, or the attempt is not
            a whole number from 1; the handler did not run and nothing was recorded.
    """
    clock = SystemClock()
    if isinstance(attempt, bool) or not isinstance(attempt, int) or not 1 <= attempt <= 10_000:
        raise InvalidMessage(f"{job.name}: attempt {attempt!r:.40} is not a try number from 1")
    trigger: Trigger
    copy = None
    if meta is not None:
        occurrence = _occurrence_of(job, meta)
        copy = _copy_of(job, meta)
        trigger = "queue"
    else:
        occurrence = Occurrence(job=job.name, scheduled_at=clock.now())
        trigger = "manual"
    recorder = worker_recorder()
    recorder.flush()  # what an earlier delivery of this process kept, if the store answers
    guard = Guard(
        worker_store(), worker_replica(), clock=clock, recorder=recorder, releaser=_releaser()
    )
    outcome: dict[str, Any] = {}

    def traced(ctx: JobContext) -> None:
        try:
            outcome["value"] = aio.resolve(call(ctx))  # an async def task is awaited
        except BaseException as exc:
            outcome["error"] = exc
            raise

    record = _run_through_blips(
        guard,
        job,
        occurrence,
        trigger=trigger,
        attempt=attempt,
        call=traced,
        parent=_trace_of(job, meta),
        copy=copy,
    )
    # The check-ins left on threads of their own; this process may end with the run (RQ's
    # work horse exits at once, skipping atexit): they are given their deadlines to leave.
    settle_check_ins()
    # The job's attempts and backoff are for the occurrences the beat sends; a direct call
    # keeps the task's own retry options, as if it were not decorated.
    retries = (
        trigger == "queue"
        and record.outcome in ("failed", "aborted")
        and not isinstance(outcome.get("error"), QueueRetry)  # the library retries it itself
    )
    return Delivery(
        record=record,
        retry_in=job.backoff.delay(attempt) if retries and attempt < job.attempts else None,
        error=outcome.get("error"),
        value=outcome.get("value"),
    )


STORE_RETRY_FIRST = 0.25  # seconds before asking the store again; doubled up to the next
STORE_RETRY_MAX = 1.0


def _run_through_blips(guard: Guard, job: Job, occurrence: Occurrence, **run: Any) -> RunRecord:
    """``guard.run``, asking again with backoff while the store cannot be reached, within the
    job's ``misfire_grace`` from now (as the beat does for the occurrences it claims); then
    the failure goes to the queue, which applies its own retries."""
    give_up_at = time.monotonic() + job.misfire_grace.total_seconds()
    wait = STORE_RETRY_FIRST
    while True:
        try:
            return guard.run(job, occurrence, **run)
        except StoreUnavailable as exc:
            left = give_up_at - time.monotonic()  # asked once more at the end of the grace
            if left <= 0:
                log.error(
                    "%s did not run: the store could not be asked for its overlap lock "
                    "within misfire_grace (%s)",
                    occurrence.id,
                    exc,
                )
                raise
            log.warning(
                "%s: the store is unavailable, asking again in %.2fs: %s",
                occurrence.id,
                min(wait, left),
                exc,
            )
            time.sleep(min(wait, left))
            wait = min(wait * 2, STORE_RETRY_MAX)


def _occurrence_of(job: Job, meta: object) -> Occurrence:
    """The occurrence a message's metadata names, checked to be one of ``job``'s."""
    if not isinstance(meta, Mapping):
        raise InvalidMessage(f"{job.name}: the cron-bridge metadata is not an object")
    try:
        occurrence = Occurrence.parse(meta.get("occurrence_id"))  # type: ignore[arg-type]
    except ValueError as exc:
        raise InvalidMessage(f"{job.name}: {exc}") from None
    named = meta.get("job", job.name)
    if occurrence.job != job.name or named != job.name:
        raise InvalidMessage(
            f"{job.name}: the message names occurrence {occurrence.id!r} of job "
            f"{str(named)[:200]!r}, not one of this task's job"
        )
    return occurrence


COPY_MAX = 64  # characters of a copy's name (the beat's are 16 hex digits)


def _copy_of(job: Job, meta: Mapping[str, Any]) -> str | None:
    """The name of the message's copy (``Dispatch.copy``); None from a beat that names none
    (an older version), whose copies are told apart as before: by the completion mark."""
    copy = meta.get("copy")
    if copy is None:
        return None
    if (
        not isinstance(copy, str)
        or not 1 <= len(copy) <= COPY_MAX
        or not copy.isascii()
        or not copy.replace("-", "").replace("_", "").isalnum()
    ):
        what = repr(copy[:40]) if isinstance(copy, str) else f"of type {type(copy).__name__}"
        raise InvalidMessage(f"{job.name}: the message's copy {what} is not a name")
    return copy


def _trace_of(job: Job, meta: Mapping[str, Any] | None) -> Mapping[str, str] | None:
    """The W3C trace context the message carries, or None: a malformed one is ignored (the
    run goes on without a parent span), never a reason to lose the run."""
    trace = meta.get("trace") if meta is not None else None
    if trace is None:
        return None
    if (
        isinstance(trace, Mapping)
        and len(trace) <= 16
        and all(isinstance(k, str) and len(k) <= 64 for k in trace)
        and all(isinstance(v, str) and len(v) <= 1024 for v in trace.values())
    ):
        return trace
    log.warning("%s: ignoring a malformed trace context in the message", job.name)
    return None
