"""Firing on the store's time: each replica measures how far its clock is from the store's.

Replicas need clocks within seconds of each other; one whose clock runs ahead would claim
occurrences early, and its early run's overlap lock would make on-time replicas skip. So each
heartbeat doubles as a clock reading: the store answers with its own time (Redis ``TIME``,
Postgres ``clock_timestamp()``), the replica takes the offset from the middle of the round
trip, fires on its clock corrected by it, records it with the heartbeat (the dashboard shows
it per replica) and warns past ``WARN_AFTER``. Stores without a clock of their own (SQLite on
this host, memory) leave the offset at zero.

A reading is only as good as its round trip is short: the store's time can have been read
anywhere in it. A heartbeat that took longer than ``ROUND_TRIP_MAX`` (one that reconnected
through a store's failover took 11 s, and its reading put a replica 5.6 s off) leaves the
offset as it was; the first reading is taken however long it took, since a replica whose
clock runs ahead must not plan its start on that clock (off by half the round trip at most,
and corrected at the next quick heartbeat).
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta

from cron_bridge.clock import Clock, SystemClock
from cron_bridge.stores import Store

__all__ = ["ROUND_TRIP_MAX", "WARN_AFTER", "StoreClock"]

log = logging.getLogger(__name__)

WARN_AFTER = timedelta(seconds=1)
ROUND_TRIP_MAX = timedelta(seconds=1)  # a reading is then off by half of it at most


class StoreClock:
    """A clock that reads the replica's own clock, corrected to the store's.

    Only a real clock is corrected: a fake one (tests) keeps its own time.
    """

    def __init__(self, base: Clock) -> None:
        self.base = base
        self.offset = timedelta(0)
        self._correct = isinstance(base, SystemClock)
        self._measured = False
        self._warned = False

    def now(self) -> datetime:
        return self.base.now() + self.offset

    def sleep_until(self, deadline: datetime, wake: threading.Event) -> bool:
        return self.base.sleep_until(deadline - self.offset, wake)

    @property
    def offset_ms(self) -> float | None:
        """The last measured offset in ms; None before the first (or with no store clock)."""
        return self.offset / timedelta(milliseconds=1) if self._measured else None

    def heartbeat(self, store: Store, replica: str, ttl: timedelta) -> None:
        """Send a heartbeat with the offset measured last time; measure it again.

        Raises:
            StoreUnavailable: the heartbeat did not reach the store.
        """
        before = self.base.now()
        server = store.heartbeat(replica, ttl, clock_offset_ms=self.offset_ms)
        after = self.base.now()
        if server is None or not self._correct:
            return
        if after - before > ROUND_TRIP_MAX and self._measured:
            log.debug("clock not read: the heartbeat took %.1fs", (after - before).total_seconds())
            return
        self.measured(server - (before + (after - before) / 2))

    def measured(self, offset: timedelta) -> None:
        self.offset = offset
        self._measured = True
        off = abs(offset) > WARN_AFTER
        if off and not self._warned:
            side = "behind" if offset > timedelta(0) else "ahead of"
            log.warning(
                "this replica's clock is %.3fs %s the store's; firing on the store's time "
                "(check NTP on this host)",
                abs(offset.total_seconds()),
                side,
            )
        elif not off and self._warned:
            log.info("this replica's clock is within %s of the store's again", WARN_AFTER)
        self._warned = off
