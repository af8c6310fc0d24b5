"""Celery's schedules as cron-bridge schedules, each with Celery's own meaning.

- ``crontab``: read from the sets Celery itself expanded the fields to (so every form Celery
  accepts works: names, lists, sets, ``range`` objects, steps, integers), with Celery's day
  rule: a day must match day-of-month AND day-of-week. Our DST rules apply on top.
- ``timedelta``, numbers and ``schedule``: intervals anchored to the Unix epoch.
- ``solar``: the event Celery would pick, rounded up to the millisecond (never early); days
  on which the event does not happen (polar night, midnight sun) are skipped, as Celery does.
- any other schedule class (or a subclass that brings its own ``is_due``): walked with its own
  ``is_due`` on a fake clock from a start every replica agrees on, see ``CustomSchedule``.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from celery.schedules import BaseSchedule, crontab, schedule, solar

from cron_bridge.adapters import ConfigError, Cron, Every, Schedule, load_zone, override

__all__ = ["CustomSchedule", "SolarSchedule", "crontab_fields", "crontab_in", "to_schedule"]

_ONE_DAY = timedelta(days=1)
_ONE_MS = timedelta(milliseconds=1)
_FIELD_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
_SEARCH_DAYS = 2 * 366  # every solar event happens within a year, even at the poles


def _zone_name(zone: tzinfo | None) -> str:
    name = getattr(zone, "key", None) or getattr(zone, "zone", None) or "UTC"
    load_zone(str(name))
    return str(name)


def _compact(values: Iterable[int], low: int, high: int) -> str:
    """``0,1,2,5`` as ``0-2,5``; the whole range as ``*``."""
    ordered = sorted(set(values))
    if ordered == list(range(low, high + 1)):
        return "*"
    parts: list[str] = []
    start = previous = ordered[0]
    for value in [*ordered[1:], None]:
        if value is not None and value == previous + 1:
            previous = value
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if value is not None:
            start = previous = value
    return ",".join(parts)


def crontab_fields(value: crontab) -> str:
    """The five cron fields of a Celery ``crontab``, from the sets Celery expanded."""
    expanded = (
        value.minute,
        value.hour,
        value.day_of_month,
        value.month_of_year,
        value.day_of_week,
    )
    return " ".join(
        _compact(field, low, high)
        for field, (low, high) in zip(expanded, _FIELD_RANGES, strict=True)
    )


def _overrides(value: object, base: type, names: tuple[str, ...]) -> bool:
    return any(getattr(type(value), name, None) is not getattr(base, name) for name in names)


def to_schedule(value: Any, *, app_zone: tzinfo | None) -> Schedule:
    """The cron-bridge schedule for a ``beat_schedule`` entry's ``schedule`` value.

    Raises:
        ConfigError: a value Celery itself cannot schedule either.
    """
    if isinstance(value, timedelta | int | float) and not isinstance(value, bool):
        return Every(value)
    if isinstance(value, crontab) and not _overrides(
        value, crontab, ("is_due", "remaining_estimate", "remaining_delta")
    ):
        return crontab_in(value, _schedule_zone(value, app_zone))
    if isinstance(value, solar) and not _overrides(value, solar, ("is_due", "remaining_estimate")):
        return SolarSchedule(value)
    if isinstance(value, schedule) and not _overrides(
        value, schedule, ("is_due", "remaining_estimate")
    ):
        return Every(value.run_every)
    if isinstance(value, BaseSchedule) or callable(getattr(value, "is_due", None)):
        return CustomSchedule(value, zone=app_zone)
    raise ConfigError(
        "expected a crontab, solar, schedule, timedelta, number of seconds or a schedule class "
        "with is_due()",
        option="schedule",
        value=value,
    )


def crontab_in(value: crontab, zone: tzinfo | str | None) -> Cron:
    """A Celery ``crontab`` read in ``zone`` (a zone or its name; UTC when None), with
    Celery's day rule: a day must match day-of-month AND day-of-week.

    Raises:
        ConfigError: a zone the zone database does not know.
    """
    name = zone if isinstance(zone, str) else _zone_name(zone)
    return Cron(crontab_fields(value), tz=name, day_or=False)


def _schedule_zone(value: BaseSchedule, app_zone: tzinfo | None) -> tzinfo | None:
    try:
        zone: tzinfo | None = value.tz  # the schedule's app's zone, as Celery reads it
    except Exception:  # noqa: BLE001 - no app bound yet: the beat's app decides
        zone = app_zone
    return zone or app_zone


class SolarSchedule:
    """A Celery ``solar`` schedule: the event's next time, as Celery computes it.

    Raises:
        ConfigError: at construction, when the event never happens at that place.
    """

    tz = "UTC"

    def __init__(self, source: solar) -> None:
        self.source = source
        self._lock = threading.Lock()
        self.next_after(datetime.now(UTC))

    @override
    def __eq__(self, other: object) -> bool:
        return isinstance(other, SolarSchedule) and self._key() == other._key()

    @override
    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[str, float, float]:
        return (self.source.event, float(self.source.lat), float(self.source.lon))

    def describe(self) -> str:
        return f"solar {self.source.event} {self.source.lat},{self.source.lon}"

    def next_after(self, dt: datetime) -> datetime:
        ephem = self.source.ephem
        sun = ephem.Sun()
        # Only the events Celery computes from the sun's centre take use_center.
        options = {"use_center": True} if self.source.use_center else {}
        start = ephem.Date(dt.astimezone(UTC).replace(tzinfo=None))
        with self._lock:  # the observer is shared, and ephem keeps state on it
            observer = self.source.cal
            find = getattr(observer, self.source.method)
            for _ in range(_SEARCH_DAYS):
                try:
                    found = find(sun, start=start, **options)
                    break
                except ephem.CircumpolarError:
                    # Not today (polar night, midnight sun): look again after the next
                    # anti-transit, as Celery does.
                    start = observer.next_antitransit(sun, start=start)
            else:
                raise ConfigError(
                    "the event never happens at this place",
                    option="schedule",
                    value=self.describe(),
                )
        event: datetime = found.datetime().replace(tzinfo=UTC)
        # Occurrence ids carry milliseconds: round up, so nothing is sent before the event.
        rounded = event.replace(microsecond=event.microsecond // 1000 * 1000)
        return rounded if rounded == event else rounded + _ONE_MS

    def occurrences(self, start: datetime, end: datetime) -> Iterator[datetime]:
        current = self.next_after(start)
        while current <= end:
            yield current
            current = self.next_after(current)


class CustomSchedule:
    """A schedule class of the project's own, run by its own ``is_due``.

    Every replica must agree on the occurrences without talking to the others, so the
    schedule is walked on a fake clock (through ``nowfun``, the clock Celery's schedules read
    with ``self.now()``): starting with ``last_run_at`` at 00:00 UTC, the clock moves on by the
    ``next`` seconds ``is_due`` asks for (at least 1 s) until ``is_due`` says due; that instant
    is an occurrence and the next ``last_run_at``. Each UTC day starts again from its midnight,
    so a replica started at any time computes the same occurrences. Walks are bounded: a
    schedule that is not due within 400 days, or within two million calls of ``is_due``, is
    not armed.

    A schedule that reads the wall clock itself instead of ``self.now()`` cannot be agreed on
    and is not supported.
    """

    tz = "UTC"
    _NEVER = datetime(9999, 12, 31, tzinfo=UTC)
    _MAX_DAYS = 400
    _MAX_PROBES = 2_000_000

    def __init__(self, source: Any, *, zone: tzinfo | None) -> None:
        self.source = source
        self._zone = zone or UTC
        self._lock = threading.Lock()
        self._days: dict[datetime, list[datetime]] = {}
        self._probes = 0

    def describe(self) -> str:
        return f"{type(self.source).__name__} {self.source!r}"[:120]

    def next_after(self, dt: datetime) -> datetime:
        dt = dt.astimezone(UTC)
        day = dt.replace(hour=0, minute=0, second=0, microsecond=0)
        self._probes = 0
        for _ in range(self._MAX_DAYS):
            if self._probes > self._MAX_PROBES:
                break
            times = self._day(day)
            index = bisect.bisect_right(times, dt)
            if index < len(times):
                return times[index]
            day += _ONE_DAY
        return self._NEVER

    def occurrences(self, start: datetime, end: datetime) -> Iterator[datetime]:
        current = self.next_after(start)
        while current <= end:
            yield current
            current = self.next_after(current)

    def _day(self, day: datetime) -> list[datetime]:
        """The occurrences in ``(day, day + 1 day]``: a walk from ``last_run_at`` = ``day``."""
        with self._lock:
            found = self._days.get(day)
            if found is None:
                found = self._walk(day, day + _ONE_DAY)
                self._days = {d: t for d, t in self._days.items() if abs(d - day) <= _ONE_DAY}
                self._days[day] = found
            return found

    def _walk(self, start: datetime, end: datetime) -> list[datetime]:
        times: list[datetime] = []
        last = now = start
        saved = getattr(self.source, "nowfun", None)
        self.source.nowfun = lambda: now.astimezone(self._zone)
        try:
            while now <= end:
                self._probes += 1
                due, wait = self.source.is_due(last.astimezone(self._zone))
                if due and now > last:
                    times.append(now)
                    last = now
                step = timedelta(seconds=max(float(wait or 0), 1.0))
                now = _ceil_second(now + step)
        finally:
            self.source.nowfun = saved
        return [t for t in times if t <= end]


def _ceil_second(dt: datetime) -> datetime:
    whole = dt.replace(microsecond=0)
    return whole if whole == dt else whole + timedelta(seconds=1)
