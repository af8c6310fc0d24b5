"""Celery's schedules read with Celery's meaning: fire times compared with Celery's own."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.schedules import crontab, schedstate, schedule, solar

from cron_bridge import Cron, Every
from cron_bridge.errors import ConfigError
from cron_bridge_celery.schedules import CustomSchedule, SolarSchedule, to_schedule
from tests.conftest import importable

# Every form Celery's crontab accepts, as real projects write them.
CRONTAB_FORMS: list[dict[str, Any]] = [
    {},
    {"minute": 0, "hour": 0},
    {"minute": "*/15"},
    {"minute": "5-55/10", "hour": "*/3"},
    {"minute": 0, "hour": "0, 6, 11, 18"},
    {"minute": "0,30", "hour": "9-17", "day_of_week": "mon-fri"},
    {"minute": 30, "hour": 7, "day_of_week": "monday"},
    {"minute": 0, "hour": 8, "day_of_week": "mon,fri"},
    {"minute": 0, "hour": 22, "day_of_week": "Sunday"},
    {"minute": 0, "hour": 3, "day_of_week": "sat-sun"},
    {"minute": 0, "hour": "22-2"},
    {"minute": [0, 20, 40], "hour": [1, 13]},
    {"minute": {5, 35}, "hour": range(8, 12)},
    {"minute": range(0, 60, 20), "hour": 4, "day_of_week": (1, 3, 5)},
    {"minute": 0, "hour": 0, "day_of_month": 1},
    {"minute": 15, "hour": 2, "day_of_month": "1-7", "day_of_week": "mon"},  # first Monday
    {"minute": 0, "hour": 12, "day_of_month": 10, "day_of_week": "sunday"},  # the AND rule
    {"minute": 0, "hour": 6, "day_of_month": "*/2", "month_of_year": "*/3"},
    {"minute": 0, "hour": 0, "day_of_month": 29, "month_of_year": 2},  # leap days
    {"minute": 45, "hour": 23, "day_of_month": 31},
    {"minute": 0, "hour": 9, "month_of_year": "jan,apr,jul,oct", "day_of_month": 1},
    {"minute": 0, "hour": 5, "month_of_year": "february"},
    {"minute": "*/5", "hour": "9-17", "day_of_week": "1-5", "month_of_year": "6-8"},
    {"minute": "0-59/30", "hour": "0-23/12", "day_of_month": "1-31", "month_of_year": "1-12"},
]
ZONES = ["UTC", "Europe/Warsaw", "America/New_York", "Asia/Kolkata"]
FIRES = 500
YEARS = 30


def celery_times(spec: dict[str, Any], zone: str, start: datetime) -> Iterator[datetime]:
    """Celery's own fire times: ``remaining_estimate(last)`` with the clock at ``last``."""
    app = Celery("twin", set_as_current=False)
    app.conf.timezone = zone
    last = start.astimezone(ZoneInfo(zone))
    schedule_ = crontab(app=app, nowfun=lambda: last, **spec)
    while True:
        later = (last + schedule_.remaining_estimate(last)).astimezone(ZoneInfo(zone))
        if later <= last:
            # Celery can answer "due now" again on a DST day; its beat moves last_run_at to
            # the time it sent, a moment later. Those days are ours anyway (compared apart).
            last += timedelta(seconds=1)
            continue
        last = later
        yield last.astimezone(UTC)


def offset_changes(zone: str, times: list[datetime]) -> set[tuple[int, int, int]]:
    """Local dates of fires whose previous fire was in the other DST offset: Celery's crontab
    can then fire an hour off the written wall time (ours keeps it; DST is ours on purpose)."""
    tz = ZoneInfo(zone)
    days = set()
    for previous, current in itertools.pairwise(times):
        if previous.astimezone(tz).utcoffset() != current.astimezone(tz).utcoffset():
            for shift in (-1, 0, 1):
                local = (current + timedelta(hours=shift)).astimezone(tz)
                days.add((local.year, local.month, local.day))
    return days


def transition_days(zone: str, start: datetime, end: datetime) -> set[tuple[int, int, int]]:
    """Local dates on which the zone's offset changes: DST is ours, on purpose."""
    tz = ZoneInfo(zone)
    days = set()
    day = start
    while day < end:
        if day.astimezone(tz).utcoffset() != (day + timedelta(days=1)).astimezone(tz).utcoffset():
            for offset in (-1, 0, 1, 2):
                local = (day + timedelta(days=offset)).astimezone(tz)
                days.add((local.year, local.month, local.day))
        day += timedelta(days=1)
    return days


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("spec", CRONTAB_FORMS, ids=[repr(s) for s in CRONTAB_FORMS])
def test_crontab_fire_times_match_celerys_own(spec: dict[str, Any], zone: str) -> None:
    """The next 500 fire times (or 30 years' worth) equal Celery's, away from DST changes (on
    transition days, and after a run in the other offset, our DST rules apply on purpose)."""
    app = Celery("proj", set_as_current=False)
    app.conf.timezone = zone
    ours = to_schedule(crontab(app=app, **spec), app_zone=app.timezone)
    assert isinstance(ours, Cron) and ours.tz == zone and not ours.day_or
    start = datetime(2023, 12, 30, 23, 50, tzinfo=UTC)
    horizon = start.replace(year=start.year + YEARS)
    theirs: list[datetime] = []
    for fired in celery_times(spec, zone, start):
        if len(theirs) == FIRES or fired > horizon:
            break
        theirs.append(fired)
    end = theirs[-1]
    mine = list(ours.occurrences(start, end))
    skip = transition_days(zone, start, end + timedelta(days=2))
    skip |= offset_changes(zone, [start, *theirs]) | offset_changes(zone, [start, *mine])

    def kept(times: list[datetime]) -> list[datetime]:
        local = [t.astimezone(ZoneInfo(zone)) for t in times]
        return [t for t in local if (t.year, t.month, t.day) not in skip]

    assert kept(mine) == kept(theirs)
    # UTC and Asia/Kolkata have no DST: there every fire is compared.
    assert len(kept(theirs)) >= (len(theirs) if zone in ("UTC", "Asia/Kolkata") else 8)


