"""How replicas follow the stored schedules: through their change feed (``control.feed``),
so that a change costs what it changes, not a read of every schedule on every replica.

A replica reads every schedule once at start and then every ``FULL_EVERY`` as a safety net
(a record written past the feed). In between, once a second, and at once when the store
pushes a change (Redis pub/sub, PostgreSQL ``LISTEN``/``NOTIFY``; NATS, SQLite and memory
stores are polled), it asks for the entry after the last it saw with the head hint (one
small read while nothing changes), then the entries since, a round trip per few hundred, and
the schedules they name, in one more. It reads every schedule again when the feed cannot
tell what changed: entries it had not seen are gone (pruned while it was behind), more than
``FOLLOWED_EACH`` are pending, or the head went back (a store restored or failed over; at
most every ``BACK_EVERY``).

Every full read (at start too: a million schedules take a minute to read and build) runs on
a thread of its own, so the beat's loop goes on firing what it has meanwhile. The next look
takes what it read, and follows the feed again from where the read began: what changed
while it read is applied on top.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from cron_bridge.control.schedules import (
    FEED,
    FEED_GROUP,
    FULL_EVERY_MINUTES,
    ScheduleEntry,
    StoredSchedules,
)
from cron_bridge.errors import StoreUnavailable
from cron_bridge.jobs import Job
from cron_bridge.plumbing import inbound
from cron_bridge.run.recording import LOGGED_EACH
from cron_bridge.stores.base import Store

__all__ = ["FULL_EVERY", "StoredSync"]

log = logging.getLogger(__name__)

FULL_EVERY = FULL_EVERY_MINUTES * 60.0  # seconds between full reads, the safety net
FOLLOWED_EACH = 10_000  # entries followed per look; more: every schedule is read
BACK_EVERY = 10.0  # seconds: a head behind the entries seen is read whole at most this often


class StoredSync:
    """A beat's view of the stored schedules, followed through the feed: pushed by the store
    where it can, looked at once a second besides."""

    INTERVAL = 1.0  # the look when nothing pushes (and besides a push, in case it was lost)

    def __init__(self, store: Store) -> None:
        self.store = store
        self._seen: int | None = None  # the last feed number applied; None: read everything
        self._next = 0.0
        self._next_full = 0.0
        self._last_full = float("-inf")
        self.jobs: dict[str, Job] = {}
        self.full_reads = 0
        self.followed = 0
        self._stop_listening: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # no full read running
        self._reading = False
        self._read: tuple[int, dict[str, Job]] | None = None  # a full read, not yet taken
        self._failed: Exception | None = None  # why the last full read failed, not yet said
        self._failing: Exception | None = None  # why the last full read failed, till one works
        self._woken: Callable[[], None] | None = None

    def listen(self, wake: Callable[[], None]) -> None:
        """Look at once, and call ``wake``, whenever the store pushes a change (Redis and
        PostgreSQL do); the look once a second goes on besides."""

        def pushed() -> None:
            self._next = 0.0
            wake()

        self._woken = pushed  # a full read done is taken at once, as a push is
        self._stop_listening = self.store.listen(FEED_GROUP, pushed)

    def stop(self) -> None:
        if self._stop_listening is not None:
            self._stop_listening()
            self._stop_listening = None

    def due(self, now: float) -> bool:
        # The loop wakes by the beat's clock, this counts on the monotonic one: a wake a hair
        # early must not wait a whole interval more.
        return now >= self._next - 0.02

    @staticmethod
    def apply(
        changed: dict[str, Job],
        gone: set[str],
        scheduled: set[str],
        *,
        declared: Callable[[str], bool],
        replace: Callable[[Job], None],
        remove: Callable[[str], object],
    ) -> set[str]:
        """Schedule what ``poll`` found stored or changed, drop what was removed, given the
        names ``scheduled`` from the store so far; the names scheduled from the store now. A
        stored schedule named like a job declared in code is left out, with a warning."""
        # Copied when names come or go, never changed in place (the dashboard's threads read
        # it); a changed schedule alone costs no copy of a million names.
        if gone & scheduled or not changed.keys() <= scheduled:
            scheduled = set(scheduled)
        each = len(changed) + len(gone) <= LOGGED_EACH  # at start, thousands: one line
        for name in gone & scheduled:
            remove(name)
            scheduled.discard(name)
            if each:
                log.info("stored schedule %s removed", name)
        for name, job in changed.items():
            if declared(name) and name not in scheduled:
                log.warning(
                    "stored schedule %s is not run: a job declared in code has its name", name
                )
                continue
            replace(job)
            scheduled.add(name)
            if each:
                log.info("stored schedule %s: %s", name, job.schedule.describe())
        if not each:
            log.info(
                "%d stored schedule(s) scheduled or changed, %d removed; %d in all",
                len(changed),
                len(gone),
                len(scheduled),
            )
        return scheduled

    def poll(self, now: float) -> tuple[dict[str, Job], set[str]] | None:
        """The stored jobs to (re)schedule and the names to drop since the last look; None
        when nothing changed (or the first read is not done yet).

        Raises:
            StoreUnavailable: the store could not be reached (asked again next second; what
                a full read brought is returned first). A full read's failure, on its
                thread, is raised by the look after it, whatever it was.
        """
        self._next = now + self.INTERVAL
        changed: dict[str, Job] = {}
        gone: set[str] = set()
        try:
            taken = self._take_read()
        except Exception:
            self._start_read(now)  # read again from now on
            raise
        if taken is not None:
            changed, gone = taken
        elif self._failing is not None:  # every look says so until a full read succeeds
            self._start_read(now)
            raise self._failing
        elif self._seen is None:
            self._start_read(now)  # nothing read yet: nothing to follow
            return None
        if now >= self._next_full:
            self._start_read(now)
        try:
            self._follow(now, changed, gone)
        except StoreUnavailable:
            if changed or gone:
                return changed, gone  # the feed is followed from the same entry next time
            raise
        return (changed, gone) if changed or gone else None

    def _follow(self, now: float, changed: dict[str, Job], gone: set[str]) -> None:
        """Follow the feed from the last entry applied, adding to ``changed`` and ``gone``."""
        assert self._seen is not None
        followed = FEED.follow(self.store, self._seen, FOLLOWED_EACH)
        if followed.gap or (followed.back and now - self._last_full >= BACK_EVERY):
            self._start_read(now)  # what it reads is taken at a later look
            return
        # The schedules read before the entries count as seen: a read that fails is asked
        # again from the same entry.
        specs = StoredSchedules(self.store).get_many(followed.names)
        self.followed += followed.seen - self._seen
        self._seen = followed.seen
        for name in followed.names:
            spec = specs.get(name)
            job = None if spec is None else _job(spec)
            if job is None:
                if self.jobs.pop(name, None) is not None:
                    gone.add(name)
                    changed.pop(name, None)
            elif self.jobs.get(name) != job:
                self.jobs[name] = changed[name] = job
                gone.discard(name)

    def _start_read(self, now: float) -> None:
        """Read every schedule on a thread of its own (unless one is reading): the head
        first, so that what comes after it is followed again once the read is taken."""
        self._next_full = now + FULL_EVERY
        with self._lock:
            if self._reading:
                return
            self._reading = True

        def run() -> None:
            read: tuple[int, dict[str, Job]] | None = None
            failed: Exception | None = None
            try:
                head = FEED.head(self.store)
                jobs = {}
                for spec in StoredSchedules(self.store).each():
                    job = _job(spec)
                    if job is not None:
                        jobs[spec.name] = job
                read = (head, jobs)
            except Exception as exc:  # noqa: BLE001 - raised by the next look, in the loop
                failed = exc
            with self._lock:
                self._read, self._failed = read, failed
                self._reading = False
                self._idle.notify_all()
                if read is None:
                    self._next_full = 0.0  # again at the next look
                else:
                    self._last_full = now
                    self.full_reads += 1
            if self._woken is not None:
                self._woken()

        threading.Thread(target=run, name="cron-bridge-stored-schedules", daemon=True).start()

    def _take_read(self) -> tuple[dict[str, Job], set[str]] | None:
        """What the last full read found changed and removed, once it is done; it becomes
        the jobs, and the feed is followed from where it began."""
        with self._lock:
            read, self._read = self._read, None
            failed, self._failed = self._failed, None
        if failed is not None:  # the loop's, as if it had read: the beat's health says so
            self._failing = failed
            raise failed
        if read is None:
            return None
        self._failing = None
        head, jobs = read
        changed = {n: j for n, j in jobs.items() if self.jobs.get(n) != j}
        gone = set(self.jobs) - set(jobs)
        self.jobs, self._seen = jobs, head
        return changed, gone

    def wait_read(self, timeout: float) -> bool:
        """Wait until no full read is running (a test, or a beat that wants every schedule
        before it goes on); whether none is."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._reading, timeout)


def _job(spec: ScheduleEntry) -> Job | None:
    try:
        return spec.job()
    except Exception as exc:  # noqa: BLE001 - a record is hostile: whatever it makes a declaration raise, it alone is skipped
        inbound.warn_once(
            log,
            "stored-job",
            spec.name,
            spec,
            "stored schedule %.200s is not run: %.300s",
            spec.name,
            exc,
        )
        return None
