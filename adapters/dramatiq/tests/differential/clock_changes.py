"""Where the clocks change, for the named DST differences of the differential tests: an
instant that ends a spring gap, a wall time the clocks went back over, a wall time a gap
skipped."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

__all__ = ["gap_end", "gap_walls", "in_gap", "offset", "repeated"]


def offset(at: datetime, zone: ZoneInfo) -> timedelta:
    """The zone's UTC offset at the instant ``at``."""
    found = at.astimezone(zone).utcoffset()
    return found if found is not None else timedelta(0)


def gap_end(at: datetime, zone: ZoneInfo) -> bool:
    """Whether the clocks went forward at the instant ``at`` (the end of a spring gap)."""
    return offset(at - timedelta(seconds=1), zone) < offset(at, zone)


def gap_walls(at: datetime, zone: ZoneInfo) -> Iterator[datetime]:
    """The naive wall times, to the minute, of the spring gap that ends at ``at``."""
    width = offset(at, zone) - offset(at - timedelta(seconds=1), zone)
    end = at.astimezone(zone).replace(tzinfo=None)
    for minutes in range(1, int(width.total_seconds()) // 60 + 1):
        yield end - timedelta(minutes=minutes)


def in_gap(wall: datetime, zone: ZoneInfo) -> bool:
    """Whether the naive wall time does not exist in the zone (a spring gap skipped it)."""
    there = wall.replace(tzinfo=zone).astimezone(ZoneInfo("UTC")).astimezone(zone)
    return there.replace(tzinfo=None) != wall


def repeated(at: datetime, zone: ZoneInfo) -> bool:
    """Whether the wall time of the instant ``at`` exists twice (the clocks went back)."""
    wall = at.astimezone(zone).replace(tzinfo=None)
    first, second = wall.replace(tzinfo=zone, fold=0), wall.replace(tzinfo=zone, fold=1)
    return first.utcoffset() != second.utcoffset()
