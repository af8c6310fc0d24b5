"""How long a run may believe it holds its overlap lock, kept on this process's own clock.

The store's TTL starts when the store gets the request; a process cannot know when that was,
only when it sent it. So the lease is counted from just *before* each request (acquire, then
every extend), less a margin, and a watchdog aborts the run the moment it passes, whatever the
heartbeat is doing (blocked on a store that does not answer, or frozen with the process). The
guard also checks it right before the handler starts: a process frozen between taking the lock
and calling the handler never starts a run whose lock may be someone else's by then.

Locks whose release failed (the store was down when the run ended) are released again in the
background until the store answers or the lock has expired anyway, and at once before this
process asks for a lock or claims again, so the job's next occurrences are not skipped for a
lock nobody holds. A completed run whose completion mark failed is marked again the same way,
and its lock released only after the mark: releasing it first would let a redelivery of the
message take the lock, find no mark and run it again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from cron_bridge.context import AbortSignal
from cron_bridge.errors import StoreUnavailable
from cron_bridge.jobs import Occurrence
from cron_bridge.plumbing.outbound import described

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
        token: the lock's fencing token from that request (None: the store keeps none).
        clock: monotonic seconds (a fake one in tests).
    """

    def __init__(
        self,
        ttl: timedelta,
        sent_at: float,
        *,
        token: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.token = token
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


PENDING_MAX = 10_000  # pending releases and marks a process keeps; the oldest go first


class Releaser:
    """Does again what the store did not answer at the end of a run: a lock's release, or a
    completed run's mark and then its lock's release. One thread of its own tries what is
    pending, oldest first, until the store answers (at most ``max_wait`` apart), and
    ``flush`` tries it at once: the guard calls it before it asks for a lock, and a beat when
    the store answers again, so a finished run's lock outlives its run by the store's outage,
    not by a retry's backoff.

    One per process where deliveries come one after another (a worker's), so that the next
    run of the job flushes what the last one left. What the store does not answer (any
    error, not only ``StoreUnavailable``: a read-only standby's refusal, a driver's own) is
    kept and logged, never raised; at most ``PENDING_MAX`` are kept.
    """

    def __init__(
        self,
        release: Callable[[str, str], object],
        finish: Callable[[Occurrence, tuple[str, str]], object],
        *,
        first_wait: float = 0.25,
        max_wait: float = 1.0,
    ) -> None:
        self._release = release
        self._finish = finish
        self._first_wait = first_wait
        self._max_wait = max_wait
        self._lock = threading.Lock()
        self._sending = threading.Lock()  # the thread and a flush never send side by side
        self._pending: dict[tuple[str, str], _Pending] = {}
        self._thread: threading.Thread | None = None

    def later(self, key: str, owner: str, expires_in: float) -> None:
        """Try to release ``key`` held by ``owner`` until it succeeds or the lock expires."""
        self._add((key, owner), lambda: self._release(key, owner), expires_in, f"release {key}")

    def finish_later(self, occurrence: Occurrence, lock: tuple[str, str]) -> None:
        """Try to mark ``occurrence`` completed, then release ``lock``, until the store
        answers (for up to ``MARK_RETRY_FOR``). The lock is never released before the mark."""
        self._add(
            lock,
            lambda: self._finish(occurrence, lock),
            MARK_RETRY_FOR,
            f"mark {occurrence.id} completed, then release {lock[0]}",
        )

    def cancel(self, key: str, owners: str) -> Held:
        """Hold back what is pending for ``key`` held by an owner that starts with
        ``owners`` (its owner may take it again now). Waits for a send in progress: nothing
        held back is done after this returns, unless given back (``restore``) when the
        owner did not take it after all."""
        with self._sending, self._lock:
            held = [p for p in self._pending if p[0] == key and p[1].startswith(owners)]
            return [(pending, self._pending.pop(pending)) for pending in held]

    def restore(self, held: Held) -> None:
        """Put back what ``cancel`` held back (what is pending again for the same lock
        meanwhile is kept instead), and try it as before."""
        if not held:
            return
        with self._lock:
            for lock, item in held:
                self._pending.setdefault(lock, item)
        self._add_thread()

    def pending(self) -> int:
        """How many are still to be done."""
        with self._lock:
            return len(self._pending)

    def flush(self) -> None:
        """Try what is pending now, oldest first: what the store takes is done; the first it
        does not answer ends the flush, so that it costs one request's timeout at most while
        the store is down, however many are pending. Never raises."""
        with self._lock:
            if not self._pending:
                return
        self._send()

    def _add(
        self, lock: tuple[str, str], call: Callable[[], object], give_up_in: float, done: str
    ) -> None:
        with self._lock:
            self._pending.pop(lock, None)
            self._pending[lock] = _Pending(call, time.monotonic() + give_up_in, done)
            while len(self._pending) > PENDING_MAX:
                oldest = next(iter(self._pending))
                log.warning("too many releases pending; dropping %s (it expires)", oldest[0])
                del self._pending[oldest]
        self._add_thread()

    def _add_thread(self) -> None:
        """Start the thread that tries what is pending, unless it runs."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._retry, name="cron-bridge-release", daemon=True
                )
                self._thread.start()

    def _retry(self) -> None:
        wait = self._first_wait
        while True:
            time.sleep(wait)
            with self._lock:
                if not self._pending:
                    self._thread = None
                    return
            wait = self._first_wait if self._send() else min(wait * 2, self._max_wait)

    def _send(self) -> bool:
        """Send what is pending, oldest first, until one is not answered; whether all were."""
        with self._sending:
            with self._lock:
                items = list(self._pending.items())
            for lock, item in items:
                if time.monotonic() >= item.give_up_at:
                    self._forget(lock, item)  # expired by now, or a redelivery no longer comes
                    continue
                try:
                    item.call()
                except StoreUnavailable:
                    return False
                except Exception as exc:  # noqa: BLE001 - kept and tried again, never raised
                    log.warning("could not %s yet, trying again: %s", item.what, described(exc))
                    return False
                self._forget(lock, item)
                log.info("%s: done once the store answered again", item.what)
        return True

    def _forget(self, lock: tuple[str, str], item: _Pending) -> None:
        with self._lock:
            if self._pending.get(lock) is item:
                del self._pending[lock]


Held = list[tuple[tuple[str, str], "_Pending"]]  # what ``Releaser.cancel`` held back


@dataclass(frozen=True, slots=True)
class _Pending:
    """One thing the store did not answer: what to call again, and until when."""

    call: Callable[[], object]
    give_up_at: float
    what: str  # for the log: "release <key>", "mark <occurrence> completed, then ..."
