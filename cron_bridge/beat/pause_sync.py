"""How a replica knows the paused jobs right before each claim without reading them all: it
follows the pauses' feed (``control.pause.FEED``).

It reads every pause at start, before its first claim. Before each claim it asks for the
feed's entry after the last it saw, with the head hint (one small read while nothing
changes, however many jobs are paused), then the entries that came since, a round trip per
few hundred, and the pauses of the jobs they name, in one more. It reads every pause again,
before the claim, when the feed cannot tell what changed: entries it had not seen are gone
(pruned while it was behind), more than ``FOLLOWED_EACH`` are pending, or the head went back
(a store restored or failed over; at most every ``BACK_EVERY``). Every ``FULL_EVERY`` it
reads them all again besides, as a safety net, on a thread of its own: the claims go on
meanwhile with the feed.
"""

from __future__ import annotations

import logging
import threading

from cron_bridge.control import pause as control
from cron_bridge.errors import StoreUnavailable
from cron_bridge.stores.base import Store

__all__ = ["BACK_EVERY", "FULL_EVERY", "PauseSync"]

log = logging.getLogger(__name__)

FULL_EVERY = control.FULL_EVERY_MINUTES * 60.0  # seconds between full reads, the safety net
FOLLOWED_EACH = 10_000  # entries followed before a claim; more: every pause is read
BACK_EVERY = 10.0  # seconds: a head behind the entries seen is read whole at most this often


class PauseSync:
    """A replica's view of the paused jobs, brought up to date before each claim."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._seen: int | None = None  # the last feed number applied; None: read everything
        self._next_full = 0.0
        self._last_full = float("-inf")
        self._paused: dict[str, control.Pause] = {}
        self._lock = threading.Lock()
        self._refreshing = False
        self._refreshed: tuple[int, dict[str, control.Pause]] | None = None
        self.full_reads = 0
        self.followed = 0

    def current(self, now: float) -> dict[str, control.Pause]:
        """The paused jobs as of now (``now``: the monotonic clock). Not to be changed: it
        is replaced, not changed, when a pause changes.

        Raises:
            StoreUnavailable: the store could not be reached (nothing learnt is lost: the
                next call asks again from the same entry).
        """
        with self._lock:
            if self._seen is None:
                self._read_all(now)
            else:
                if self._refreshed is not None:  # the safety net's read, then what followed
                    self._seen, self._paused = self._refreshed
                    self._refreshed = None
                self._follow(now)
            if now >= self._next_full:
                self._next_full = now + FULL_EVERY
                self._refresh(now)
            return self._paused

    def _read_all(self, now: float) -> None:
        head = control.FEED.head(self.store)  # before: what comes after is followed again
        self._paused = control.paused(self.store)
        self._seen, self._last_full = head, now
        self._next_full = max(self._next_full, now + FULL_EVERY)
        self.full_reads += 1

    def _follow(self, now: float) -> None:
        assert self._seen is not None
        followed = control.FEED.follow(self.store, self._seen, FOLLOWED_EACH)
        if followed.gap or (followed.back and now - self._last_full >= BACK_EVERY):
            self._read_all(now)
            return
        if followed.names:
            changed = control.pauses_of(self.store, followed.names)
            paused = dict(self._paused)
            for name in followed.names:
                pause = changed.get(name)
                if pause is None:
                    paused.pop(name, None)
                else:
                    paused[name] = pause
            self._paused = paused
        self.followed += followed.seen - self._seen
        self._seen = followed.seen

    def _refresh(self, now: float) -> None:
        """Read every pause on a thread of its own; the next ``current`` takes it, and follows
        the feed from where the read began."""
        if self._refreshing:
            return
        self._refreshing = True

        def run() -> None:
            try:
                head = control.FEED.head(self.store)
                paused = control.paused(self.store)
            except StoreUnavailable as exc:  # the next safety net, or a full read on a gap
                log.debug("reading every pause again failed (%s)", exc)
                paused = None
            except Exception:  # a thread's last resort: logged, the feed goes on
                log.exception("reading every pause again failed")
                paused = None
            with self._lock:
                if paused is not None:
                    self._refreshed = (head, paused)
                    self._last_full = now
                    self.full_reads += 1
                self._refreshing = False

        threading.Thread(target=run, name="cron-bridge-pauses", daemon=True).start()
