"""The wait between a failed attempt and the next one: ``Backoff``, a job's ``backoff=``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from cron_bridge.errors import ConfigError
from cron_bridge.schedules import parse_duration

__all__ = ["Backoff"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Backoff:
    """The wait between a failed attempt and the next one.

    Build it with ``Backoff.fixed(seconds)`` or ``Backoff.exponential(seconds, max=...)``.
    """

    kind: Literal["fixed", "exponential"]
    base: float
    max: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "exponential"):
            raise ConfigError("unknown backoff kind", option="backoff", value=self.kind)
        numbers = (self.base,) if self.max is None else (self.base, self.max)
        if not all(isinstance(n, int | float) and math.isfinite(n) for n in numbers):
            raise ConfigError(
                "the backoff needs finite numbers of seconds", option="backoff", value=self
            )
        if self.base < 0 or (self.max is not None and self.max < self.base):
            raise ConfigError(
                "the backoff needs base >= 0 and max >= base", option="backoff", value=self
            )

    @classmethod
    def fixed(cls, seconds: float | str | timedelta = 0) -> Backoff:
        """The same wait before every retry."""
        return cls(kind="fixed", base=parse_duration(seconds, option="backoff").total_seconds())

    @classmethod
    def exponential(
        cls, seconds: float | str | timedelta, *, max: float | str | timedelta | None = None
    ) -> Backoff:
        """``seconds``, then twice that, four times, ... capped at ``max``."""
        cap = None if max is None else parse_duration(max, option="backoff").total_seconds()
        base = parse_duration(seconds, option="backoff").total_seconds()
        return cls(kind="exponential", base=base, max=cap)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after the failed attempt number ``attempt`` (from 1)."""
        if self.kind == "fixed":
            return self.base
        wait = self.base * 2.0 ** (attempt - 1)
        return wait if self.max is None else min(wait, self.max)

    def delays(self, retries: int) -> list[float]:
        """The waits before each of ``retries`` retries."""
        return [self.delay(attempt) for attempt in range(1, retries + 1)]
