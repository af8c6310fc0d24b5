"""How long a run may believe it holds its overlap lock, kept on this process's own clock.

The store's TTL starts when the store gets the request; a process cannot know when that was,
only when it sent it. So the lease is counted from just *before* each request (acquire, then
every extend), less a margin, and a watchdog aborts the run the moment it passes, whatever the
heartbeat is doing (blocked on a store that does not answer, or frozen with the process). The
guard also checks it right before the handler starts: a process frozen between taking the lock
and calling the handler never starts a run whose lock may be someone else's by then.

Locks whose release failed (the store was down when the run ended) are released again in the
background until the store answers or the lock has expired anyway, so the job's next
occurrences are not skipped for a lock nobody holds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta

from cron_bridge.context import AbortSignal
from cron_bridge.errors import StoreUnavailable

__all__ = ["Lease", "Releaser"]

log = logging.getLogger(__name__)

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
    """Releases locks again, in the background, after a release the store did not answer."""

    def __init__(self, release: Callable[[str, str], object], *, first_wait: float = 0.5) -> None:
        self._release = release
        self._first_wait = first_wait

    def later(self, key: str, owner: str, expires_in: float) -> None:
        """Try to release ``key`` held by ``owner`` until it succeeds or the lock expires."""
        thread = threading.Thread(target=self._retry, args=(key, owner, expires_in),
                                  name="cron-bridge-release", daemon=True)  # fmt: skip
        thread.start()

    def _retry(self, key: str, owner: str, expires_in: float) -> None:
        give_up = time.monotonic() + expires_in
        wait = self._first_wait
        while time.monotonic() + wait < give_up:
            time.sleep(wait)
            try:
                self._release(key, owner)
            except StoreUnavailable:
                wait = min(wait * 2, 5.0)
                continue
            log.info("released %s once the store answered again", key)
            return
