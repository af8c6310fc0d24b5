"""The overview's counts at any number of jobs: which jobs are failing, late, running and
paused, from batched reads (the run summaries ``latest-run`` and ``latest-end`` that every
store keeps beside the histories, 10,000 jobs a round trip; the pauses; every job's lock in
one batch), not from each job's history: that is read only for what the summaries cannot
say (``count``).

A ``Tally`` keeps one count per namespace. A request takes the count as it is, and when it is
older than ``every`` starts a new one on a thread of its own: pages reloading every few
seconds in many tabs share one count, and nobody looking costs nothing. Only the first count
of a namespace is waited for (up to ``first_wait``). Whether a job is late is computed from
its schedule once per schedule and newest occurrence, and kept while a count uses it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from cron_bridge.control import pause as control
from cron_bridge.errors import StoreUnavailable
from cron_bridge.http import charts
from cron_bridge.jobs import Occurrence
from cron_bridge.plumbing import inbound
from cron_bridge.plumbing.keys import lock_key
from cron_bridge.stores import run_summary
from cron_bridge.stores.base import Store
from cron_bridge.stores.records import RunRecord
from cron_bridge.windows import NEVER

if TYPE_CHECKING:
    from cron_bridge.jobs import Job

__all__ = ["READ_EACH", "VERIFIED_MOST", "Counted", "Tally", "count"]

log = logging.getLogger(__name__)

READ_EACH = 10_000  # summaries (and, when mended, newest records) read per round trip
VERIFIED_MOST = 200  # jobs late in the queue whose histories a count reads, at most
HISTORY_READ = 20  # records of each read: the newest occurrence's, and a few more
FIRST_WAIT = 0.3  # s a page waits for its namespace's first count: 10,000 jobs' count fits
_GRACE = timedelta(seconds=30)  # another namespace's jobs: the default misfire grace
_FAILED = ("failed", "aborted")
STATES = ("failing", "paused", "late", "running")


@dataclass(frozen=True, slots=True)
class Counted:
    """Which of a namespace's jobs were failing, late, running and paused, at ``at``."""

    at: datetime
    jobs: int
    failing: frozenset[str]
    late: frozenset[str]
    running: frozenset[str]
    paused: frozenset[str]

    def of(self, state: str) -> frozenset[str]:
        return {
            "failing": self.failing,
            "late": self.late,
            "running": self.running,
            "paused": self.paused,
        }[state]


class _Due:
    """When the occurrence after each job's newest one is due, computed once per schedule
    and newest occurrence: jobs that share a schedule (tenants on the same few crons) and
    ran at the same time share the walk (a cron schedule's costs about 0.3 ms), and a count
    walks again only what changed since the last one."""

    def __init__(self) -> None:
        self._kept: dict[tuple[object, int], datetime | None] = {}
        self._used: set[tuple[object, int]] = set()
        self.seeded: set[str] = set()  # jobs whose missing summaries were read from records

    def after(self, job: Job, newest_ms: int) -> datetime | None:
        key = (job.schedule, newest_ms)
        self._used.add(key)
        if key in self._kept:
            coming = self._kept[key]
        else:
            try:
                newest = datetime.fromtimestamp(newest_ms / 1000, UTC)
                coming = job.schedule.next_after(newest)
            except (OverflowError, ValueError):  # a schedule reaching the end of the calendar
                coming = None
            if coming is not None and coming >= NEVER:
                coming = None
            self._kept[key] = coming
        return None if coming is None else job.fire_at(coming)

    def forget_unused(self) -> None:
        """Keep only what the last count used."""
        self._kept = {key: self._kept[key] for key in self._used}
        self._used = set()


