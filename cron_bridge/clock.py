"""Where the time comes from: the system clock, or a fake one in tests (``cron_bridge.testing``)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


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
