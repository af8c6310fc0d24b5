"""``celery beat -S cron_bridge`` in one process: entries become jobs, DST follows our rules."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.beat import ScheduleEntry
from celery.schedules import crontab

from cron_bridge import Cron
from cron_bridge.stores import MemoryStore
from cron_bridge_celery.scheduler import ClusterScheduler, job_name
from cron_bridge_celery.schedules import to_schedule

WARSAW = ZoneInfo("Europe/Warsaw")


def local_times(schedule: Cron, start: str, end: str) -> list[str]:
    begin = datetime.fromisoformat(start).replace(tzinfo=UTC)
    until = datetime.fromisoformat(end).replace(tzinfo=UTC)
    return [t.astimezone(WARSAW).isoformat(timespec="minutes")
            for t in schedule.occurrences(begin, until)]  # fmt: skip


def test_crontab_entries_follow_the_dst_rules_in_the_app_timezone() -> None:
    """A daily 02:30 crontab in Europe/Warsaw fires once on both transition days; an hourly
    one fires in both passes of the repeated hour (Celery's own crontab has skipped it)."""
    app = Celery("proj", set_as_current=False)
    app.conf.timezone = "Europe/Warsaw"
    daily = to_schedule(crontab(minute=30, hour=2, app=app), app_zone=app.timezone)
    assert isinstance(daily, Cron) and daily.tz == "Europe/Warsaw"
    assert local_times(daily, "2026-03-28T00:00", "2026-03-30T00:00") == [
        "2026-03-28T02:30+01:00", "2026-03-29T03:00+02:00",
    ]  # fmt: skip
    assert local_times(daily, "2026-10-24T12:00", "2026-10-26T12:00") == [
        "2026-10-25T02:30+02:00", "2026-10-26T02:30+01:00",
    ]  # fmt: skip
    hourly = to_schedule(crontab(minute=0, app=app), app_zone=app.timezone)
    assert isinstance(hourly, Cron)
    assert local_times(hourly, "2026-10-24T23:30", "2026-10-25T01:30") == [
        "2026-10-25T02:00+02:00", "2026-10-25T02:00+01:00",
    ]  # fmt: skip
    weekdays = to_schedule(crontab(minute="*/15", hour="9-17", day_of_week="mon-fri", app=app),
                           app_zone=app.timezone)  # fmt: skip
    assert weekdays.describe() == "0,15,30,45 9-17 * * 1-5"


def test_entry_names_become_valid_job_names_without_collisions() -> None:
    """Keys with spaces get a readable name plus a digest; valid keys stay as they are."""
    assert job_name("cleanup.nightly") == "cleanup.nightly"
    spaced = job_name("add every 10 seconds")
    assert spaced.startswith("add-every-10-seconds-")
    assert job_name("a b") != job_name("a-b") and job_name("a b") != job_name("a/b")


def test_two_schedulers_send_each_occurrence_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two schedulers on one store: each due occurrence of five entries is sent once."""
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(
        cron_bridge_store="memory://",
        beat_schedule={
            f"entry {n}": {"task": "proj.noop", "schedule": timedelta(seconds=1)} for n in range(5)
        },
    )
    shared = MemoryStore()
    monkeypatch.setattr("cron_bridge_celery.scheduler.store_from_url", lambda url: shared)
    sent: list[str] = []
    monkeypatch.setattr(
        "cron_bridge_celery.scheduler.BeatScheduleSender._send",
        lambda self, producer, dispatch: sent.append(dispatch.occurrence.id),
    )
    first, second = ClusterScheduler(app), ClusterScheduler(app)
    deadline = datetime.now(UTC) + timedelta(seconds=10)
    while len(sent) < 10 and datetime.now(UTC) < deadline:
        for scheduler in (first, second):
            scheduler.tick()
        time.sleep(0.05)
    first.close()
    second.close()
    assert len(sent) >= 10
    assert len(sent) == len(set(sent))
    assert len({occurrence.split("@")[1] for occurrence in sent}) >= 2


def test_a_missing_store_is_one_line_and_exit_2(capfd: pytest.CaptureFixture[str]) -> None:
    """Without app.conf.cron_bridge_store or CRON_BRIDGE_STORE it says how to set it, on the
    process's real stderr (celery beat turns sys.stderr into a logger)."""
    app = Celery("proj", broker="memory://", set_as_current=False)
    with pytest.raises(SystemExit) as caught:
        ClusterScheduler(app, lazy=True)
    assert caught.value.code == 2
    assert "cron_bridge_store" in capfd.readouterr().err


def test_the_alias_is_registered_for_celery_beat() -> None:
    """``-S cron_bridge`` resolves through the celery.beat_schedulers entry point group."""
    from celery.utils.imports import load_extension_class_names

    aliases = dict(load_extension_class_names("celery.beat_schedulers"))
    assert aliases["cron_bridge"] == "cron_bridge_celery:ClusterScheduler"


def test_schedule_entries_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scheduler reads args, kwargs and options of each entry."""
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(cron_bridge_store="memory://", beat_schedule={
        "x": {"task": "proj.noop", "schedule": 5, "args": (1,), "kwargs": {"a": 1},
              "options": {"queue": "q", "priority": 3}},
    })  # fmt: skip
    scheduler = ClusterScheduler(app)
    entry = scheduler.schedule["x"]
    assert isinstance(entry, ScheduleEntry)
    assert (entry.args, entry.kwargs, entry.options["queue"]) == ((1,), {"a": 1}, "q")
    scheduler.close()