def count(
    store: Store,
    names: Sequence[str],
    jobs: Callable[[str], Job | None],
    now: datetime,
    due: _Due | None = None,
) -> Counted:
    """Count ``names`` (``jobs`` gives a name's job, or None for another namespace's). A job is
    failing when its newest occurrence that ended failed or was aborted; running while a run
    holds its lock; late, unless paused, when the occurrence after its newest is due past
    the job's grace (nobody claimed it, or its claim wrote nothing), or its newest waits in
    the queue past it; as the overview's rows say of the occurrences they draw.

    What the summaries cannot say is read from the histories, and the summaries mended
    (``_mended``): the jobs a count meets for the first time that have none (records written
    before this version kept them), and those the summaries call late (an older worker's
    records do not raise them). A job whose entries cannot be read is left out of the
    counts, not the count.

    Raises:
        StoreUnavailable: the store could not be reached.
    """
    due = due or _Due()
    latest, ended = _summaries(store, names)
    paused_now = control.paused(store)
    holders = store.holders([lock_key(name) for name in names])
    unseen = [name for name in names if name not in latest and name not in due.seeded]
    if unseen:
        _mended(store, unseen, latest, ended, now)
        due.seeded.update(unseen)
    held_by = dict(zip(names, holders, strict=True))
    states = {
        name: _state(name, held_by[name], latest, ended, paused_now, jobs, due, now)
        for name in names
    }
    queued_late = [n for n, state in states.items() if state and _QUEUED in state]
    if queued_late:  # a worker older than the summaries may have ended them
        queued_late = queued_late[:VERIFIED_MOST]
        _mended(store, queued_late, latest, ended, now, newest=HISTORY_READ)
        for name in queued_late:
            states[name] = _state(name, held_by[name], latest, ended, paused_now, jobs, due, now)
    due.forget_unused()
    found: dict[str, set[str]] = {state: set() for state in STATES}
    for name, state in states.items():
        if state is None:
            continue
        for flag in state:
            found["late" if flag == _QUEUED else flag].add(name)
    return Counted(
        at=now,
        jobs=len(names),
        failing=frozenset(found["failing"]),
        late=frozenset(found["late"]),
        running=frozenset(found["running"]),
        paused=frozenset(found["paused"]),
    )


def _summaries(store: Store, names: Sequence[str]) -> tuple[dict[str, str], dict[str, str]]:
    """The entries of ``names`` in both summaries, ``READ_EACH`` a round trip: only what is
    counted, never a whole group (entries of jobs long gone are not read), and no single
    read long enough to hold the store up."""
    latest: dict[str, str] = {}
    ended: dict[str, str] = {}
    for start in range(0, len(names), READ_EACH):
        part = list(names[start : start + READ_EACH])
        latest.update(store.controls_of(run_summary.LATEST, part))
        ended.update(store.controls_of(run_summary.ENDED, part))
    return latest, ended


def _mended(
    store: Store,
    names: Sequence[str],
    latest: dict[str, str],
    ended: dict[str, str],
    now: datetime,
    *,
    newest: int = 1,
) -> None:
    """Read the summaries of ``names`` from their histories (their newest record, or with
    ``newest`` their newest few, one round trip each), raise them in the store, and into
    ``latest`` and ``ended``."""
    if newest == 1:
        found: dict[str, list[RunRecord]] = {}
        for start in range(0, len(names), READ_EACH):
            part = names[start : start + READ_EACH]
            found.update({job: [r] for job, r in store.latest_runs(part).items()})
    else:
        found = {name: store.history(name, newest) for name in names}
    records = [record for kept in found.values() for record in kept]
    ceiling_ms = run_summary.ceiling(now)
    for group, entries in run_summary.summaries(records).items():
        held = latest if group == run_summary.LATEST else ended
        raised = run_summary.keep_greatest(entries, held, ceiling_ms)
        if raised:
            store.raise_controls(group, raised, ceiling_ms=ceiling_ms)
            held.update(raised)


_QUEUED = "queued-late"  # late only because its newest waits in the queue: verified


def _state(
    name: str,
    holder: str | None,
    latest: dict[str, str],
    ended: dict[str, str],
    paused_now: Mapping[str, object],
    jobs: Callable[[str], Job | None],
    due: _Due,
    now: datetime,
) -> tuple[str, ...] | None:
    """What the counts say of one job (its flags; ``_QUEUED`` when it is late only because
    its newest waits in the queue); None when its entries cannot be read (logged once): it
    is left out, the others are counted."""
    try:
        return _flags(name, holder, latest, ended, paused_now, jobs, due, now)
    except (ValueError, OverflowError, OSError) as exc:
        inbound.warn_once(
            log, "run-summary", name, latest.get(name, ""), "%s is not counted: %.200s", name, exc
        )
        return None


