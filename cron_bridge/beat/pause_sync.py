"""How a replica knows the paused jobs right before each claim without reading them all: it
follows the pauses' feed (``control.pause.FEED``).

It reads every pause at start, and again every ``FULL_EVERY`` as a safety net (a pause written
past the feed, an entry pruned while it was frozen). Before each claim it asks for the feed's
entry after the last it saw: one small read while nothing changes, however many jobs are
paused. For each new entry it reads that one job's pause again.
"""

from __future__ import annotations

import threading

from cron_bridge.control import pause as control
from cron_bridge.stores.base import Store

__all__ = ["FULL_EVERY", "PauseSync"]

FULL_EVERY = control.FULL_EVERY_MINUTES * 60.0  # seconds between full reads, the safety net
FOLLOWED_EACH = 1_000  # entries followed per look; more wait for the next look


class PauseSync:
    """A replica's view of the paused jobs, brought up to date before each claim."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._seen: int | None = None  # the last feed number applied; None: read everything
        self._next_full = 0.0
        self._paused: dict[str, control.Pause] = {}
        self._lock = threading.Lock()
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
            if self._seen is None or now >= self._next_full:
                head = control.FEED.head(self.store)  # before: what comes after is followed
                self._paused = control.paused(self.store)
                self._seen, self._next_full = head, now + FULL_EVERY
                self.full_reads += 1
            else:
                seen, names = control.FEED.follow(self.store, self._seen, FOLLOWED_EACH)
                changed = {name: control.pause_of(self.store, name) for name in names}
                if changed:
                    paused = dict(self._paused)
                    for name, pause in changed.items():
                        if pause is None:
                            paused.pop(name, None)
                        else:
                            paused[name] = pause
                    self._paused = paused
                self.followed += seen - self._seen
                self._seen = seen
            return self._paused
