"""A beat's jobs and their timers: one heap of next occurrences, not a thread per job.

Each job has at most one armed occurrence. Replacing or removing a job bumps its generation,
so an entry armed for the old one is skipped when it comes due (and compacted away once
stale entries outnumber the live ones).
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Iterable
from datetime import datetime, timedelta

from cron_bridge.errors import ConfigError
from cron_bridge.jobs import Job

__all__ = ["Timers"]

_ONE_MS = timedelta(milliseconds=1)


class Timers:
    """The jobs of one beat and the heap of their next occurrences. Thread-safe."""

    def __init__(self, jobs: Iterable[Job] = ()) -> None:
        self.lock = threading.RLock()
        self._jobs: dict[str, Job] = {}
        self._arm_from: dict[str, datetime] = {}  # jobs added with since=, before arming
        self._fired_until: datetime | None = None  # every occurrence due by then was fired
        self._armed_at: dict[str, datetime] = {}  # each job's armed, not yet fired occurrence
        # (fire at, sequence, job, generation, scheduled at): fire at is the scheduled time
        # plus the job's jitter for that occurrence.
        self._heap: list[tuple[datetime, int, str, int, datetime]] = []
        self._generation: dict[str, int] = {}
        self._sequence = itertools.count()
        self.armed = False  # arm_all ran: jobs added from now on are armed at once
        for job in jobs:
            self._check_name(job)
            self._jobs[job.name] = job

    def jobs(self) -> list[Job]:
        with self.lock:
            return list(self._jobs.values())

    def get(self, name: str) -> Job | None:
        return self._jobs.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._jobs

    def add(self, job: Job, *, since: datetime | None, now: datetime) -> None:
        """Add ``job``: armed from ``since`` (else ``now``) once armed, else when arming.

        Raises:
            ConfigError: another job of that name is scheduled.
        """
        with self.lock:
            self._check_name(job)
            self._jobs[job.name] = job
            if self.armed:
                self._arm(job, since or now)
            elif since is not None:
                self._arm_from[job.name] = since

    def replace(self, job: Job, *, since: datetime | None, now: datetime) -> None:
        """Swap the job of ``job.name`` for ``job``, or add it.

        The new schedule takes over where the old one stopped: after the last time this
        replica fired what was due (or before the old one's armed occurrence, when jitter
        holds it back), so a change racing an occurrence neither fires it twice on this
        replica nor skips it. ``since`` arms from that time instead.
        """
        with self.lock:
            after = since
            if after is None and job.name in self._jobs and self._fired_until is not None:
                after = self._fired_until
                pending = self._armed_at.get(job.name)
                if pending is not None:
                    after = min(after, pending - _ONE_MS)
            self.remove(job.name)
            self.add(job, since=after, now=now)

    def remove(self, name: str) -> Job | None:
        """Stop scheduling the job called ``name``; the one removed, if any."""
        with self.lock:
            job = self._jobs.pop(name, None)
            self._arm_from.pop(name, None)
            self._armed_at.pop(name, None)
            self._generation[name] = self._generation.get(name, 0) + 1
            return job

    def arm_all(self, now: datetime) -> None:
        """Arm every job (from the time it was added with, else ``now``), once."""
        with self.lock:
            for job in self._jobs.values():
                self._arm(job, self._arm_from.pop(job.name, now))
            self.armed = True

    def pop_due(self, now: datetime) -> list[tuple[Job, datetime]]:
        """Every armed occurrence whose time has come, with its job; nothing is re-armed."""
        due = []
        with self.lock:
            self._fired_until = now
            while self._heap and self._heap[0][0] <= now:
                _, _, name, generation, when = heapq.heappop(self._heap)
                job = self._jobs.get(name)
                if job is not None and generation == self._generation.get(name, 0):
                    due.append((job, when))
                    self._armed_at.pop(name, None)
        return due

    def rearm(self, arms: Iterable[tuple[Job, datetime, datetime | None]]) -> None:
        """Arm each ``(job, after, following)`` whose job is still the one scheduled."""
        with self.lock:  # once for the batch: a burst arms thousands
            for job, after, following in arms:
                if self._jobs.get(job.name) is job:
                    self._arm(job, after, following)

    def next_fire(self) -> datetime | None:
        """When the earliest armed occurrence fires, if any."""
        with self.lock:
            return self._heap[0][0] if self._heap else None

    def _check_name(self, job: Job) -> None:
        if job.name in self._jobs and self._jobs[job.name] is not job:
            raise ConfigError(
                "a job of this name is already scheduled",
                job=job.name,
                option="name",
                value=job.name,
            )

    def _arm(self, job: Job, after: datetime, following: datetime | None = None) -> None:
        """Arm the first occurrence of ``job`` after ``after`` (``following``, when the
        caller has it already)."""
        if job.on_demand:
            return
        generation = self._generation.get(job.name, 0)
        scheduled = following or job.schedule.next_after(after)
        entry = (job.fire_at(scheduled), next(self._sequence), job.name, generation, scheduled)
        heapq.heappush(self._heap, entry)
        self._armed_at[job.name] = scheduled
        if len(self._heap) > 2 * len(self._jobs) + 1024:
            # Entries of replaced or removed jobs wait in the heap until they come due, and a
            # yearly stored schedule changed every minute would otherwise keep them all.
            self._heap = [
                e
                for e in self._heap
                if e[3] == self._generation.get(e[2], 0) and e[2] in self._jobs
            ]
            heapq.heapify(self._heap)
