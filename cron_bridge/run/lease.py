"""How long a run may believe it holds its overlap lock, kept on this process's own clock.

The store's TTL starts when the store gets the request; a process cannot know when that was,
only when it sent it. So the lease is counted from just *before* each request (acquire, then
every extend), less a margin, and a watchdog aborts the run the moment it passes, whatever the
heartbeat is doing (blocked on a store that does not answer, or frozen with the process). The
guard also checks it right before the handler starts: a process frozen between taking the lock
and calling the handler never starts a run whose lock may be someone else's by then.

Locks whose release failed (the store was down when the run ended) are released again in the
background until the store answers or the lock has expired anyway, so the job's next
occurrences are not skipped for a lock nobody holds. A completed run whose completion mark
failed is marked again the same way, and its lock released only after the mark: releasing it
first would let a redelivery of the message take the lock, find no mark and run it again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta

from cron_bridge.context import AbortSignal
from cron_bridge.errors import StoreUnavailable
from cron_bridge.jobs import Occurrence

__all__ = ["Lease", "Releaser"]

log = logging.getLogger(__name__)

# How long a completion mark is tried again: a redelivery can come that late (Celery on Redis
# gives an unacknowledged message back after its visibility_timeout, an hour by default).
MARK_RETRY_FOR = 3600.0
MARGIN_MAX = 1.0  # seconds: the lease ends this much (or a tenth of the TTL) before the store's


class Lease:
    """The local deadline of one held lock.

    Args:
        ttl: the lock's lifetime.
        sent_at: ``time.monotonic()`` just before the acquire request was sent.
        clock: monotonic seconds (a fake one in tests).
    """

    def __init__(
        self, ttl: timedelta, sent_at: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        seconds = ttl.total_seconds()
        self._length = seconds - min(MARGIN_MAX, seconds / 10)
        self._clock = clock
        self._changed = threading.Condition()
        self.until = sent_at + self._length
        self._done = False

    def renewed(self, sent_at: float) -> None:
        """An extend sent at ``sent_at`` succeeded."""
        with self._changed:
            self.until = max(self.until, sent_at + self._length)
            self._changed.notify_all()

    def lost(self) -> None:
        """The store said the lock is someone else's: the watchdog aborts the run now."""
        with self._changed:
            self.until = float("-inf")
            self._changed.notify_all()

    def left(self) -> float:
        """Seconds of the lease left (negative once it ran out)."""
        return self.until - self._clock()

    def watch(self, signal: AbortSignal) -> None:
        """Abort ``signal`` with ``lock-lost`` the moment the lease runs out (until ``end``)."""
        with self._changed:
            while not self._done:
                left = self.left()
                if left <= 0:
                    if not signal.aborted:
                        log.warning("the lease of the overlap lock ran out; aborting the run")
                        signal.abort("lock-lost")
                    return
                self._changed.wait(left)

    def end(self) -> None:
        with self._changed:
            self._done = True
            self._changed.notify_all()


class Releaser:
    """Does again, in the background, what the store did not answer at the end of a run: a
    lock's release, or a completed run's mark and then its lock's release."""

    def __init__(
        self,
        release: Callable[[str, str], object],
        finish: Callable[[Occurrence, tuple[str, str]], object],
        *,
        first_wait: float = 0.5,
    ) -> None:
        self._release = release
        self._finish = finish
        self._first_wait = first_wait

    def later(self, key: str, owner: str, expires_in: float) -> None:
        """Try to release ``key`` held by ``owner`` until it succeeds or the lock expires."""
        self._start(lambda: self._release(key, owner), expires_in, f"released {key}")

    def finish_later(self, occurrence: Occurrence, lock: tuple[str, str]) -> None:
        """Try to mark ``occurrence`` completed, then release ``lock``, until the store
        answers (for up to ``MARK_RETRY_FOR``). The lock is never released before the mark."""
        self._start(
            lambda: self._finish(occurrence, lock),
            MARK_RETRY_FOR,
            f"marked {occurrence.id} completed and released {lock[0]}",
        )

    def _start(self, call: Callable[[], object], give_up_in: float, done: str) -> None:
        thread = threading.Thread(
            target=self._retry,
            args=(call, give_up_in, done),
            name="cron-bridge-release",
            daemon=True,
        )
        thread.start()

    def _retry(self, call: Callable[[], object], give_up_in: float, done: str) -> None:
        give_up = time.monotonic() + give_up_in
        wait = self._first_wait
        while time.monotonic() + wait < give_up:
            time.sleep(wait)
            try:
                call()
            except StoreUnavailable:
                wait = min(wait * 2, 5.0)
                continue
            log.info("%s once the store answered again", done)
            return
