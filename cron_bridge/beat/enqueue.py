"""Enqueues: claimed occurrences sent to their queues, grouped per adapter, one producer span
each whose context travels in the message; a failed send is tried again within the job's
``misfire_grace`` (and marked ``again``, so an adapter can refuse a duplicate), unless nothing
would refuse a second copy (a drop-in sender's unguarded task, an ``overlap="allow"`` job):
it may have landed."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from cron_bridge import telemetry
from cron_bridge.beat.planning import Planned
from cron_bridge.beat.store_health import Records
from cron_bridge.clock import Clock
from cron_bridge.context import AbortSignal
from cron_bridge.errors import ConfigError
from cron_bridge.jobs import Job
from cron_bridge.plumbing.outbound import described
from cron_bridge.queues.adapter import Dispatch
from cron_bridge.queues.installed import get_adapter
from cron_bridge.stores.records import PLAIN_TASK, RunRecord

__all__ = ["Enqueuer"]

log = logging.getLogger(__name__)

ENQUEUE_RETRY_FIRST = 0.25  # seconds before the first retry of a failed enqueue; then doubled
NOT_SENT_AGAIN = (
    "not sent again: a failed send may still have reached the broker, and "
    "nothing on the worker would refuse a second copy"
)


class Enqueuer:
    """Sends the claimed occurrences of one replica to their queues."""

    def __init__(
        self,
        replica: str,
        *,
        clock: Clock,
        records: Records,
        settle: Callable[[Sequence[Planned]], None] | None = None,
        taken: Callable[[Planned], bool] | None = None,
        left: Callable[[Sequence[Planned]], None] | None = None,
        resend_all: bool = False,
    ) -> None:
        self.replica = replica
        self.clock = clock
        self._records = records
        # Opted in to at least once (take_over="all"): a failed send of a plain task is sent
        # again too, though it may have landed and nothing would refuse the copy.
        self._resend_all = resend_all
        self._settle = settle or (lambda items: None)
        self._taken = taken or (lambda item: False)
        self._left = left or (lambda items: None)

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
                item.job,
                item.occurrence,
                trigger=item.trigger,
                replica=self.replica,
                attempt=1,
                kind="producer",
            )
            if traced
            else telemetry.NO_SPAN
            for item in items
        }
        dropped: set[str] = set()
        try:
            self._enqueue(pending, spans, started, wait, records, signal, dropped)
        finally:
            # Sent, failed or given up: no other replica is to send them now. One that was
            # not settled (this process died first) is sent by the replica that takes it over,
            # as is one this replica stopped before it could send (shutdown): it is left to
            # its lease, so a replica still up sends it.
            stopped = {r.occurrence_id for r in records if r.reason == "shutdown"}
            left = stopped | dropped  # and those another replica took: its to settle
            self._settle([i for i in items if i.pending and i.occurrence.id not in left])
            by_id = {record.occurrence_id: record for record in records}
            for item in items:
                span = spans[id(item)]
                done = by_id.get(item.occurrence.id)
                if done is not None:
                    span.set_outcome(done.outcome, done.error)
                span.end()
        if record:
            self._records.write(records)
        return records

    def _enqueue(
        self,
        pending: list[Planned],
        spans: dict[int, telemetry.RunSpan],
        started: datetime,
        wait: float,
        records: list[RunRecord],
        signal: AbortSignal,
        dropped: set[str],
    ) -> None:
        again = False
        while pending := self._not_taken(pending, dropped):
            failed: list[tuple[Planned, Exception, bool]] = []
            by_adapter: dict[str, list[Planned]] = {}
            for item in pending:
                by_adapter.setdefault(item.job.adapter or "", []).append(item)
            for name, group in by_adapter.items():
                carriers = [spans[id(item)].carrier() for item in group]
                sent = self._send(name, group, carriers, again=again)
                sent_at = self.clock.now()
                plain = PLAIN_TASK if _plain(name) else None
                for item, error in zip(group, sent, strict=True):
                    # Sent again only where a copy that did land is refused: by the job, not
                    # only its adapter (an overlap="allow" job's worker takes no lock and reads
                    # no mark), unless the team opted in to at least once.
                    resendable = self._resend_all or takes_over(item.job) or _unknown(name)
                    if error is None:
                        taken = item.taken_from
                        reason = plain if taken is None else f"taken over from {taken}"
                        records.append(
                            self._records.of(item, "enqueued", at=sent_at, reason=reason)
                        )
                    else:
                        failed.append((item, error, resendable))
            pending = []
            again = True
            now = self.clock.now()
            for item, error, resendable in failed:
                deadline = max(item.occurrence.scheduled_at, started) + item.job.misfire_grace
                if not resendable:
                    # Its task meets no guard: a second copy would run twice. At most once.
                    log.warning("%s: %s, %s", item.occurrence.id, described(error), NOT_SENT_AGAIN)
                    records.append(
                        self._records.of(
                            item, "failed", error=described(error), reason=NOT_SENT_AGAIN
                        )
                    )
                elif signal.aborted:
                    # Stopping: not settled, so a replica still up sends it once its lease
                    # runs out (as one this replica stopped before it tried again).
                    records.append(
                        self._records.of(item, "aborted", reason="shutdown", error=described(error))
                    )
                elif now + timedelta(seconds=wait) < deadline:
                    pending.append(item)
                else:
                    records.append(self._records.of(item, "failed", error=described(error)))
            if pending:
                log.warning(
                    "enqueue of %d occurrence(s) failed, trying again in %.2fs: %s",
                    len(pending),
                    wait,
                    described(failed[0][1]),
                )
                if signal.wait(wait):
                    records += [self._records.of(i, "aborted", reason="shutdown") for i in pending]
                    pending = []
                wait *= 2

    def _not_taken(self, items: list[Planned], dropped: set[str]) -> list[Planned]:
        """``items`` but those another replica took over while they waited here (its to
        send, and record), whose ids go to ``dropped``."""
        taken = [item for item in items if self._taken(item)]
        if taken:
            log.warning(
                "%d occurrence(s) not sent here: another replica took them over, from %s",
                len(taken),
                taken[0].occurrence.id,
            )
            dropped.update(item.occurrence.id for item in taken)
            self._left(taken)  # no longer held here: a later takeover of them starts afresh
        return [item for item in items if item not in taken]

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
                # Taken over: the replica that died may have sent it before it could settle.
                again=again or i.taken_from is not None,
            )
            for i, trace in zip(items, traces, strict=True)
        ]
        try:
            return get_adapter(adapter_name).enqueue_many(dispatches)
        except Exception as exc:  # noqa: BLE001 - a broken adapter fails its occurrences, not the beat
            return [exc] * len(items)


def _plain(adapter_name: str) -> bool:
    """Whether the adapter sends plain tasks, which record nothing on the worker: a drop-in
    sender's, on which no job is declared (``Adapter.declares`` False)."""
    try:
        return not get_adapter(adapter_name).declares
    except ConfigError:
        return False


