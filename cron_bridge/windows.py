"""Schedules with an end: a one-off run at a time (``at=``), and any schedule bounded by a
``start`` and an ``end``.

A schedule with nothing left to run answers ``NEVER`` from ``next_after``: the beat arms it
there and it never comes due, and listings say it has no next run.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cron_bridge.errors import ConfigError
from cron_bridge.schedules import Cron, Schedule, load_zone

__all__ = ["NEVER", "At", "Upcoming", "Window", "dst_note", "parse_instant", "upcoming"]

NEVER = datetime(9999, 12, 31, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)
_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)


def parse_instant(value: object, *, option: str) -> datetime:
    """An aware datetime, or ISO-8601 text with its UTC offset (``2026-12-01T09:00:00+01:00``,
    ``...Z``), as aware UTC to the millisecond.

    Raises:
        ConfigError: anything else, a time without an offset (it would mean a different
            instant on every host), or one outside 1970 to 9998.
    """
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise ConfigError(
                "expected an ISO-8601 time with its offset, such as 2026-12-01T09:00:00+01:00",
                option=option,
                value=value,
            ) from None
    elif isinstance(value, datetime):
        parsed = value
    else:
        raise ConfigError("expected a datetime or ISO-8601 text", option=option, value=value)
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise ConfigError(
            "a time needs its UTC offset (or a zone): a naive time means a different instant "
            "on every host",
            option=option,
            value=value,
        )
    utc = parsed.astimezone(UTC)
    if not _EARLIEST <= utc < NEVER - timedelta(days=366):
        raise ConfigError("expected a time from 1970 to 9998", option=option, value=value)
    return utc.replace(microsecond=utc.microsecond // 1000 * 1000)


class At:
    """One occurrence, at ``when``: a one-off run, claimed once like any other."""

    __slots__ = ("when",)

    tz = "UTC"

    def __init__(self, when: datetime | str) -> None:
        self.when = parse_instant(when, option="at")

    def __repr__(self) -> str:
        return f"At({self.when.isoformat()!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, At) and other.when == self.when

    def __hash__(self) -> int:
        return hash((At, self.when))

    def describe(self) -> str:
        return f"at {self.when.isoformat(timespec='milliseconds').replace('+00:00', 'Z')}"

    def next_after(self, dt: datetime) -> datetime:
        return self.when if dt.astimezone(UTC) < self.when else NEVER

    def occurrences(self, start: datetime, end: datetime) -> Iterator[datetime]:
        if start.astimezone(UTC) < self.when <= end.astimezone(UTC):
            yield self.when


class Window:
    """``inner``'s occurrences from ``start`` to ``end`` (both included; either may be
    None)."""

    __slots__ = ("end", "inner", "start")

    def __init__(
        self,
        inner: Schedule,
        *,
        start: datetime | str | None = None,
        end: datetime | str | None = None,
    ) -> None:
        self.inner = inner
        self.start = None if start is None else parse_instant(start, option="start")
        self.end = None if end is None else parse_instant(end, option="end")
        if self.start is not None and self.end is not None and self.end < self.start:
            raise ConfigError("the end comes before the start", option="end", value=end)

    def __repr__(self) -> str:
        return f"Window({self.inner!r}, start={self.start!r}, end={self.end!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Window) and (other.inner, other.start, other.end) == (
            self.inner,
            self.start,
            self.end,
        )

    def __hash__(self) -> int:
        return hash((Window, self.inner, self.start, self.end))

    @property
    def tz(self) -> str:
        return self.inner.tz

    def describe(self) -> str:
        text = self.inner.describe()
        if self.start is not None:
            text += f" from {self.start.isoformat(timespec='seconds').replace('+00:00', 'Z')}"
        if self.end is not None:
            text += f" until {self.end.isoformat(timespec='seconds').replace('+00:00', 'Z')}"
        return text

    def next_after(self, dt: datetime) -> datetime:
        if self.start is not None:
            dt = max(dt.astimezone(UTC), self.start - _ONE_MS)
        found = self.inner.next_after(dt)
        return NEVER if self.end is not None and found > self.end else found

    def occurrences(self, start: datetime, end: datetime) -> Iterator[datetime]:
        if self.start is not None:
            start = max(start.astimezone(UTC), self.start - _ONE_MS)
        if self.end is not None:
            end = min(end.astimezone(UTC), self.end)
        if start < end:
            yield from self.inner.occurrences(start, end)


@dataclass(frozen=True, slots=True)
class Upcoming:
    """An occurrence to come: when in UTC, its wall time in the job's zone, and what daylight
    saving time does to it ("" when nothing)."""

    at: datetime
    local: datetime
    note: str


def dst_note(schedule: Schedule, local: datetime) -> str:
    """What daylight saving time does to an occurrence at ``local`` (its wall time in the
    job's zone): moved out of the spring gap, or in the hour the clocks repeat; "" if nothing."""
    if not isinstance(schedule, Cron):
        return ""  # an interval is counted in UTC: the clocks changing does not move it
    if not schedule.matches_wall(local):
        return "moved by DST: its wall time does not exist that day (the clocks go forward)"
    if local.replace(fold=1 - local.fold).utcoffset() != local.utcoffset():
        return "in the hour the clocks go back (repeated)"
    return ""


def upcoming(schedule: Schedule, after: datetime, count: int) -> list[Upcoming]:
    """The next ``count`` occurrences after ``after`` (fewer when the schedule ends)."""
    zone = load_zone(str(schedule.tz))
    found: list[Upcoming] = []
    at = after
    while len(found) < count:
        at = schedule.next_after(at)
        if at is None or at >= NEVER:
            break
        local = at.astimezone(zone)
        found.append(Upcoming(at, local, dst_note(schedule, local)))
    return found
