"""One attempt of a handler, as the guard makes it: the context it is given, the call (its
timeout, an async handler awaited, a library's retry told apart) and how it ended, for the
run record, the log line and the monitor's check-in. The guard (``run.guard``) decides
whether the attempt starts and holds the lock around it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from traceback import format_exception
from typing import Any

from cron_bridge.context import AbortSignal, JobContext, Trigger
from cron_bridge.errors import QueueRetry
from cron_bridge.jobs import Job, Occurrence
from cron_bridge.monitors import CheckIn, Monitor, default_monitor
from cron_bridge.plumbing import aio
from cron_bridge.plumbing.outbound import described, logged_traceback
from cron_bridge.stores.records import RunRecord

__all__ = ["_Attempt", "_abort_after", "_attempt", "_context", "_start"]  # for run.guard

log = logging.getLogger("cron_bridge.run.guard")  # the guard's lines, as users filter them


def _context(
    job: Job,
    occurrence: Occurrence,
    trigger: Trigger,
    attempt: int,
    replica: str,
    signal: AbortSignal,
    fencing_token: int | None = None,
) -> JobContext:
    return JobContext(
        name=job.name,
        occurrence_id=occurrence.id,
        scheduled_at=occurrence.scheduled_at,
        trigger=trigger,
        attempt=attempt,
        attempts=job.attempts,
        replica=replica,
        signal=signal,
        logger=logging.LoggerAdapter(
            logging.getLogger(f"cron_bridge.job.{job.name}"),
            {"job": job.name, "occurrence": occurrence.id, "replica": replica},
        ),
        fencing_token=fencing_token,
    )


@dataclass(frozen=True, slots=True)
class _Attempt:
    """How one call of the handler ended, for its record, its log line and its monitor."""

    record: RunRecord
    began: float  # time.monotonic() as the attempt began
    failure: BaseException | None = None  # the handler's error, when it failed
    retried: bool = False  # the queue library scheduled the next try itself (QueueRetry)
    watch: _Watch | None = None  # the monitor's check-in, once the handler started
    escaping: BaseException | None = None  # a sys.exit() or KeyboardInterrupt, raised again
    started: bool = True  # False: aborted at the last look, the handler never called


def _attempt(
    job: Job,
    occurrence: Occurrence,
    ctx: JobContext,
    call: Callable[[JobContext], Any] | None,
    made: Callable[..., RunRecord],
) -> _Attempt:
    """Call the handler with ``ctx`` (through ``call`` when given) and say how it ended: never
    raises for what the handler raised but a BaseException beyond SystemExit and
    KeyboardInterrupt. ``made`` makes the record from its outcome and what goes with it."""
    began = time.monotonic()
    signal = ctx.signal
    if signal.aborted:
        # The last look before the handler: the lease ran out since the request was sent
        # (frozen or starved while the lock was taken, the completion mark read, the helpers
        # started), so the lock may be someone else's. It does not start.
        return _Attempt(made(outcome="aborted", reason=signal.reason), began, started=False)
    return _call(job, occurrence, ctx, call, made, began)


def _call(
    job: Job,
    occurrence: Occurrence,
    ctx: JobContext,
    call: Callable[[JobContext], Any] | None,
    made: Callable[..., RunRecord],
    began: float,
) -> _Attempt:
    """The handler's call, under the job's monitor, and how it ended."""
    signal = ctx.signal
    watch: _Watch | None = None
    try:
        watch = _watch(job, occurrence, ctx.attempt, ctx.replica)
        if call is not None:
            aio.resolve(call(ctx))
        elif job.handler is not None:
            aio.resolve(job.handler(ctx, **job.kwargs))  # an async def one is awaited
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # noqa: BLE001 - its record
        # A handler's sys.exit() or KeyboardInterrupt is recorded, then goes on as raised.
        escaping = None if isinstance(exc, Exception) else exc
        if signal.aborted:
            # Whatever it raised once asked to stop, the stop is why it ended.
            aborted = made(outcome="aborted", reason=signal.reason, duration_ms=_ms(began))
            return _Attempt(aborted, began, watch=watch, escaping=escaping)
        # The queue library took the next try itself: the attempt failed with the handler's
        # error, and it is not the last.
        cause = exc.cause or exc if isinstance(exc, QueueRetry) else exc
        failed = made(
            outcome="failed",
            error=described(cause),
            duration_ms=_ms(began),
            traceback="".join(format_exception(cause)),
        )
        retried = isinstance(exc, QueueRetry)
        return _Attempt(failed, began, cause, retried, watch, escaping)
    return _Attempt(made(outcome="completed", duration_ms=_ms(began)), began, watch=watch)


def _abort_after(timeout: timedelta, signal: AbortSignal, stop: threading.Event) -> None:
    if not stop.wait(timeout.total_seconds()):
        signal.abort("timeout")


@dataclass(frozen=True, slots=True)
class _Watch:
    monitor: Monitor
    check_in: CheckIn

    def finished(self, *, ok: bool, duration: float) -> None:
        try:
            self.monitor.finished(self.check_in, ok=ok, duration=duration)
        except Exception as exc:  # noqa: BLE001 - a monitor never fails the run (logged below)
            log.warning("the monitor of %s failed:\n%s", self.check_in.job, logged_traceback(exc))


def _watch(job: Job, occurrence: Occurrence, attempt: int, replica: str) -> _Watch | None:
    """Tell the job's monitor (or the process's default) that the attempt starts."""
    monitor = job.monitor or default_monitor()
    if monitor is None:
        return None
    check_in = CheckIn(
        job=job.name,
        schedule=job.schedule,
        misfire_grace=job.misfire_grace,
        timeout=job.timeout,
        occurrence_id=occurrence.id,
        attempt=attempt,
        replica=replica,
    )
    try:
        monitor.started(check_in)
    except Exception as exc:  # noqa: BLE001 - a monitor never fails the run (logged below)
        log.warning("the monitor of %s failed:\n%s", job.name, logged_traceback(exc))
    return _Watch(monitor, check_in)


def _start(target: Callable[..., None], *args: Any) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True, name="cron-bridge-guard")
    thread.start()
    return thread


def _ms(began: float) -> float:
    return round((time.monotonic() - began) * 1000, 3)
