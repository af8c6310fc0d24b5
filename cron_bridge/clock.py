"""Where the time comes from: the system clock, or a fake one in tests (``cron_bridge.testing``);
and a time shown in a zone without failing at the ends of the calendar."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, tzinfo
from typing import Protocol

__all__ = ["Clock", "SystemClock", "in_zone"]


class Clock(Protocol):
    """The time source of a beat or a store."""

    def now(self) -> datetime:
        """The current time, as an aware UTC datetime."""

    def sleep_until(self, deadline: datetime, wake: threading.Event) -> bool:
        """Wait until ``deadline`` or until ``wake`` is set; True when ``wake`` was set."""


class SystemClock:
    """The real wall clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep_until(self, deadline: datetime, wake: threading.Event) -> bool:
        # Sleep in slices of at most a second, so a wall-clock step (NTP, a resumed VM) is
        # noticed within a second rather than after the whole interval.
        while (remaining := (deadline - self.now()).total_seconds()) > 0:
            if wake.wait(min(remaining, 1.0)):
                return True
        return wake.is_set()


def in_zone(at: datetime, zone: tzinfo) -> datetime:
    """``at`` in ``zone`` for showing it; never raises. A time the zone's offset would carry
    past year 1 or 9999 is given in UTC, or as it is when UTC cannot hold it either; a time
    without a zone is given as it is (its text says so: it has no offset)."""
    if at.utcoffset() is None:
        return at
    for target in (zone, UTC):
        try:
            return at.astimezone(target)
        except (OverflowError, ValueError):
            continue
    return at
