"""django-celery-beat's rows as cluster jobs, against django-celery-beat's own reading of them.

Django runs in this process on a SQLite file of the module's own (django-celery-beat's
migrations applied); the rows are real rows.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import islice
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery import Celery

from adapters.celery.tests.test_celery_schedules import offset_changes, transition_days
from cron_bridge.windows import At
from cron_bridge_celery.django_beat import Ledger, django_store_url
from cron_bridge_celery.django_rows import BadRow, Row, row_job

START = datetime(2026, 3, 1, 0, 0, 30, tzinfo=UTC)  # a DST change in the window, for most zones


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    import django
    from django.conf import settings
    from django.core.management import call_command

    path = tmp_path_factory.mktemp("django") / "db.sqlite3"
    if not settings.configured:
        settings.configure(
            INSTALLED_APPS=["django.contrib.contenttypes", "django_celery_beat"],
            DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(path)}},
            USE_TZ=True,
            TIME_ZONE="Europe/Warsaw",
            DEFAULT_AUTO_FIELD="django.db.models.AutoField",
        )
        django.setup()
    call_command("migrate", verbosity=0)
    yield Path(settings.DATABASES["default"]["NAME"])


@pytest.fixture(scope="module")
def app() -> Celery:
    app = Celery("rows", set_as_current=False)
    app.conf.timezone = "Europe/Warsaw"

    @app.task(name="proj.report", shared=False)
    def report(*args: Any, **kwargs: Any) -> None: ...

    return app


def task(name: str, **fields: Any) -> Any:
    """A saved row (as the admin saves it); ``schedule`` builds its schedule row."""
    from django_celery_beat.models import PeriodicTask

    fields.setdefault("task", "proj.report")
    PeriodicTask.objects.filter(name=name).delete()
    row = PeriodicTask(name=name, **fields)
    row.save()
    return PeriodicTask.objects.select_related("interval", "crontab", "solar", "clocked").get(
        pk=row.pk
    )


def interval(every: int, period: str = "seconds") -> Any:
    from django_celery_beat.models import IntervalSchedule

    return IntervalSchedule.objects.get_or_create(every=every, period=period)[0]


def crontab_row(tz: str, **fields: str) -> Any:
    from django_celery_beat.models import CrontabSchedule

    return CrontabSchedule.objects.create(timezone=tz, **fields)


def times(row: Row, start: datetime, count: int) -> list[datetime]:
    found, at = [], start
    for _ in range(count):
        at = row.job.schedule.next_after(at)
        found.append(at)
    return found


# The crontab rows projects keep, as the admin stores them: text fields.
CRONTAB_ROWS: list[dict[str, str]] = [
    {"minute": "*/15"},
    {"minute": "0", "hour": "4"},
    {"minute": "0,30", "hour": "9-17", "day_of_week": "mon-fri"},
    {"minute": "30", "hour": "7", "day_of_week": "1"},
    {"minute": "0", "hour": "0, 6, 11, 18"},
    {"minute": "0", "hour": "2", "day_of_month": "1", "month_of_year": "jan,apr,jul,oct"},
    {"minute": "15", "hour": "2", "day_of_month": "1-7", "day_of_week": "mon"},
    {"minute": "0", "hour": "12", "day_of_month": "10", "day_of_week": "sunday"},
    {"minute": "5-55/10", "hour": "*/3"},
    {"minute": "0", "hour": "2,3"},  # the DST hours
]
ZONES = ["UTC", "Europe/Warsaw", "America/New_York", "Asia/Kolkata"]


def celery_times(schedule: Any, start: datetime) -> Iterator[datetime]:
    """django-celery-beat's own times: its ``TzAwareCrontab`` asked, with the clock at the last
    run, how long until the next (as its scheduler does after each run)."""
    last = start.astimezone(schedule.tz)
    schedule.nowfun = lambda: last
    while True:
        later = (last + schedule.remaining_estimate(last)).astimezone(schedule.tz)
        if later <= last:  # due again at once on a DST day: its beat moves on a moment later
            last += timedelta(seconds=1)
            continue
        last = later
        yield last.astimezone(UTC)


@pytest.mark.parametrize("fields", CRONTAB_ROWS, ids=lambda f: " ".join(f.values()))
@pytest.mark.parametrize("zone", ZONES)
def test_crontab_rows_fire_when_django_celery_beat_says(
    db: Path, app: Celery, fields: dict[str, str], zone: str
) -> None:
    """Each row's times in its own zone, compared with django-celery-beat's TzAwareCrontab
    over 300 fires, away from DST changes (on transition days, and after a run in the other
    offset, our DST rules apply on purpose, as for beat_schedule)."""
    row = task("cron", crontab=crontab_row(zone, **fields))
    ours = row_job(row, app)
    assert ours is not None
    theirs = list(islice(celery_times(row.crontab.schedule, START), 300))
    end = theirs[-1]
    mine = list(ours.job.schedule.occurrences(START, end))
    skip = transition_days(zone, START, end + timedelta(days=2))
    skip |= offset_changes(zone, [START, *theirs]) | offset_changes(zone, [START, *mine])

    def kept(found: list[datetime]) -> list[datetime]:
        return [t for t in found if _day(t, zone) not in skip]

    assert kept(mine) == kept(theirs)
    assert len(kept(theirs)) >= (len(theirs) if zone in ("UTC", "Asia/Kolkata") else 8)


def _day(at: datetime, zone: str) -> tuple[int, int, int]:
    local = at.astimezone(ZoneInfo(zone))
    return (local.year, local.month, local.day)


def test_an_interval_counts_from_start_time_like_database_scheduler(db: Path, app: Celery) -> None:
    """DatabaseScheduler runs an interval row at its start_time, then every period after
    it; without a start time the period counts from the Unix epoch on every replica."""
    start = datetime(2026, 5, 1, 9, 0, 7, tzinfo=UTC)
    row = row_job(task("every 10m", interval=interval(10, "minutes"), start_time=start), app)
    assert row is not None
    assert times(row, start - timedelta(hours=1), 3) == [
        start,
        start + timedelta(minutes=10),
        start + timedelta(minutes=20),
    ]
    plain = row_job(task("every 90s", interval=interval(90)), app)
    assert plain is not None
    assert times(plain, START, 2) == [START + timedelta(seconds=60), START + timedelta(seconds=150)]


def test_the_entry_sent_is_database_schedulers_own(db: Path, app: Celery) -> None:
    """The same rows read by DatabaseScheduler and by us: the same task, args, kwargs and
    options (queue, exchange, routing key, priority, headers, expires) for each."""
    from django_celery_beat.schedulers import DatabaseScheduler

    task(
        "full",
        interval=interval(5),
        args=json.dumps([1, "two"]),
        kwargs=json.dumps({"x": {"y": [1]}}),
        queue="reports",
        exchange="ex",
        routing_key="rk",
        priority=7,
        headers=json.dumps({"team": "ops"}),
        expire_seconds=30,
        description="all the fields",
    )
    task("expires", interval=interval(5), expires=datetime(2099, 1, 1, tzinfo=UTC))
    theirs = DatabaseScheduler(app=app, lazy=True).all_as_schedule()
    for name in ("full", "expires"):
        from django_celery_beat.models import PeriodicTask

        ours = row_job(PeriodicTask.objects.get(name=name), app)
        assert ours is not None
        for field in ("task", "args", "kwargs", "options"):
            assert getattr(ours.entry, field) == getattr(theirs[name], field), (name, field)
    assert theirs["full"].options["headers"] == {"team": "ops", "periodic_task_name": "full"}
    assert theirs["full"].options["expires"] == 30


def test_one_offs_run_once_never_before_the_row_was_saved(db: Path, app: Celery) -> None:
    """A clocked row: at its time, or at once (its save time) when that has passed; a one-off
    interval: its first time after the save. Both run late rather than never."""
    from django_celery_beat.models import ClockedSchedule

    later = datetime.now(UTC) + timedelta(hours=1)
    clocked = task(
        "later", clocked=ClockedSchedule.objects.create(clocked_time=later), one_off=True
    )
    row = row_job(clocked, app)
    assert row is not None and row.one_off and row.job.misfire == "run-once"
    assert row.job.schedule == At(later) and row.since == At(later).when - timedelta(milliseconds=1)
    past = datetime.now(UTC) - timedelta(days=2)
    due = task("due", clocked=ClockedSchedule.objects.create(clocked_time=past), one_off=True)
    row = row_job(due, app)
    assert row is not None
    assert row.job.schedule == At(due.date_changed)
    once = task("once", interval=interval(10), one_off=True)
    row = row_job(once, app)
    assert row is not None and isinstance(row.job.schedule, At)
    when = row.job.schedule.when
    assert when > once.date_changed and when.timestamp() % 10 == 0


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"task": "proj.nope"}, "task 'proj.nope' is not registered"),
        ({"args": "[1,"}, "args is not JSON"),
        ({"args": '{"a": 1}'}, "args must be a JSON array"),
        ({"kwargs": "[1]"}, "kwargs must be a JSON object"),
        ({"headers": "nope"}, "headers is not JSON"),
        ({"interval": None}, "no schedule"),
    ],
)
def test_bad_rows_say_why(db: Path, app: Celery, fields: dict[str, Any], reason: str) -> None:
    from django_celery_beat.models import PeriodicTask

    row = task("bad", interval=interval(5))
    PeriodicTask.objects.filter(pk=row.pk).update(**fields)
    with pytest.raises(BadRow, match=reason):
        row_job(PeriodicTask.objects.get(pk=row.pk), app)


def test_a_crontab_field_celery_refuses_is_a_bad_row(db: Path, app: Celery) -> None:
    row = task("bad cron", crontab=crontab_row("UTC", minute="61"))
    with pytest.raises(BadRow, match="crontab"):
        row_job(row, app)


def test_a_row_past_its_expiry_has_nothing_to_run(db: Path, app: Celery) -> None:
    gone = task("gone", interval=interval(5), expires=datetime.now(UTC) - timedelta(seconds=1))
    assert row_job(gone, app) is None


def test_the_ledger_counts_once_disables_one_offs_and_waits_out_an_outage(
    db: Path, app: Celery
) -> None:
    """Each noted send adds one to total_run_count; a one-off is disabled and the change
    marker moves; while the table cannot be written the counts wait, then are written."""
    from django.db import connection
    from django_celery_beat.models import PeriodicTask, PeriodicTasks

    plain = row_job(task("counted", interval=interval(5)), app)
    one_off = row_job(task("one", interval=interval(5), one_off=True), app)
    assert plain is not None and one_off is not None
    ledger = Ledger()
    marker = PeriodicTasks.last_change()
    ledger.note(plain)
    ledger.note(plain)
    ledger.flush()
    assert PeriodicTask.objects.get(name="counted").total_run_count == 2
    assert PeriodicTasks.last_change() == marker, "bookkeeping is not a schedule change"
    connection.close()
    with sqlite3.connect(db) as other:  # the table is gone for a while: a real failure
        other.execute("ALTER TABLE django_celery_beat_periodictask RENAME TO hidden")
    ledger.note(one_off)
    ledger.note(plain)
    ledger.flush()
    connection.close()
    with sqlite3.connect(db) as other:
        other.execute("ALTER TABLE hidden RENAME TO django_celery_beat_periodictask")
    ledger.flush()
    counted, one = PeriodicTask.objects.get(name="counted"), PeriodicTask.objects.get(name="one")
    assert counted.total_run_count == 3 and one.total_run_count == 1
    assert not one.enabled and one.last_run_at is not None
    assert PeriodicTasks.last_change() != marker


@pytest.mark.parametrize(
    ("db_settings", "url"),
    [
        (
            {"ENGINE": "django.db.backends.sqlite3", "NAME": "/srv/app/db.sqlite3"},
            "sqlite:////srv/app/db.sqlite3",
        ),
        (
            {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": "app",
                "USER": "web",
                "PASSWORD": "p@ss/word",
                "HOST": "db",
                "PORT": "5432",
            },
            "postgresql://web:p%40ss%2Fword@db:5432/app",
        ),
        (
            {"ENGINE": "django.contrib.gis.db.backends.postgis", "NAME": "geo", "HOST": ""},
            "postgresql://localhost/geo",
        ),
        (
            {"ENGINE": "django.db.backends.postgresql", "NAME": "app", "HOST": "::1"},
            "postgresql://[::1]/app",
        ),
        ({"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}, None),
        ({"ENGINE": "django.db.backends.mysql", "NAME": "app"}, None),
    ],
)
def test_the_projects_database_as_the_store(db_settings: dict[str, str], url: str | None) -> None:
    assert django_store_url(db_settings) == url
