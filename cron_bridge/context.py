"""What a running handler sees: its ``JobContext`` and the abort signal in it."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from cron_bridge.errors import Aborted

__all__ = ["AbortReason", "AbortSignal", "JobContext", "Trigger"]

Trigger = Literal["schedule", "misfire", "manual", "queue"]
AbortReason = Literal["lock-lost", "shutdown", "timeout"]


class AbortSignal:
    """A one-way flag asking a run to stop, with the reason of the first request.

    Handlers check it between units of work (``raise_if_aborted()``) or wait on it instead of
    sleeping (``wait(timeout)``); cron-bridge never kills a thread.
    """

    __slots__ = ("_event", "_expired", "_lock", "_reason")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._reason: AbortReason | None = None
        self._expired: Callable[[], AbortReason | None] | None = None

    def expires(self, check: Callable[[], AbortReason | None]) -> None:
        """Also abort (with the reason ``check`` gives) as soon as ``check`` says so, seen at
        every look at the signal: a process that wakes from a freeze sees its lease is gone
        at its first check, before any watchdog thread has been scheduled."""
        self._expired = check

    def _look(self) -> None:
        if self._expired is not None and not self._event.is_set():
            reason = self._expired()
            if reason is not None:
                self.abort(reason)

    def __repr__(self) -> str:
        return f"<AbortSignal aborted={self.aborted} reason={self._reason!r}>"

    @property
    def aborted(self) -> bool:
        self._look()
        return self._event.is_set()

    @property
    def reason(self) -> AbortReason | None:
        """Why the run was aborted, or None while it was not."""
        return self._reason

    def abort(self, reason: AbortReason) -> bool:
        """Ask the run to stop. The first reason sticks; returns whether this call set it."""
        with self._lock:
            if self._event.is_set():
                return False
            self._reason = reason
            self._event.set()
            return True

    def wait(self, timeout: float | None = None) -> bool:
        """Block until aborted or ``timeout`` seconds pass; True when aborted."""
        self._look()
        self._event.wait(timeout)
        self._look()
        return self._event.is_set()

    async def wait_async(self, timeout: float | None = None) -> bool:
        """``wait`` for ``async def`` handlers: sleeps on the event loop until aborted or
        ``timeout`` seconds pass (looking every 50 ms); True when aborted."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.aborted:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            await asyncio.sleep(0.05 if left is None else min(0.05, left))
        return self.aborted

    def raise_if_aborted(self) -> None:
        """Raise ``cron_bridge.Aborted`` with the reason once the run was asked to stop."""
        self._look()
        if self._event.is_set():
            raise Aborted(self._reason or "shutdown")


@dataclass(frozen=True, kw_only=True, slots=True)
class JobContext:
    """Handed to a handler as its first argument, ``ctx``.

    Attributes:
        name: the job's name.
        occurrence_id: ``<job>@<scheduled UTC time>``; use it as an idempotency key.
        scheduled_at: when the occurrence was due (aware UTC).
        trigger: ``schedule``, ``misfire``, ``manual`` or ``queue``.
        attempt: this try, from 1, as counted by the queue.
        attempts: the total tries allowed.
        replica: who runs it.
        signal: aborted on ``lock-lost``, ``shutdown`` or ``timeout``.
        logger: a logger that adds the job, occurrence and replica to each record.
        fencing_token: a number that grows with every taking of the job's overlap lock, to
            pass with the run's own writes so that a write carrying a smaller one than a
            write already made is refused (docs/jobs.md); None for a run that holds no lock
            (``overlap="allow"``, an instance-scope job) or on a store keeping no tokens.
    """

    name: str
    occurrence_id: str
    scheduled_at: datetime
    trigger: Trigger
    attempt: int
    attempts: int
    replica: str
    signal: AbortSignal
    logger: logging.LoggerAdapter[Any]
    fencing_token: int | None = None
