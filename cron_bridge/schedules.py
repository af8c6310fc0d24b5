"""Schedules: when a job is due.

``Cron`` reads its fields with croniter and enforces our daylight-saving rules on top, in
the job's zone:

- spring forward: a wall time that does not exist that day fires once, at the first instant
  after the gap;
- fall back: an expression with a fixed hour fires once, in the first pass of the repeated
  hour; one whose hour field covers every hour fires in both passes, since an hour really
  elapsed.

``Every`` counts elapsed time from the Unix epoch, so every replica computes the same
occurrences whatever its start time, and ignores daylight saving.

Every datetime going in must be aware; every datetime coming out is aware UTC.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import math
import os
import re
import threading
import time
from collections import deque
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, runtime_checkable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from cron_bridge.errors import ConfigError

__all__ = ["Cron", "Every", "Schedule", "local_zone_name", "parse_duration"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)

_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

# A fold longer than this (none in tzdata since the 1940s) would be looked at only in part.
_FOLD_WINDOW = timedelta(hours=3)
_MINUTE = timedelta(minutes=1)

_MAX_SECONDS = 100 * 366 * 86400
_RANDOM = re.compile(r"r(\(\d+-\d+\))?(/\d+)?", re.IGNORECASE)
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_PLAIN_SECONDS = re.compile(r"\d{1,12}(?:\.\d{1,9})?")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@runtime_checkable
class Schedule(Protocol):
    """What the beat needs of a schedule."""

    @property
    def tz(self) -> str:
        """The IANA zone the schedule is read in (``UTC`` for intervals)."""

    def next_after(self, dt: datetime) -> datetime:
        """The first occurrence strictly after ``dt``, as an aware UTC datetime."""

    def occurrences(self, start: datetime, end: datetime) -> Iterator[datetime]:
        """Occurrences strictly after ``start`` up to and including ``end``, in order."""

    def describe(self) -> str:
        """A short text for listings, such as ``30 2 * * *`` or ``every 5m``."""


def parse_duration(value: object, *, option: str = "duration") -> timedelta:
    """Read ``"90s"``, ``"5m"``, ``"1h30m"``, ``"250ms"``, a number of seconds (also as text,
    ``"5"``, as a command line gives it) or a timedelta.

    Raises:
        ConfigError: for anything else, naming ``option``.
    """
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ConfigError(
            "expected a duration such as '30s' or a timedelta", option=option, value=value
        )
    seconds: float | None = None
    if isinstance(value, int | float):
        seconds = value
    elif isinstance(value, str) and len(value) <= 100:
        text = value.strip().lower().replace(" ", "")
        if _PLAIN_SECONDS.fullmatch(text):  # "5" on a command line: seconds, as 5 in Python
            seconds = float(text)
        elif text and _DURATION_PART.sub("", text) == "":
            seconds = sum(
                float(number) * _UNIT_SECONDS[unit] for number, unit in _DURATION_PART.findall(text)
            )
    if seconds is not None:
        if not math.isfinite(seconds) or abs(seconds) > _MAX_SECONDS:
            raise ConfigError(
                "expected a finite duration of at most 100 years", option=option, value=value
            )
        return timedelta(seconds=seconds)
    raise ConfigError(
        "expected a duration such as '90s', '5m', '1h' or a timedelta", option=option, value=value
    )


def _aware_utc(dt: datetime) -> datetime:
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError(f"expected an aware datetime, got naive {dt.isoformat()}")
    return dt.astimezone(UTC)


def load_zone(tz: str) -> ZoneInfo:
    """The zone named ``tz``, or ``ConfigError``."""
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise ConfigError("unknown time zone", option="tz", value=tz) from exc


def local_zone_name(*, why: str) -> str:
    """The name of this process's local zone, for a tool whose cron fields are read in local
    time (``rq cron`` from RQ 3, periodiq): ``TZ``, else the zone ``/etc/localtime`` links to,
    else ``UTC`` on a machine whose local time is UTC.

    Args:
        why: who reads local time, for the error (``"rq cron"``).

    Raises:
        ConfigError: the local zone has no name that can be told (a POSIX ``TZ`` string).
    """
    given = os.environ.get("TZ", "").removeprefix(":")
    if given:
        try:
            load_zone(given)
        except ConfigError:
            raise ConfigError(
                f"{why} reads cron fields in local time, and this TZ is not a zone name; set "
                "TZ=Area/City (or UTC)",
                option="TZ",
                value=given,
            ) from None
        return given
    _, found, key = os.path.realpath("/etc/localtime").partition("zoneinfo/")
    if found and key:
        with contextlib.suppress(ConfigError):
            load_zone(key)
            return key
    if time.timezone == 0 and not time.daylight:
        return "UTC"
    raise ConfigError(
        f"{why} reads cron fields in local time, and this machine's zone has no name here; "
        "set TZ=Area/City (or UTC)",
        option="TZ",
        value=time.tzname[0],
    )


class Cron:
    """A 5-field cron expression (or an ``@hourly``-style alias) read in an IANA zone.

    Args:
        expr: the expression.
        tz: the zone its fields are read in.
        day_or: with restricted day-of-month and day-of-week fields, fire on a day that
            matches either (cron's rule, the default) or, when False, only on a day that
            matches both (Celery's ``crontab`` rule).
        seconds: also take croniter's 6-field form, a seconds field after the five
            (``* * * * * */15``: every 15 seconds), for a tool that hands croniter its
            users' strings (``rq cron``); off elsewhere, so a 6-field typo is not read as
            seconds.

    Raises:
        ConfigError: a bad field, an expression that never fires, a random (``R``) field,
            an unknown zone.
    """

    __slots__ = (
        "_every_hour",
        "_fields",
        "_step",
        "_walls",
        "_walls_lock",
        "_zone",
        "day_or",
        "expr",
        "seconds",
        "tz",
    )

    def __init__(
        self, expr: str, *, tz: str = "UTC", day_or: bool = True, seconds: bool = False
    ) -> None:
        if not isinstance(expr, str):
            raise ConfigError("expected a cron expression string", option="cron", value=expr)
        self.expr = expr
        self.tz = tz
        self.day_or = bool(day_or)
        self.seconds = bool(seconds)
        self._zone = load_zone(tz)
        fields = _ALIASES.get(expr.strip().lower(), expr.strip())
        counts = (5, 6) if self.seconds else (5,)
        if len(fields.split()) not in counts:
            shown = " (and seconds)" if self.seconds else ""
            raise ConfigError(
                f"expected {' or '.join(map(str, counts))} fields (minute hour day month "
                f"weekday{shown}) or an alias such as @hourly",
                option="cron",
                value=expr,
            )
        if any(_RANDOM.fullmatch(item) for item in re.split(r"[\s,]+", fields)):
            # croniter draws R again for every iterator: each replica (and RQ at each run)
            # would pick another time, so no two would agree on an occurrence.
            raise ConfigError(
                "a random field (R) is drawn again by every process; write the value",
                option="cron",
                value=expr,
            )
        try:
            # Parsed (and checked to fire) once per expression, then moved with set_current
            # for each look: parsing is half of what a look would cost.
            self._walls, self._walls_lock = _parsed(fields, self.day_or)
        except CroniterError as exc:
            reason = "never fires" if "next date" in str(exc) else f"bad expression ({exc})"
            raise ConfigError(reason, option="cron", value=expr) from exc
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"bad expression ({exc})", option="cron", value=expr) from exc
        self._fields = fields
        self._step = timedelta(seconds=1) if len(fields.split()) == 6 else _MINUTE
        hour_texts = {str(hour) for hour in self._walls.expanded[1]}
        self._every_hour = "*" in hour_texts or hour_texts == {str(h) for h in range(24)}

    def __reduce__(self) -> tuple[Any, ...]:
        return _cron, (self.expr, self.tz, self.day_or, self.seconds)

    def __repr__(self) -> str:
        day_rule = "" if self.day_or else ", day_or=False"
        seconds = ", seconds=True" if self.seconds else ""
        return f"Cron({self.expr!r}, tz={self.tz!r}{day_rule}{seconds})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Cron) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((Cron, *self._key()))

    def _key(self) -> tuple[str, str, bool]:
        return self._fields, self.tz, self.day_or

    def describe(self) -> str:
        return self.expr

    def matches_wall(self, wall: datetime) -> bool:
        """Whether the fields match the wall time ``wall`` (naive, in the job's zone): False
        for an occurrence daylight saving time moved out of the spring gap."""
        # What croniter.match answers (the wall time to its minute, or second for 6 fields),
        # on the parsed fields: croniter.match parses the expression again each call, some
        # forty times what a look costs.
        wall = wall.replace(tzinfo=None, microsecond=0)
        if self._step == _MINUTE:
            wall = wall.replace(second=0)
        with self._walls_lock:
            self._walls.set_current(wall - self._step, force=True)
            return bool(self._walls.get_next(datetime) == wall)

    def next_after(self, dt: datetime) -> datetime:
        after = _aware_utc(dt)
        # Wall times earlier than ``after``'s own can still fire after it when a fold is near:
        # their second pass comes later. Start that far back; the loop discards the rest.
        wall = after.astimezone(self._zone).replace(tzinfo=None) - self._fold_margin(after)
        best: datetime | None = None
        with self._walls_lock:
            self._walls.set_current(wall - self._step, force=True)
            while True:
                instants = self._instants(self._walls.get_next(datetime))
                # The first instant of successive wall times never goes down, so once it
                # passes the best candidate nothing later can beat it.
                if best is not None and instants[0] >= best:
                    return best
                for instant in instants:
                    if instant > after and (best is None or instant < best):
                        best = instant

    def occurrences(self, start: datetime, end: datetime) -> Iterator[datetime]:
        return self._walk(_aware_utc(start), _aware_utc(end))

    def _walk(self, after: datetime, end: datetime) -> Iterator[datetime]:
        """What successive ``next_after`` calls give, in one pass over the wall times: a
        year of minutes costs a third as much. Its own parsed fields, not the shared ones,
        so that a paused iterator holds no lock."""
        wall = after.astimezone(self._zone).replace(tzinfo=None) - self._fold_margin(after)
        walls = croniter(self._fields, wall - self._step, day_or=self.day_or)
        pending: list[datetime] = []  # a heap: near a fold the instants come out of order
        last: datetime | None = None
        while True:
            instants = self._instants(walls.get_next(datetime))
            # The first instant of successive wall times never goes down: nothing later can
            # come before it, so what is pending up to it is in order.
            floor = instants[0]
            while pending and pending[0] <= floor:
                instant = heapq.heappop(pending)
                if instant > end:
                    return
                if last is None or instant > last:  # two wall times may share a gap's end
                    last = instant
                    yield instant
            if floor > end:
                return
            for instant in instants:
                if instant > after:
                    heapq.heappush(pending, instant)

    def _fold_margin(self, at: datetime) -> timedelta:
        before = self._offset(at - _FOLD_WINDOW)
        now = self._offset(at)
        after = self._offset(at + _FOLD_WINDOW)
        return max(timedelta(0), max(before, now) - min(now, after))

    def _offset(self, at: datetime) -> timedelta:
        offset = at.astimezone(self._zone).utcoffset()
        return offset if offset is not None else timedelta(0)

    def _instants(self, wall: datetime) -> list[datetime]:
        """The UTC instants at which the wall time ``wall`` fires, by our DST rules."""
        first = wall.replace(tzinfo=self._zone, fold=0).astimezone(UTC)
        second = wall.replace(tzinfo=self._zone, fold=1).astimezone(UTC)
        if first == second:
            return [first]
        if first.astimezone(self._zone).replace(tzinfo=None) == wall:
            # It exists twice: the clocks went back. Both passes only for an every-hour field.
            return [first, second] if self._every_hour else [first]
        # It does not exist: the clocks went forward. Fire at the end of the gap, which lies
        # between the wall time read with the offset after (second) and before (first).
        return [self._gap_end(second, first)]

    def _gap_end(self, low: datetime, high: datetime) -> datetime:
        target = self._offset(high)
        while high - low > timedelta(seconds=1):
            middle = low + (high - low) / 2
            if self._offset(middle) == target:
                high = middle
            else:
                low = middle
        return high.replace(microsecond=0)


@functools.lru_cache(maxsize=4096)
def _parsed(fields: str, day_or: bool) -> tuple[croniter, threading.Lock]:
    """Parsed fields and the lock for moving them, shared by the schedules with the same
    expression (a croniter is about a kilobyte; 100,000 daily jobs have at most 1,440
    distinct ``M H * * *``). A schedule keeps what it was given if the entry is evicted.

    Raises what croniter raises for a bad expression, or for one that never fires (the first
    look, from 2000-01-01); nothing is kept for those."""
    walls = croniter(fields, datetime(2000, 1, 1), day_or=day_or)
    walls.get_next(datetime)
    return walls, threading.Lock()


def _cron(expr: str, tz: str, day_or: bool, seconds: bool = False) -> Cron:
    """Rebuilds a pickled ``Cron`` (its parsed fields and their lock stay behind)."""
    return Cron(expr, tz=tz, day_or=day_or, seconds=seconds)


class Every:
    """An interval counted from the Unix epoch, plus an optional offset.

    Occurrences fall at ``epoch + k * interval + offset`` for whole ``k``, so every replica
    agrees on them whatever its start time.

    Args:
        interval: ``"90s"``, ``"5m"``, ``"1h"``, ``"1d"``, a number of seconds or a timedelta.
        offset: the shift from the epoch multiples, shorter than ``interval``.

    Raises:
        ConfigError: an interval that is not a positive duration of at least 1 ms, or an
            offset outside ``[0, interval)``.
    """

    __slots__ = ("_interval_ms", "_offset_ms", "interval", "offset")

    tz = "UTC"

    def __init__(self, interval: str | float | timedelta, *, offset: str | float | timedelta = 0):
        self.interval = parse_duration(interval, option="every")
        self.offset = parse_duration(offset, option="offset")
        self._interval_ms = self.interval // _ONE_MS
        self._offset_ms = self.offset // _ONE_MS
        if self._interval_ms < 1:
            raise ConfigError("the interval must be at least 1ms", option="every", value=interval)
        if not 0 <= self._offset_ms < self._interval_ms:
            raise ConfigError(
                "the offset must be at least 0 and shorter than the interval",
                option="offset",
                value=offset,
            )

    def __repr__(self) -> str:
        return f"Every({_format_ms(self._interval_ms)!r}, offset={_format_ms(self._offset_ms)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Every) and (self._interval_ms, self._offset_ms) == (
            other._interval_ms,
            other._offset_ms,
        )

    def __hash__(self) -> int:
        return hash((Every, self._interval_ms, self._offset_ms))

    def describe(self) -> str:
        text = f"every {_format_ms(self._interval_ms)}"
        return f"{text} +{_format_ms(self._offset_ms)}" if self._offset_ms else text

    def next_after(self, dt: datetime) -> datetime:
        ms = (_aware_utc(dt) - EPOCH) // _ONE_MS
        k = (ms - self._offset_ms) // self._interval_ms + 1
        return EPOCH + (k * self._interval_ms + self._offset_ms) * _ONE_MS

    def occurrences(self, start: datetime, end: datetime) -> Iterator[datetime]:
        return _iterate(self, start, end)


def _iterate(schedule: Schedule, start: datetime, end: datetime) -> Iterator[datetime]:
    end = _aware_utc(end)
    current = schedule.next_after(start)
    while current <= end:
        yield current
        current = schedule.next_after(current)


def _format_ms(ms: int) -> str:
    if ms == 0:
        return "0s"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


_LOOK_BACK = (
    timedelta(minutes=2),
    timedelta(hours=2),
    timedelta(days=2),
    timedelta(days=33),
    timedelta(days=400),
    timedelta(days=5 * 366),
    timedelta(days=30 * 366),
)


def latest_occurrences(
    schedule: Schedule, start: datetime, end: datetime, n: int
) -> list[datetime]:
    """The latest ``n`` occurrences in ``(start, end]``, oldest first, reading back from
    ``end`` a span four times longer each time (from a minute) until it holds ``n`` or reaches
    ``start``: a frequent job that stopped long ago is not walked back to its first run."""
    start, end = _aware_utc(start), _aware_utc(end)
    span = timedelta(minutes=1)
    while True:
        since = max(start, end - span)
        found = deque(schedule.occurrences(since, end), maxlen=n)
        if len(found) >= n or since == start:
            return list(found)
        span *= 4


def previous_occurrence(schedule: Schedule, at: datetime) -> datetime | None:
    """The latest occurrence at or before ``at``, or None when there is none in 30 years."""
    at = _aware_utc(at)
    for span in _LOOK_BACK:
        latest = None
        for latest in schedule.occurrences(at - span, at):  # noqa: B007 - keep the last one
            pass
        if latest is not None:
            return latest
    return None