def _flags(
    name: str,
    holder: str | None,
    latest: dict[str, str],
    ended: dict[str, str],
    paused_now: Mapping[str, object],
    jobs: Callable[[str], Job | None],
    due: _Due,
    now: datetime,
) -> tuple[str, ...]:
    flags: list[str] = []
    end = run_summary.parse(ended.get(name, ""))
    held = charts.parse_holder(name, holder)
    running_ms = None if held is None else _scheduled_ms(held.occurrence_id)
    if running_ms is not None and not (
        end is not None and end.scheduled_ms == running_ms and end.outcome == "completed"
    ):  # a lock not yet freed after its run completed is not a run
        flags.append("running")
    else:
        running_ms = None
    if end is not None and end.outcome in _FAILED and end.scheduled_ms != running_ms:
        flags.append("failing")  # (a failed occurrence running again is drawn running)
    if name in paused_now:
        return (*flags, "paused")
    newest = run_summary.parse(latest.get(name, ""))
    newest_ms = newest.scheduled_ms if newest is not None else None
    if running_ms is not None and (newest_ms is None or running_ms >= newest_ms):
        newest, newest_ms = None, running_ms  # the newest occurrence is running
    if newest_ms is None:
        return tuple(flags)  # nothing drawn yet: not late
    job = jobs(name)
    grace = job.misfire_grace if job is not None else _GRACE
    if job is not None and job.is_cluster and not job.on_demand:
        coming = due.after(job, newest_ms)
        if coming is not None and now - coming > grace:
            return (*flags, "late")
    if newest is not None and newest.outcome == "enqueued" and now - newest.scheduled_at > grace:
        return (*flags, _QUEUED)
    return tuple(flags)


def _scheduled_ms(occurrence_id: str) -> int | None:
    try:
        return int(Occurrence.parse(occurrence_id).scheduled_at.timestamp() * 1000)
    except ValueError:
        return None


class Tally:
    """Counts per namespace, each made again at most every ``every`` seconds while pages
    ask for it, on a thread of its own."""

    def __init__(self, *, every: float = 5.0, first_wait: float = FIRST_WAIT) -> None:
        self.every = every
        self.first_wait = first_wait
        self._lock = threading.Lock()
        self._counted: dict[str | None, Counted] = {}
        self._counting: dict[str | None, threading.Event] = {}
        self._dues: dict[str | None, _Due] = {}
        self._failed: dict[str | None, str] = {}
        self._made: dict[str | None, float] = {}  # when each count began (monotonic)

    def counted(
        self,
        namespace: str | None,
        store: Store,
        names: Callable[[], Sequence[str]],
        jobs: Callable[[str], Job | None],
    ) -> Counted | None:
        """The newest count of ``namespace``, counted again in the background when it is
        older than ``every``; the first one waited for (None when it is not ready in
        ``first_wait``, or the store did not answer)."""
        with self._lock:
            found = self._counted.get(namespace)
            made = self._made.get(namespace, -math.inf)
            stale = found is None or time.monotonic() - made > self.every
            running = self._counting.get(namespace)
            if stale and running is None:
                running = threading.Event()
                self._counting[namespace] = running
                due = self._dues.setdefault(namespace, _Due())
                threading.Thread(
                    target=self._count,
                    args=(namespace, store, names, jobs, due, running),
                    name=f"cron-bridge-tally-{namespace or 'own'}",
                    daemon=True,
                ).start()
        if found is None and running is not None:
            running.wait(self.first_wait)
            with self._lock:
                found = self._counted.get(namespace)
        return found

    def failure(self, namespace: str | None) -> str | None:
        """Why the latest count of ``namespace`` could not be made, if it could not."""
        with self._lock:
            return self._failed.get(namespace)

    def _count(
        self,
        namespace: str | None,
        store: Store,
        names: Callable[[], Sequence[str]],
        jobs: Callable[[str], Job | None],
        due: _Due,
        done: threading.Event,
    ) -> None:
        began = time.monotonic()
        try:
            counted = count(store, names(), jobs, datetime.now(UTC), due)
        except StoreUnavailable as exc:
            with self._lock:
                said = self._failed.get(namespace)
                self._failed[namespace] = str(exc)
            if said is None:
                log.warning("the dashboard could not count the jobs: %s", exc)
        except Exception:  # a count never takes the server down; said once until one works
            with self._lock:
                said = self._failed.get(namespace)
                self._failed[namespace] = "the count failed (see the log)"
            if said != self._failed[namespace]:
                log.exception("the dashboard could not count the jobs")
        else:
            with self._lock:
                self._counted[namespace] = counted
                self._made[namespace] = began
                self._failed.pop(namespace, None)
        finally:
            with self._lock:
                self._counting.pop(namespace, None)
            done.set()
