"""The one place a handler runs: overlap lock, heartbeat, context, timeout and run record.

The beat uses it for inline targets, and the adapters use it on workers for queue targets,
so a run behaves the same wherever it happens.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from functools import partial
from typing import Any

from cron_bridge import telemetry
from cron_bridge.clock import Clock, SystemClock
from cron_bridge.context import AbortSignal, JobContext, Trigger
from cron_bridge.errors import FenceUnreadable, StoreUnavailable
from cron_bridge.jobs import CLAIM_TTL, Job, Occurrence
from cron_bridge.plumbing.keys import (
    NONCE,
    began_key,
    began_mark,
    lock_key,
    lock_owner,
    parse_lock_owner,
)
from cron_bridge.plumbing.outbound import logged_traceback, sanitize
from cron_bridge.run.attempt import _abort_after, _Attempt, _attempt, _context, _start
from cron_bridge.run.lease import Lease, Releaser
from cron_bridge.run.recording import Recorder
from cron_bridge.stores.base import Admission, Store
from cron_bridge.stores.records import Outcome, RunRecord

__all__ = ["Guard"]

log = logging.getLogger(__name__)


class Guard:
    """Runs one attempt of an occurrence under the job's rules and records what happened.

    Args:
        store: where the lock is held and the record goes.
        replica: who runs it, for the record and the context.
        clock: the time source for ``started_at``.
        recorder: where records go (a worker process shares one across its deliveries, so a
            record the store did not take outlives this guard); its own when omitted.
        releaser: what does again the releases and completion marks the store did not
            answer (shared the same way, so the next delivery flushes them before it asks
            for the lock); its own when omitted.
    """

    def __init__(
        self,
        store: Store,
        replica: str,
        *,
        clock: Clock | None = None,
        recorder: Recorder | None = None,
        releaser: Releaser | None = None,
    ) -> None:
        self.store = store
        self.replica = replica
        self.clock = clock or SystemClock()
        self._held: dict[str, str] = {}
        self._held_lock = threading.Lock()
        # The began mark each run's try wrote (by lock owner), taken back if its handler does
        # not start; and the runs whose lock stays theirs while they run (``resumable``).
        self._marks: dict[str, str] = {}
        self._resumable: set[str] = set()
        self._releaser = releaser or Releaser(self.store.release, self.store.finish)
        self._recorder = recorder or Recorder(store)

    def run(
        self,
        job: Job,
        occurrence: Occurrence,
        *,
        trigger: Trigger,
        attempt: int = 1,
        signal: AbortSignal | None = None,
        call: Callable[[JobContext], Any] | None = None,
        parent: Mapping[str, str] | None = None,
        copy: str | None = None,
        resumable: bool = False,
    ) -> RunRecord:
        """Run one attempt and record it; never raises for a handler's failure.

        Args:
            job: the job.
            occurrence: which occurrence this is.
            trigger: ``schedule``, ``misfire``, ``manual`` or ``queue``.
            attempt: the try number, from 1.
            signal: the abort signal to hand over (the beat keeps one per run to abort it on
                shutdown); a new one when omitted.
            call: how to call the handler with the context; ``job.handler(ctx, **kwargs)``
                when omitted.
            parent: the W3C trace context the message carried: the run's span is its child.
            copy: the name of the message's copy (``Dispatch.copy``): once a copy of the
                occurrence began its run, another copy is refused (``skipped-claimed``),
                while this copy's own redeliveries and retries run as before.
            resumable: another replica may run this occurrence's next attempt should this one
                die in it (an inline job with ``attempts > 1``): the completion mark is read
                before and under the lock and written when the run completes, as for a queue
                delivery, and a lock held by a run of this same occurrence (its replica died
                in it, or is slow) is waited for, up to ``lock_ttl`` or ``misfire_grace``.

        Returns:
            The record: ``completed``, ``failed``, ``aborted``, ``skipped-overlap``, or
            ``skipped-completed`` for a queue delivery of an occurrence that completed before
            (its completion mark), ``skipped-claimed`` for a copy of its message another copy
            of which began. A ``failed`` record keeps the exception in ``error``; the
            caller decides on retries.

        Raises:
            StoreUnavailable: the overlap lock could not be asked for; the handler did not run
                (at most once wins).
        """
        with telemetry.run_span(
            job, occurrence, trigger=trigger, replica=self.replica, attempt=attempt, parent=parent
        ) as span:
            record = self._run(
                job, occurrence, trigger, attempt, signal or AbortSignal(), call, copy, resumable
            )
            span.set_outcome(record.outcome, record.error)
        return record

    def _run(
        self,
        job: Job,
        occurrence: Occurrence,
        trigger: Trigger,
        attempt: int,
        signal: AbortSignal,
        call: Callable[[JobContext], Any] | None,
        copy: str | None = None,
        resumable: bool = False,
    ) -> RunRecord:
        started = self.clock.now()
        # The owner names the run, so a skipped-overlap record can say who holds the lock.
        lock = (lock_key(job.name), lock_owner(self.replica, occurrence.id, uuid.uuid4().hex[:8]))
        made = partial(
            RunRecord,
            job=job.name,
            occurrence_id=occurrence.id,
            trigger=trigger,
            replica=self.replica,
            started_at=started,
            attempt=attempt,
        )
        try:
            lease, refused = self._admit(
                job, occurrence, trigger, attempt, lock, signal, copy, resumable
            )
        except FenceUnreadable as exc:  # this job's counter only: the store is not down
            lease, refused = None, ("failed", str(exc))
        if refused is not None:
            # Stamped when it was refused, not when it asked: a skip says when the lock was
            # seen held, which a slow store's answer can put well after the attempt began.
            early = made(outcome=refused[0], reason=refused[1], started_at=self.clock.now())
            self._record(early)
            return early
        try:
            token = None if lease is None else lease.token
            ctx = _context(job, occurrence, trigger, attempt, self.replica, signal, token)
            with self._helped(job, lock, lease, signal):
                ended = _attempt(job, occurrence, ctx, call, made)
            with self._held_lock:
                marked = self._marks.pop(lock[1], None)
            if marked is not None and not ended.started:
                # Its lease ran out before the handler: marked by this try as the copy that
                # began, it did not begin. The mark goes before the lock, so that another copy
                # may run.
                self._unmark(occurrence, marked)
        except BaseException:
            # What the attempt does not record (a cancelled task's CancelledError, a
            # GeneratorExit) goes on as raised, but never keeps the lock past the run.
            if lease is not None:
                self._release(*lock, job.lock_ttl)
            raise
        if lease is not None:
            marks = trigger == "queue" or resumable
            self._hand_back(occurrence, marks, lock, job.lock_ttl, ended.record)
        self._report(job, ended)
        if ended.escaping is not None:
            raise ended.escaping
        return ended.record

    def _admit(
        self,
        job: Job,
        occurrence: Occurrence,
        trigger: Trigger,
        attempt: int,
        lock: tuple[str, str],
        signal: AbortSignal,
        copy: str | None = None,
        resumable: bool = False,
    ) -> tuple[Lease | None, tuple[Outcome, str | None] | None]:
        """Whether the run starts: the lease of the overlap lock ``(key, owner)`` when the job
        takes one (None when it does not), or the outcome and reason of a run that does not.

        Raises:
            StoreUnavailable: the lock could not be asked for.
        """
        # Instance-scope jobs overlap-check in their own process only (the beat does that).
        if job.overlap != "skip" or not job.is_cluster:
            return None, None
        # A queue delivery (a redelivery) or a resumable run's next attempt may come after its
        # occurrence completed: the completion mark refuses it. A queue delivery that names
        # its copy marks it as the copy that began, unless another did (its run, however it
        # ended, was the occurrence's). Both are read where the lock is taken: a completing
        # run frees its lock only after writing its mark, and a copy marks only while it
        # holds the lock.
        unless = occurrence if trigger == "queue" or resumable else None
        began = None
        if trigger == "queue" and copy is not None:
            # Each try writes a mark of its own (<copy>|<nonce>) and takes back, when its
            # handler does not start, only a mark it made where there was none: a mark an
            # earlier try of the copy made is left as it is, since that try may have begun.
            began = (
                began_key(occurrence.job, occurrence.epoch_ms),
                began_mark(copy, uuid.uuid4().hex[:NONCE]),
            )
        # What a finished run could not write while the store was down is written first: the
        # release of its lock (so this job's next run is not skipped behind it) and its
        # completion mark (so a copy of its message is refused).
        self._releaser.flush()
        key, owner = lock
        sent_at = time.monotonic()  # the lease counts from before the request
        admitted = self._ask(lock, job.lock_ttl, unless, began)
        if admitted.outcome == "held":
            holder = parse_lock_owner(admitted.holder)
            itself = holder is not None and holder[1] == occurrence.id
            if resumable and itself:
                # A run of this very occurrence on a replica that died in it (or is slow):
                # waited for until its lock is freed or expires, then the mark says whether
                # it completed (its attempt is owed otherwise).
                pass
            elif attempt == 1 or itself:
                # A first attempt behind another run is what overlap="skip" skips; a
                # redelivery while this very occurrence runs must not run it beside itself.
                return None, ("skipped-overlap", _held_by(holder))
            # A retry the queue brought back while a later occurrence holds the lock: it is
            # owed its attempt, so it waits for the lock within misfire_grace.
            patience = max(job.misfire_grace, job.lock_ttl) if itself else job.misfire_grace
            taken_at, admitted, holder = self._wait_for_lock(
                occurrence,
                attempt,
                lock,
                job.lock_ttl,
                holder,
                signal,
                patience,
                itself,
                unless,
                began,
            )
            if taken_at is None:
                yielded_to = "another run" if holder is None else f"{holder[1]} on {holder[0]}"
                reason = f"attempt {attempt} yielded to {yielded_to}"
                if not signal.aborted:
                    waited = "misfire_grace" if patience == job.misfire_grace else "lock_ttl"
                    reason += f", which held the lock past {waited} ({patience.total_seconds():g}s)"
                log.warning("%s: %s", occurrence.id, reason)
                return None, ("skipped-overlap", reason)
            sent_at = taken_at
        if admitted.outcome == "completed":
            # A redelivery (lost ack, visibility timeout, a requeue after a worker's heartbeat)
            # of an occurrence that completed: acknowledged, never run again.
            return None, ("skipped-completed", None)
        if admitted.outcome == "began":
            # Another copy of the message (the claimer's, beside a takeover's or a resend's)
            # began this occurrence: however that run ended, it was its run. Another
            # program's value there refuses too, as at most once wants.
            first = sanitize((admitted.holder or "").partition("|")[0])[:64] or "unknown"
            return None, ("skipped-claimed", f"another copy of its message began ({first})")
        with self._held_lock:
            self._held[owner] = key
            if resumable:
                self._resumable.add(owner)
            if admitted.marked and began is not None:
                self._marks[owner] = began[1]
        return Lease(job.lock_ttl, sent_at, token=admitted.token or None), None  # 0: no tokens

    def _ask(
        self,
        lock: tuple[str, str],
        ttl: timedelta,
        unless: Occurrence | None,
        began: tuple[str, str] | None,
    ) -> Admission:
        """``Store.admit``; when the store does not answer, it may still have taken the lock
        for ``lock``'s owner, whose run will never start, and written the began mark: both
        are taken back as a finished run's lock is released (``Releaser``), first thing
        before the next attempt asks, so the attempt does not skip behind a lock of its own
        that nobody holds, and a copy that never began refuses no other (this copy's next
        try marks it again)."""
        # This process's takebacks of earlier tries' marks are held back while this try asks:
        # one that finds its copy's mark runs under it. They are given back unless it takes
        # the lock, so that a mark whose handler never began is still taken back.
        held = [] if began is None else self._releaser.cancel(began[0], _copy_of(began[1]))
        try:
            admitted = self.store.admit(*lock, ttl, unless_completed=unless, began=began)
        except StoreUnavailable:
            self._releaser.restore(held)
            self._releaser.later(*lock, ttl.total_seconds())
            if began is not None:
                self._releaser.later(*began, CLAIM_TTL.total_seconds())
            raise
        except BaseException:
            self._releaser.restore(held)
            raise
        if admitted.outcome != "taken":
            self._releaser.restore(held)
        return admitted

    @contextmanager
    def _helped(
        self, job: Job, lock: tuple[str, str], lease: Lease | None, signal: AbortSignal
    ) -> Iterator[None]:
        """While the handler runs: the lease's watchdog and the heartbeat of a held lock, and
        the job's timeout; all of them stopped and joined when it ends, however it ends."""
        stop = threading.Event()
        helpers = []
        if lease is not None:
            # Every look at ctx.signal compares the lease too: a handler that wakes from a
            # freeze sees it is gone at once, not when the watchdog thread next runs.
            signal.expires(lambda: "lock-lost" if lease.left() <= 0 else None)
            helpers.append(_start(lease.watch, signal))
            helpers.append(_start(self._heartbeat, job, *lock, lease, stop))
        if job.timeout is not None:
            helpers.append(_start(_abort_after, job.timeout, signal, stop))
        try:
            yield
        finally:
            stop.set()
            if lease is not None:
                lease.end()
            for helper in helpers:
                helper.join()

    def _hand_back(
        self,
        occurrence: Occurrence,
        marks: bool,
        lock: tuple[str, str],
        ttl: timedelta,
        record: RunRecord,
    ) -> None:
        """Free the overlap lock of a run that ended; with ``marks``, a completed one's only
        once its completion mark is written, so that a run of the occurrence that takes the
        lock next sees it.

        Only a queue delivery (a redelivery) or a resumable inline run (another replica's
        next attempt) can come again, and only such runs of a job that takes the lock read
        the mark (where they ask for the lock, ``Store.admit``): only they write it; any
        other run just frees its lock.
        """
        if marks and record.outcome == "completed":
            self._finish(occurrence, lock)
        else:
            self._release(*lock, ttl)

    def _report(self, job: Job, ended: _Attempt) -> None:
        """Log and write the record of an attempt that ran, then tell the job's monitor."""
        record = ended.record
        # A task called directly on a worker retries as the library says: not known here.
        direct = record.trigger == "manual" and job.target == "queue"
        last = False if ended.retried else None if direct else record.attempt >= job.attempts
        self._record(record, ended.failure, last=last)
        if ended.watch is not None:  # after the record: a slow monitor never holds it up
            ended.watch.finished(
                ok=record.outcome == "completed", duration=time.monotonic() - ended.began
            )

    def _heartbeat(
        self, job: Job, key: str, owner: str, lease: Lease, stop: threading.Event
    ) -> None:
        """Extend the lock every third of its lifetime; the lease's watchdog aborts the run
        once an extend fails or none succeeds in time."""
        every = job.lock_ttl.total_seconds() / 3
        while not stop.wait(every):
            sent_at = time.monotonic()
            try:
                extended = self.store.extend(key, owner, job.lock_ttl)
            except StoreUnavailable as exc:
                # Keep trying while the lease lasts; the watchdog ends the run when it does not.
                log.warning("could not extend the lock of %s, trying again: %s", job.name, exc)
                continue
            if not extended:
                log.warning("the lock of %s was lost; aborting the run", job.name)
                lease.lost()
                return
            lease.renewed(sent_at)

    def _wait_for_lock(
        self,
        occurrence: Occurrence,
        attempt: int,
        lock: tuple[str, str],
        ttl: timedelta,
        holder: tuple[str, str] | None,
        signal: AbortSignal,
        patience: timedelta,
        behind_itself: bool,
        unless: Occurrence | None,
        began: tuple[str, str] | None,
    ) -> tuple[float | None, Admission, tuple[str, str] | None]:
        """Ask for the lock again (``_ask``), with backoff, until it is taken or refused or
        ``patience`` has passed (or the run is aborted, as when its beat shuts down);
        ``behind_itself``, for as long as a run of this same occurrence holds it. Returns
        when the request that took it was sent (None when none did), the last answer and
        the last holder seen."""
        give_up_at = time.monotonic() + patience.total_seconds()
        log.info(
            "%s: attempt %d waits up to %s for the lock (%s)",
            occurrence.id,
            attempt,
            patience,
            _held_by(holder) or "held",
        )
        wait = LOCK_POLL_FIRST
        admitted = Admission("held")
        while not signal.wait(min(wait, max(0.0, give_up_at - time.monotonic()))):
            sent_at = time.monotonic()
            admitted = self._ask(lock, ttl, unless, began)
            if admitted.outcome != "held":
                return sent_at, admitted, holder
            holder = parse_lock_owner(admitted.holder) or holder
            if time.monotonic() >= give_up_at:
                if not behind_itself or holder is None or holder[1] != occurrence.id:
                    break
                # A resumable run behind a run of its own occurrence that is still going (its
                # heartbeat keeps the lock; a dead one's expires within lock_ttl): its end
                # decides, completed (the mark) or not (this attempt is owed).
                give_up_at = time.monotonic() + patience.total_seconds()
            wait = min(wait * 2, LOCK_POLL_MAX)
        return None, admitted, holder

    def _finish(self, occurrence: Occurrence, lock: tuple[str, str]) -> None:
        with self._held_lock:
            self._held.pop(lock[1], None)
            self._resumable.discard(lock[1])
            self._marks.pop(lock[1], None)
        try:
            self.store.finish(occurrence, lock)
        except StoreUnavailable as exc:
            # Marked, then released, in the background: never released first, or a redelivery
            # could take the lock, find no mark and run the occurrence again.
            log.warning(
                "could not mark %s completed; trying again until the store answers: %s",
                occurrence.id,
                exc,
            )
            self._releaser.finish_later(occurrence, lock)

    def _unmark(self, occurrence: Occurrence, marked: str) -> None:
        """Take back the began mark ``marked`` a try wrote, whose handler did not start."""
        key = began_key(occurrence.job, occurrence.epoch_ms)
        try:
            self.store.release(key, marked)
        except StoreUnavailable as exc:
            log.warning("could not unmark %s as begun; trying again: %s", occurrence.id, exc)
            self._releaser.later(key, marked, CLAIM_TTL.total_seconds())

    def release_all(self) -> None:
        """Release the locks of runs still going (their handlers ignored an abort), but a
        resumable run's: another replica that takes its claim over makes its next attempt
        once the lock is freed (the run ended, marked if it completed) or expired, never
        beside it."""
        with self._held_lock:
            held = [(o, k) for o, k in self._held.items() if o not in self._resumable]
        for owner, key in held:
            self._release(key, owner)

    def _release(self, key: str, owner: str, ttl: timedelta | None = None) -> None:
        with self._held_lock:
            self._held.pop(owner, None)
            self._resumable.discard(owner)
            self._marks.pop(owner, None)
        try:
            self.store.release(key, owner)
        except StoreUnavailable as exc:
            log.warning("could not release %s; trying again until the store answers: %s", key, exc)
            if ttl is not None:
                self._releaser.later(key, owner, ttl.total_seconds())

    def _record(
        self, record: RunRecord, failure: BaseException | None = None, *, last: bool | None = True
    ) -> None:
        """Log the run and write its record. A failed attempt is a WARNING with its error
        while attempts remain, and an ERROR with its traceback when it was the last (or when
        that is not known here: ``last`` None); an aborted run is a WARNING; the rest INFO.

        What the job said is logged as the record keeps it (redacted, bounded), sanitised,
        and the traceback as text in the message, never as ``exc_info``: a handler, or
        sentry-sdk's logging integration, would format the raw exception."""
        said = sanitize(record.reason or record.error or "")
        line = f"{record.outcome} {record.occurrence_id} on {record.replica}"
        if record.outcome == "failed" and last is False:
            log.warning("%s, attempt %d (attempts remain): %s", line, record.attempt, said)
        elif record.outcome == "failed":
            which = "the last" if last else "called directly: the task's own retries decide"
            trace = record.traceback or failure
            block = "" if trace is None else "\n" + logged_traceback(trace)
            log.error("%s, attempt %d, %s: %s%s", line, record.attempt, which, said, block)
        elif record.outcome == "aborted":
            log.warning("%s (%s)", line, said)
        else:
            log.info("%s%s", line, f" ({said})" if said else "")
        telemetry.observe(record)
        try:
            self._recorder.write([record])
        except StoreUnavailable as exc:
            log.warning(
                "could not record %s of %s yet (kept, written when the store answers): %s",
                record.outcome,
                record.occurrence_id,
                exc,
            )

    def flush_records(self) -> None:
        """Write the records kept while the store was down, if it answers now."""
        self._recorder.flush()

    def flush_releases(self) -> None:
        """Send the releases and completion marks the store did not answer, if it answers
        now (``Releaser.flush``)."""
        self._releaser.flush()


LOCK_POLL_FIRST = 0.25  # seconds before a held-back retry asks for the lock again; doubled
LOCK_POLL_MAX = 1.0


def _copy_of(mark: str) -> str:
    """``<copy>|``: what every began mark of one copy starts with."""
    return mark.partition("|")[0] + "|"


def _held_by(holder: tuple[str, str] | None) -> str | None:
    """``held by <occurrence> on <replica>``, or None when the holder is not known."""
    return None if holder is None else f"held by {holder[1]} on {holder[0]}"
