"""The overview's counts at any number of jobs: which jobs are failing, late, running and
paused, from four reads whatever the number of jobs (the run summaries ``latest-run`` and
``latest-end`` that every store keeps beside the histories, the pauses, and every job's lock
in one batch), never from each job's history.

A ``Tally`` keeps one count per namespace. A request takes the count as it is, and when it is
older than ``every`` starts a new one on a thread of its own: pages reloading every few
seconds in many tabs share one count, and nobody looking costs nothing. Only the first count
of a namespace is waited for (up to ``first_wait``). Whether a job is late is computed from
its schedule once per job and newest occurrence, and kept until either changes.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from cron_bridge.control import pause as control
from cron_bridge.errors import StoreUnavailable
from cron_bridge.http import charts
from cron_bridge.jobs import Occurrence
from cron_bridge.plumbing.keys import lock_key
from cron_bridge.stores import run_summary
from cron_bridge.stores.base import Store
from cron_bridge.windows import NEVER

if TYPE_CHECKING:
    from cron_bridge.jobs import Job

__all__ = ["SUMMARY_MOST", "Counted", "Tally", "count"]

log = logging.getLogger(__name__)

SUMMARY_MOST = 1_000_000  # jobs a summary is read for: as many as stored schedules
_SUMMARY_BYTES = SUMMARY_MOST * (run_summary.VALUE_MAX + 200)
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

    def after(self, job: Job, newest_ms: int) -> datetime | None:
        key = (job.schedule, newest_ms)
        self._used.add(key)
        if key in self._kept:
            coming = self._kept[key]
        else:
            newest = datetime.fromtimestamp(newest_ms / 1000, UTC)
            try:
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

    Raises:
        StoreUnavailable: the store could not be reached.
    """
    due = due or _Due()
    latest = store.controls(run_summary.LATEST, most=SUMMARY_MOST, max_bytes=_SUMMARY_BYTES)
    ended = store.controls(run_summary.ENDED, most=SUMMARY_MOST, max_bytes=_SUMMARY_BYTES)
    paused_now = control.paused(store)
    holders = store.holders([lock_key(name) for name in names])
    failing, late, running, paused = set(), set(), set(), set()
    for name, holder in zip(names, holders, strict=True):
        end = run_summary.parse(ended.get(name, ""))
        held = charts.parse_holder(name, holder)
        running_ms = None if held is None else _scheduled_ms(held.occurrence_id)
        if running_ms is not None and not (
            end is not None and end.scheduled_ms == running_ms and end.outcome == "completed"
        ):  # a lock not yet freed after its run completed is not a run
            running.add(name)
        else:
            running_ms = None
        if end is not None and end.outcome in _FAILED and end.scheduled_ms != running_ms:
            failing.add(name)  # (a failed occurrence running again is drawn running)
        if name in paused_now:
            paused.add(name)
            continue
        newest = run_summary.parse(latest.get(name, ""))
        newest_ms = newest.scheduled_ms if newest is not None else None
        if running_ms is not None and (newest_ms is None or running_ms >= newest_ms):
            newest, newest_ms = None, running_ms  # the newest occurrence is running
        if newest_ms is None:
            continue  # nothing drawn yet: not late
        job = jobs(name)
        grace = job.misfire_grace if job is not None else _GRACE
        if job is not None and job.is_cluster and not job.on_demand:
            coming = due.after(job, newest_ms)
            if coming is not None and now - coming > grace:
                late.add(name)
                continue
        if (
            newest is not None
            and newest.outcome == "enqueued"
            and now - newest.scheduled_at > grace
        ):
            late.add(name)
    due.forget_unused()
    return Counted(
        at=now,
        jobs=len(names),
        failing=frozenset(failing),
        late=frozenset(late),
        running=frozenset(running),
        paused=frozenset(paused),
    )


def _scheduled_ms(occurrence_id: str) -> int | None:
    try:
        return int(Occurrence.parse(occurrence_id).scheduled_at.timestamp() * 1000)
    except ValueError:
        return None


class Tally:
    """Counts per namespace, each made again at most every ``every`` seconds while pages
    ask for it, on a thread of its own."""

    def __init__(self, *, every: float = 5.0, first_wait: float = 10.0) -> None:
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
                if self._failed.get(namespace) is None:
                    log.warning("the dashboard could not count the jobs: %s", exc)
                self._failed[namespace] = str(exc)
        except Exception:
            log.exception("the dashboard could not count the jobs")
            with self._lock:
                self._failed[namespace] = "the count failed (see the log)"
        else:
            with self._lock:
                self._counted[namespace] = counted
                self._made[namespace] = began
                self._failed.pop(namespace, None)
        finally:
            with self._lock:
                self._counting.pop(namespace, None)
            done.set()
