"""Stores that fail on purpose, for the tests of what happens through a store blip."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from cron_bridge.errors import StoreUnavailable
from cron_bridge.jobs import Occurrence
from cron_bridge.stores import MemoryStore


class LockBlips(MemoryStore):
    """A memory store whose overlap-lock requests fail ``failures`` times, as in a blip."""

    def __init__(self, failures: int, **options: Any) -> None:
        super().__init__(**options)
        self.failures = failures

    def acquire_fenced(self, key: str, owner: str, ttl: timedelta) -> int | None:
        if self.failures > 0:
            self.failures -= 1
            raise StoreUnavailable("blip", host="memory")
        return super().acquire_fenced(key, owner, ttl)


class ReleaseBlips(MemoryStore):
    """A memory store whose first ``failures`` releases fail: the store is down as runs end."""

    def __init__(self, failures: int, **options: Any) -> None:
        super().__init__(**options)
        self.failures = failures

    def release(self, key: str, owner: str) -> bool:
        if self.failures > 0:
            self.failures -= 1
            raise StoreUnavailable("blip", host="memory")
        return super().release(key, owner)


class FinishBlips(MemoryStore):
    """A memory store whose first ``failures`` completion marks fail (nothing written), as when
    the store fails over just as a queue delivery completes."""

    def __init__(self, failures: int, **options: Any) -> None:
        super().__init__(**options)
        self.failures = failures

    def finish(self, occurrence: Occurrence, lock: tuple[str, str] | None = None) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise StoreUnavailable("blip", host="memory")
        super().finish(occurrence, lock)


class LockDownFor(MemoryStore):
    """A memory store whose overlap-lock requests fail for ``seconds`` of real time."""

    def __init__(self, seconds: float, **options: Any) -> None:
        super().__init__(**options)
        self.back_at = time.monotonic() + seconds
        self.asked: list[float] = []

    def acquire_fenced(self, key: str, owner: str, ttl: timedelta) -> int | None:
        self.asked.append(time.monotonic())
        if time.monotonic() < self.back_at:
            raise StoreUnavailable("down", host="memory")
        return super().acquire_fenced(key, owner, ttl)


class RecordBlips(MemoryStore):
    """A memory store whose first ``failures`` writes of run records fail."""

    def __init__(self, failures: int, **options: Any) -> None:
        super().__init__(**options)
        self.failures = failures

    def record_many(self, records: Any) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise StoreUnavailable("blip", host="memory")
        super().record_many(records)


class AnswerLost(MemoryStore):
    """A memory store whose first ``failures`` claim batches are made and then fail to answer,
    as when a connection is cut mid-commit or the server restarts before it replies."""

    def __init__(self, failures: int, **options: Any) -> None:
        super().__init__(**options)
        self.failures = failures

    def claim_many(self, occurrences: Any, owner: str, **options: Any) -> list[bool]:
        won = super().claim_many(occurrences, owner, **options)
        if self.failures > 0:
            self.failures -= 1
            raise StoreUnavailable("the answer was lost", host="memory")
        return won


class ClaimsDown(MemoryStore):
    """A memory store whose claim batches fail, unmade, while ``down`` is set (single claims,
    as a manual trigger makes them, go through)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.down = True
        self.refused = 0

    def claim_many(self, occurrences: Any, owner: str, **options: Any) -> list[bool]:
        if self.down:
            self.refused += 1
            raise StoreUnavailable("down", host="memory")
        return super().claim_many(occurrences, owner, **options)

    def claim(self, occurrence: Any, owner: str, **options: Any) -> bool:
        return super().claim_many([occurrence], owner, **options)[0]


class LockAnswerLost(MemoryStore):
    """A memory store whose first ``failures`` lock requests take the lock and then fail to
    answer, as when a connection is cut after the server wrote it."""

    def __init__(self, failures: int, **options: Any) -> None:
        super().__init__(**options)
        self.failures = failures

    def acquire_fenced(self, key: str, owner: str, ttl: timedelta) -> int | None:
        token = super().acquire_fenced(key, owner, ttl)
        if self.failures > 0:
            self.failures -= 1
            raise StoreUnavailable("the answer was lost", host="memory")
        return token
