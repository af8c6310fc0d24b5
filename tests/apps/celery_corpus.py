"""A Celery project's beat schedule in the forms real projects write it, unchanged.

Run under stock ``celery beat`` and under ``celery beat -S cron_bridge`` by
``tests/e2e/test_celery_twin.py``. The crontab fields are those real projects write (names,
lists with spaces, sets, ``range`` objects, steps, integers), with today's weekday, day and
hour filled in so that they fire while the test watches; the AND rule entry names today's
day of the month with tomorrow's weekday, so it must never fire.
"""

from __future__ import annotations

import os
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from celery import Celery
from celery.schedules import crontab, schedstate, schedule, solar

ZONE = "Europe/Warsaw"
NAMES = ["sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"]
MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]

app = Celery("proj", broker=os.environ.get("CB_TEST_BROKER", "redis://127.0.0.1:6379/0"))
app.conf.update(
    timezone=ZONE,
    task_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
    # A backend that does not expire results itself: celery beat adds celery.backend_cleanup.
    result_backend=f"file://{os.environ.get('CB_TEST_RESULTS', '/tmp')}",
    task_routes={"proj.reports.*": {"queue": "reports"}},
)


HOLIDAYS = {date(2026, 12, 25), date(2027, 1, 1)}


class unless_holiday(schedule):
    """A project's own schedule class: its own is_due, reading the time through self.now()."""

    def is_due(self, last_run_at: datetime) -> schedstate:
        if self.now().date() in HOLIDAYS:
            return schedstate(is_due=False, next=60)
        return super().is_due(last_run_at)


def _today() -> dict[str, Any]:
    now = datetime.now(ZoneInfo(ZONE)) + timedelta(seconds=90)  # the test window's minutes
    weekday = now.isoweekday() % 7
    return {
        "weekday": weekday,
        "name": NAMES[weekday],
        "short": NAMES[weekday][:3],
        "tomorrow": NAMES[(weekday + 1) % 7],
        "day": now.day,
        "month": now.month,
        "hour": now.hour,
    }


def _month_field(month: int) -> str | int:
    """Month names where this Celery reads them (not before 5.4: stock beat refuses them)."""
    try:
        crontab(month_of_year="jan")
    except ValueError:
        return month
    return MONTHS[month - 1]


T = _today()
NOON_LON = float(os.environ.get("CB_TEST_SOLAR_LON", "0"))

