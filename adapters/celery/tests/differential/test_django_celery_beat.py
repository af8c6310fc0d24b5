"""django-celery-beat's rows, as ``-S cron_bridge_django`` reads them, against the schedule
objects django-celery-beat's own models build (``row.schedule``), walked as its scheduler walks
them (``remaining_estimate`` with the clock at the last run).

Django runs in this process on a SQLite file with django-celery-beat's migrations applied
(the fixtures of adapters/celery/tests/test_django_rows.py); the rows are real rows. The only
allowed differences are those docs/migrating.md's "Each schedule, each field" table names, each
a predicate below, compared with its documented rule.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from celery import Celery
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from adapters.celery.tests.differential.test_celery import (
    DAYS,
    START,
    ZONES,
    bounded,
    celery_fires,
    compare,
    compare_solar,
    crontab_specs,
    text_field,
)
from adapters.celery.tests.test_django_rows import app, crontab_row, db, interval, task
from cron_bridge.windows import At
from cron_bridge_celery.django_rows import BadRow, row_job

__all__ = ["app", "db"]  # the fixtures, shared with adapters/celery/tests/test_django_rows.py

NAMED_DIFFERENCES: dict[str, str] = {
    "django.dst-transition-day": (
        "On the local day a row's zone changes offset, a crontab row follows our DST rules "
        "(as celery.dst-transition-day)."
    ),
    "django.dst-stale-offset": (
        "The first run of a crontab row after an offset change is at the wall time written, "
        "where django-celery-beat reads it in the previous run's offset."
    ),
    "django.interval-epoch": (
        "An interval row without a start_time runs on multiples of its period since the Unix "
        "epoch, not a period after its last run (first: its last save plus a period)."
    ),
    "django.crontab-start-time": (
        "A crontab row with a start_time that never ran first runs at its first crontab time "
        "after start_time; DatabaseScheduler also sends it once at start_time itself."
    ),
    "django.solar-milliseconds": (
        "A solar row runs at Celery's event time rounded up to the millisecond."
    ),
    "django.solar-offset-change": (
        "A solar row's first event after the app's timezone changes offset runs at the event, "
        "where django-celery-beat sends it off by the change (as celery.solar-offset-change)."
    ),
    # Not fire times; each is tested where it lives (../test_django_rows.py, the e2e).
    "django.clocked-late": (
        "A clocked row whose time passed runs at once at its last save, late rather than never."
    ),
    "django.one-off-after-save": (
        "A one_off row on a non-clocked schedule runs at its first time after its last save."
    ),
    "django.one-off-counts": (
        "After a one-off ran the row is disabled with total_run_count 1, not reset to 0."
    ),
    "django.expires-kept-enabled": "A row past its expires is not run but stays enabled.",
    "django.missed-at-start": "A row's occurrences while no beat ran are recorded missed.",
}

ROW_ZONES = [*ZONES, "Asia/Kolkata"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(spec=crontab_specs(text_field), zone=st.sampled_from(ROW_ZONES))
def test_a_crontab_row_fires_when_django_celery_beat_fires_it(
    db: Path, app: Celery, spec: dict[str, str], zone: str
) -> None:
    """A generated crontab row (text fields, as the admin saves them) in its own timezone."""
    try:
        row = task("generated", crontab=crontab_row(zone, **spec))
        theirs_schedule = row.schedule  # django-celery-beat's TzAwareCrontab
    except ValueError:
        assume(False)  # the row's own schedule refuses it too
        raise
    assume(bounded(theirs_schedule))
    try:
        ours = row_job(row, app)
    except BadRow as exc:
        raise AssertionError(f"refused a row django-celery-beat runs: {exc}") from None
    assert ours is not None
    tz = ZoneInfo(zone)
    end = START + timedelta(days=DAYS)
    theirs = celery_fires(theirs_schedule, tz, START, end)
    compare(theirs, list(ours.job.schedule.occurrences(START, end)), tz, START, end)


PERIODS = st.sampled_from(["seconds", "minutes", "hours", "days"])


@settings(max_examples=30, deadline=None)
@given(every=st.integers(1, 90), period=PERIODS, offset=st.integers(0, 10**6))
def test_an_interval_row_with_a_start_time_fires_when_django_celery_beat_fires_it(
    db: Path, app: Celery, every: int, period: str, offset: int
) -> None:
    """DatabaseScheduler sends an interval row at its start_time, then a period after each
    run; ours are the same times."""
    start_time = START + timedelta(seconds=offset, microseconds=offset % 1000 * 1000)
    row = task("interval", interval=interval(every, period), start_time=start_time)
    ours = row_job(row, app)
    assert ours is not None
    length = timedelta(**{period: every})
    end = start_time + min(40 * length, timedelta(days=DAYS))
    # At start_time the row is due (its last_run_at is set 30 years back), then every period.
    theirs = [start_time, *celery_fires(row.schedule, UTC, start_time, end)]
    assert list(ours.job.schedule.occurrences(start_time - timedelta(seconds=1), end)) == theirs


@settings(max_examples=20, deadline=None)
@given(every=st.integers(1, 90), period=PERIODS)
def test_an_interval_row_keeps_its_period_on_epoch_multiples(
    db: Path, app: Celery, every: int, period: str
) -> None:
    """``django.interval-epoch``: without a start_time, django-celery-beat counts from the last
    run; ours keeps the period, on multiples of it since the Unix epoch."""
    row = task("interval", interval=interval(every, period))
    ours = row_job(row, app)
    assert ours is not None
    length = timedelta(**{period: every})
    end = START + 20 * length
    mine = list(ours.job.schedule.occurrences(START, end))
    theirs = celery_fires(row.schedule, UTC, START, end)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert all((t - epoch) % length == timedelta(0) for t in mine)
    gaps = {b - a for a, b in itertools.pairwise(mine)} | {
        b - a for a, b in itertools.pairwise(theirs)
    }
    assert gaps == {length}


def test_a_crontab_row_with_a_start_time_runs_from_it(db: Path, app: Celery) -> None:
    """``django.crontab-start-time``: django-celery-beat's entry is due at start_time itself
    (its last_run_at is 30 years back), then at the crontab's times; ours starts with the
    crontab's first time after start_time, and the same times follow."""
    from django_celery_beat.schedulers import ModelEntry

    start_time = datetime(2026, 5, 1, 9, 7, tzinfo=UTC)
    row = task(
        "cron start",
        crontab=crontab_row("Europe/Warsaw", minute="0", hour="12"),
        start_time=start_time,
    )
    entry = ModelEntry(row, app=app)
    schedule = row.schedule
    schedule.nowfun = lambda: start_time.astimezone(schedule.tz)
    assert schedule.is_due(entry.last_run_at).is_due  # the send at start_time itself
    ours = row_job(row, app)
    assert ours is not None
    end = start_time + timedelta(days=30)
    theirs = celery_fires(schedule, ZoneInfo("Europe/Warsaw"), start_time, end)
    assert list(ours.job.schedule.occurrences(start_time - timedelta(days=1), end)) == theirs


