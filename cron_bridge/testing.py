"""Helpers for testing code that uses cron-bridge: a fake clock you move by hand."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

__all__ = ["FakeClock"]


class FakeClock:
    """A clock that moves only when told to.

    ``sleep_until`` returns as soon as the fake time reaches the deadline (moved by
    ``advance``/``set`` from another thread) or the wake event is set.

    Args:
        start: the starting time (aware); 2026-01-01 00:00 UTC when omitted.
    """

    def __init__(self, start: datetime | None = None) -> None:
        start = start or datetime(2026, 1, 1, tzinfo=UTC)
        if start.tzinfo is None:
            raise ValueError("FakeClock needs an aware start time")
        self._now = start.astimezone(UTC)
        self._moved = threading.Condition()

    def now(self) -> datetime:
        with self._moved:
            return self._now

    def set(self, when: datetime) -> None:
        """Jump to ``when`` (forward or back, as a wall clock can)."""
        with self._moved:
            self._now = when.astimezone(UTC)
            self._moved.notify_all()

    def advance(self, by: timedelta | float) -> datetime:
        """Move forward by a timedelta or a number of seconds; returns the new time."""
        step = by if isinstance(by, timedelta) else timedelta(seconds=by)
        with self._moved:
            self._now += step
            self._moved.notify_all()
            return self._now

    def sleep_until(self, deadline: datetime, wake: threading.Event) -> bool:
        with self._moved:
            while self._now < deadline and not wake.is_set():
                # Short real waits so a wake set without a notify is still seen promptly.
                self._moved.wait(0.01)
        return wake.is_set()