TAKE_OVER = ("refused", "all")
"""What a replica takes over (``Beat(take_over=...)``): the sends of jobs whose second copy
the worker refuses, or (opted in) every cluster job's, a plain task's too."""


def _unknown(adapter_name: str) -> bool:
    """Whether no adapter of this name is installed: nothing was sent, sending again is safe."""
    try:
        get_adapter(adapter_name)
    except ConfigError:
        return True
    return False


def takes_over(job: Job, *, unrefused: bool = False) -> bool:
    """Whether another replica may send (or run) an occurrence of ``job`` whose claimer died
    before it did: a cluster job run inline (its run's start is settled first, so only one
    replica starts it); a ``@cluster_task`` job with ``overlap="skip"`` (the worker's guard
    refuses a copy by its marks and the overlap lock; with ``overlap="allow"`` it takes
    neither); a drop-in sender's task only where the library refuses a copy itself (``rq
    cron``: RQ's job id). Any other plain task stays at most once, nothing would refuse its
    second copy (docs/guarantee.md), unless ``unrefused``: the team opted in to at least
    once for those (``take_over="all"``), a copy the dead claimer did send running twice."""
    if not job.is_cluster:
        return False
    if job.target == "inline":
        return True
    try:
        adapter = get_adapter(job.adapter or "")
    except ConfigError:  # no such adapter: its send fails, recorded, whoever makes it
        return False
    if unrefused:
        return True
    if not adapter.refuses_copies:
        return False
    return not adapter.declares or job.overlap == "skip"