@settings(max_examples=10, deadline=None)
@given(
    event=st.sampled_from(["sunrise", "sunset", "solar_noon", "dawn_civil", "dusk_astronomical"]),
    lat=st.floats(-65, 65).map(lambda x: round(x, 3)),
    lon=st.floats(-180, 180).map(lambda x: round(x, 3)),
)
def test_a_solar_row_fires_when_django_celery_beat_fires_it(
    db: Path, app: Celery, event: str, lat: float, lon: float
) -> None:
    """``django.solar-milliseconds``, ``django.solar-offset-change``: the row's own solar
    schedule's event times, rounded up, in the app's zone."""
    from django_celery_beat.models import SolarSchedule

    solar_row = SolarSchedule.objects.get_or_create(event=event, latitude=lat, longitude=lon)[0]
    row = task("solar", solar=solar_row)
    ours = row_job(row, app)
    assert ours is not None
    end = START + timedelta(days=DAYS)
    # DatabaseScheduler hands last_run_at over in the app's zone.
    zone = ZoneInfo(str(app.timezone))
    theirs = celery_fires(row.schedule, zone, START, end)
    assert theirs
    compare_solar(theirs, list(ours.job.schedule.occurrences(START, end)), zone, end)


@settings(max_examples=20, deadline=None)
@given(ahead=st.integers(30, 10**7), micro=st.integers(0, 999_999))
def test_a_clocked_row_fires_at_its_time(db: Path, app: Celery, ahead: int, micro: int) -> None:
    """A clocked one-off row ahead of now: django-celery-beat's ``clocked`` is due at its time,
    ours is one occurrence then. At least 30 s ahead: on a loaded machine a row 1 s ahead was
    saved after its time, and a clocked row saved late fires at once (its save time), which
    is another case."""
    from django_celery_beat.models import ClockedSchedule

    when = datetime.now(UTC).replace(microsecond=micro) + timedelta(seconds=ahead)
    row = task("clocked", clocked=ClockedSchedule.objects.create(clocked_time=when), one_off=True)
    ours = row_job(row, app)
    assert ours is not None
    schedule = row.schedule
    schedule.nowfun = lambda: when - timedelta(microseconds=1)
    assert not schedule.is_due(None).is_due
    schedule.nowfun = lambda: when
    assert schedule.is_due(None).is_due
    assert ours.job.schedule == At(when)