app.conf.beat_schedule = {
    # crontab, every form
    "heartbeat": {"task": "proj.ping", "schedule": crontab()},
    "cleanup-stale-sessions": {
        "task": "proj.cleanup",
        "schedule": crontab(minute="*/1"),
        "kwargs": {"older_than": 3600},
    },
    "report.weekday-name": {
        "task": "proj.report",
        "schedule": crontab(day_of_week=T["name"]),
        "args": ("weekday-name",),
    },
    "report.short-names": {
        "task": "proj.report",
        "schedule": crontab(day_of_week=f"{T['short']},{T['tomorrow'][:3]}"),
        "args": ("short-names",),
    },
    "report spaces in hours": {
        "task": "proj.report",
        "schedule": crontab(hour=f"{T['hour']}, {(T['hour'] + 1) % 24}"),
        "args": ("spaces",),
    },
    "report.python-list": {
        "task": "proj.report",
        "schedule": crontab(minute=list(range(60)), hour=[T["hour"]]),
        "args": ("list",),
    },
    "report.python-set": {
        "task": "proj.report",
        "schedule": crontab(day_of_week={T["weekday"], (T["weekday"] + 1) % 7}),
        "args": ("set",),
    },
    "report.range": {
        "task": "proj.report",
        "schedule": crontab(minute=range(60), day_of_month=range(1, 32)),
        "args": ("range",),
    },
    "report.steps-and-ranges": {
        "task": "proj.report",
        "schedule": crontab(minute="0-59/1", hour="0-23", month_of_year="1-12"),
        "args": ("steps",),
    },
    "report.integers": {
        "task": "proj.report",
        "schedule": crontab(day_of_month=T["day"], month_of_year=T["month"]),
        "args": ("integers",),
    },
    "report.month-name": {
        "task": "proj.report",
        "schedule": crontab(month_of_year=_month_field(T["month"])),
        "args": ("month-name",),
    },
    "report.the-and-rule": {
        "task": "proj.report",
        "schedule": crontab(day_of_month=T["day"], day_of_week=T["tomorrow"]),
        "args": ("and-rule",),
    },
    "report.nightly": {
        "task": "proj.report",
        "schedule": crontab(minute=30, hour=2),
        "args": ("nightly",),
    },
    # intervals
    "sync-every-2s": {"task": "proj.sync", "schedule": timedelta(seconds=2)},
    "poll inbox": {"task": "proj.poll", "schedule": 3, "args": ("inbox",)},
    "poll.float": {"task": "proj.poll", "schedule": 2.5, "args": ("float",)},
    "reports.schedule-object": {
        "task": "proj.reports.weekly",
        "schedule": schedule(timedelta(seconds=4)),
    },
    # a schedule class of the project's own
    "custom-schedule-class": {
        "task": "proj.custom",
        "schedule": unless_holiday(timedelta(seconds=5)),
    },
    # solar: noon where it falls in the test window, and events elsewhere
    "solar noon": {
        "task": "proj.solar",
        "schedule": solar("solar_noon", 0.0, NOON_LON),
        "args": ("noon",),
    },
    "solar.sunrise": {
        "task": "proj.solar",
        "schedule": solar("sunrise", 52.23, 21.01),
        "args": ("sunrise",),
    },
    # options of every kind
    "emails.priority": {
        "task": "proj.mail.send",
        "schedule": timedelta(seconds=3),
        "args": ("priority",),
        "options": {"queue": "emails", "priority": 7},
    },
    "expires-relative": {
        "task": "proj.expiring",
        "schedule": timedelta(seconds=3),
        "args": ("relative",),
        "options": {"expires": 30},
    },
    "countdown": {
        "task": "proj.later",
        "schedule": timedelta(seconds=3),
        "options": {"countdown": 10},
    },
    "routing-key": {
        "task": "proj.routed",
        "schedule": timedelta(seconds=3),
        "options": {"queue": "reports", "routing_key": "reports.weekly"},
    },
    "exchange-and-key": {
        "task": "proj.routed",
        "schedule": timedelta(seconds=3),
        "args": ("exchange",),
        "options": {"exchange": "celery", "routing_key": "celery"},
    },
    "everything-else": {
        "task": "proj.report",
        "schedule": timedelta(seconds=4),
        "args": ("options",),
        "kwargs": {"tenant": "acme", "dry_run": False},
        "options": {
            "headers": {"tenant": "acme"},
            "ignore_result": True,
            "serializer": "json",
            "time_limit": 60,
            "soft_time_limit": 50,
            "shadow": "nightly-report",
        },
    },
    "own-queue-task": {"task": "proj.digest", "schedule": timedelta(seconds=3)},
    "own-expires-task": {
        "task": "proj.expiring",
        "schedule": timedelta(seconds=4),
        "args": ("task-attribute",),
    },
}


if hasattr(solar, "_next_event"):
    # Before Celery 5.7, stock celery beat crashes on a day without the event (a TypeError
    # in its CircumpolarError branch): only projects on a newer Celery can have this entry.
    app.conf.beat_schedule["solar.dusk"] = {
        "task": "proj.solar",
        "schedule": solar("dusk_astronomical", 78.22, 15.65),
        "args": ("dusk",),
    }


@app.on_after_configure.connect
def setup_periodic_tasks(sender: Celery, **kwargs: Any) -> None:
    """``add_periodic_task``, as the Celery docs show it: unnamed (keyed by ``repr(sig)``)
    and named, with options."""
    sender.add_periodic_task(5.0, ping.s("unnamed"))
    sender.add_periodic_task(crontab(), ping.s("named"), name="named ping", expires=20)


@app.task(name="proj.ping")
def ping(label: str = "") -> None:
    """A registered task; the twin test runs no worker, it reads the broker."""


@app.task(name="proj.digest", queue="mail")
def digest() -> None:
    """A task with its own queue: celery beat's apply_async sends it there."""


@app.task(name="proj.expiring", expires=120, priority=3)
def expiring(label: str) -> None:
    """A task with its own expires and priority."""