def test_the_and_rule_is_celerys_not_crons() -> None:
    """ "The 10th, if it is a Sunday" fires only on Sundays that are the 10th."""
    fired = to_schedule(
        crontab(minute=0, hour=12, day_of_month=10, day_of_week="sunday"), app_zone=UTC
    )
    times = list(
        fired.occurrences(datetime(2026, 1, 1, tzinfo=UTC), datetime(2028, 1, 1, tzinfo=UTC))
    )
    assert [t.date().isoformat() for t in times] == ["2026-05-10", "2027-01-10", "2027-10-10"]


def test_intervals_numbers_and_schedules_are_anchored_to_the_epoch() -> None:
    """timedelta, numbers and plain schedule() entries become epoch-anchored intervals."""
    assert to_schedule(timedelta(seconds=1), app_zone=UTC) == Every("1s")
    assert to_schedule(2.0, app_zone=UTC) == Every("2s")
    assert to_schedule(30, app_zone=UTC) == Every("30s")
    assert to_schedule(schedule(timedelta(minutes=5)), app_zone=UTC) == Every("5m")


def test_a_value_celery_cannot_schedule_is_refused_naming_the_option() -> None:
    """A string is not a schedule for Celery either."""
    with pytest.raises(ConfigError, match="schedule='every 5 minutes'"):
        to_schedule("every 5 minutes", app_zone=UTC)


class business_hours(schedule):
    """A project's own schedule: its interval, but only 09:00-17:00 on weekdays."""

    def is_due(self, last_run_at: datetime) -> schedstate:
        now = self.now()
        if now.weekday() >= 5 or not 9 <= now.hour < 17:
            return schedstate(is_due=False, next=60)
        return super().is_due(last_run_at)


def test_a_custom_schedule_class_runs_by_its_own_is_due_the_same_on_every_replica() -> None:
    """Two replicas that started at different times compute the same occurrences, all within
    the hours the class allows, spaced by its interval."""
    app = Celery("proj", set_as_current=False)
    app.conf.timezone = "UTC"
    first = to_schedule(business_hours(timedelta(minutes=10), app=app), app_zone=UTC)
    second = to_schedule(business_hours(timedelta(minutes=10), app=app), app_zone=UTC)
    assert isinstance(first, CustomSchedule)
    monday = datetime(2026, 11, 30, tzinfo=UTC)
    first.next_after(monday + timedelta(hours=10, minutes=3))  # started mid-morning
    a = list(first.occurrences(monday, monday + timedelta(days=7)))
    b = list(second.occurrences(monday, monday + timedelta(days=7)))
    assert a == b
    assert len(a) == 5 * 48  # 09:00 to 16:50, every 10 minutes, Monday to Friday
    assert all(t.weekday() < 5 and 9 <= t.hour < 17 for t in a)
    assert {b - a for a, b in itertools.pairwise(a) if a.date() == b.date()} == {
        timedelta(minutes=10)
    }


SOLAR_CASES = [
    ("solar_noon", 52.23, 21.01),  # takes no use_center
    ("sunrise", 52.23, 21.01),
    ("sunset", -33.87, 151.21),
    ("dawn_civil", 40.71, -74.0),
    ("dusk_nautical", 64.15, -21.94),
    ("sunrise", 78.22, 15.65),  # Svalbard: no sunrise in the polar night
    ("dusk_astronomical", 78.22, 15.65),  # no astronomical dusk in the summer
    ("dawn_astronomical", -77.85, 166.67),
]


@pytest.mark.parametrize(("event", "lat", "lon"), SOLAR_CASES)
def test_solar_events_match_celerys_own_and_are_never_early(
    event: str, lat: float, lon: float
) -> None:
    """Every event, at places where it skips days: the same event Celery picks, rounded up to
    the millisecond, through a year of starts."""
    importable("ephem")
    ours = to_schedule(solar(event, lat, lon), app_zone=UTC)
    assert isinstance(ours, SolarSchedule)
    theirs = solar(event, lat, lon, app=Celery("twin", set_as_current=False))
    for day in range(0, 365, 7):
        at = datetime(2026, 1, 1, 5, tzinfo=UTC) + timedelta(days=day)
        theirs.nowfun = lambda at=at: at
        event_at = at + theirs.remaining_estimate(at)
        mine = ours.next_after(at)
        assert timedelta(0) <= mine - event_at < timedelta(milliseconds=1), (at, mine, event_at)


class never(schedule):
    """A schedule whose is_due never says due, asking to be checked every second."""

    def is_due(self, last_run_at: datetime) -> schedstate:
        return schedstate(is_due=False, next=1)


def test_a_custom_schedule_that_is_never_due_is_not_armed_and_the_walk_is_bounded() -> None:
    """400 days of one-second checks would be 35 million calls: the walk stops at its budget
    (made small here to keep the test fast)."""
    schedule_ = to_schedule(never(timedelta(seconds=1)), app_zone=UTC)
    assert isinstance(schedule_, CustomSchedule)
    schedule_._MAX_PROBES = 20_000
    assert schedule_.next_after(datetime(2026, 1, 1, tzinfo=UTC)).year == 9999
    assert schedule_._probes <= 20_000 + 86_401
