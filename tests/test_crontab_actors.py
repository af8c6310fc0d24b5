"""``cron-bridge dramatiq-crontab``'s parts: the APScheduler jobs dramatiq-crontab registers,
read as cron-bridge jobs (no Django needed here: the triggers are built as it builds them)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import dramatiq
import pytest
from apscheduler.schedulers.blocking import BlockingScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger
from dramatiq.brokers.stub import StubBroker

from cron_bridge.schedules import Cron, Every
from cron_bridge_dramatiq.crontab import crontab_jobs

WARSAW = ZoneInfo("Europe/Warsaw")


def test_cron_and_interval_registrations_become_jobs_in_djangos_zone() -> None:
    broker = StubBroker()

    @dramatiq.actor(broker=broker, queue_name="reports")
    def report() -> None:
        pass

    @dramatiq.actor(broker=broker)
    def pulse() -> None:
        pass

    scheduler = BlockingScheduler()
    office_hours = CronTrigger.from_crontab("*/15 9-17 * * mon-fri", timezone=WARSAW)
    scheduler.add_job(report.send, office_hours, name="report")
    scheduler.add_job(report.send, CronTrigger.from_crontab("0 3 * * sun", timezone=WARSAW),
                      name="report")  # fmt: skip
    scheduler.add_job(pulse.send, IntervalTrigger(seconds=30, timezone=WARSAW), name="pulse")
    jobs, refused = crontab_jobs(scheduler.get_jobs())
    assert list(jobs) == ["report", "report-2", "pulse"] and refused == {}
    first = jobs["report"][0].schedule
    assert isinstance(first, Cron)
    assert (first.expr, first.tz, first.day_or) == ("*/15 9-17 * * 1-5", "Europe/Warsaw", False)
    assert jobs["report"][0].queue == "reports" and jobs["report"][1] is report
    every = jobs["pulse"][0].schedule
    assert isinstance(every, Every) and every.interval.total_seconds() == 30


def test_a_registration_that_is_not_an_actors_send_is_refused_naming_it() -> None:
    scheduler = BlockingScheduler()
    scheduler.add_job(print, IntervalTrigger(seconds=5), name="stray")
    jobs, refused = crontab_jobs(scheduler.get_jobs())
    assert jobs == {} and (refused["stray"].job, refused["stray"].option) == ("stray", "func")


def _reads(spec: str) -> Cron:
    broker = StubBroker()

    @dramatiq.actor(broker=broker)
    def task() -> None:
        pass

    scheduler = BlockingScheduler()
    scheduler.add_job(task.send, CronTrigger.from_crontab(spec, timezone=WARSAW), name="task")
    jobs, refused = crontab_jobs(scheduler.get_jobs())
    assert refused == {}
    schedule = jobs["task"][0].schedule
    assert isinstance(schedule, Cron)
    return schedule


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("0 9 1-7 * mon", "0 9 1-7 * 1"),  # the first Monday: both day fields must match
        ("0 0 13 * fri", "0 0 13 * 5"),
        ("0 0 * * 0", "0 0 * * 1"),  # from_crontab: 0 is Monday
        ("0 0 * * 6", "0 0 * * 0"),  # and 6 Sunday
        ("0 0 * * sun", "0 0 * * 0"),  # names are names
        ("0 0 * * 0-4", "0 0 * * 1-5"),
        ("0 23 last * *", "0 23 L * *"),
        ("0 0 15,last * *", "0 0 15,L * *"),
        ("0 0 * jan-mar *", "0 0 * 1-3 *"),
    ],
)
def test_a_crontab_trigger_reads_as_apscheduler_fires_it(spec: str, expected: str) -> None:
    schedule = _reads(spec)
    assert (schedule.expr, schedule.day_or) == (expected, False)


def test_the_first_monday_is_once_a_month() -> None:
    """``0 9 1-7 * mon`` fired 248 times in two years before (either day field), not 24."""
    schedule = _reads("0 9 1-7 * mon")
    start = datetime(2025, 1, 1, tzinfo=UTC)
    assert len(list(schedule.occurrences(start, start + timedelta(days=730)))) == 24


def test_a_trigger_that_never_fires_is_refused_alone() -> None:
    broker = StubBroker()

    @dramatiq.actor(broker=broker)
    def never() -> None:
        pass

    @dramatiq.actor(broker=broker)
    def daily() -> None:
        pass

    scheduler = BlockingScheduler()
    scheduler.add_job(never.send, CronTrigger.from_crontab("0 0 30 2 *", timezone=WARSAW),
                      name="never")  # fmt: skip
    scheduler.add_job(daily.send, CronTrigger.from_crontab("0 0 * * *", timezone=WARSAW),
                      name="daily")  # fmt: skip
    jobs, refused = crontab_jobs(scheduler.get_jobs())
    assert list(jobs) == ["daily"]
    error = refused["never"]
    assert (error.job, error.option, error.reason) == ("never", "trigger", "never fires")


def test_a_weekday_position_or_seconds_are_refused_naming_the_trigger() -> None:
    """``CronTrigger(day="2nd mon")`` (not a crontab: from_crontab cannot write it) and a
    seconds field cannot be a cron expression here."""
    broker = StubBroker()

    @dramatiq.actor(broker=broker)
    def task() -> None:
        pass

    scheduler = BlockingScheduler()
    scheduler.add_job(task.send, CronTrigger(day="2nd mon", timezone=WARSAW), name="task")
    scheduler.add_job(task.send, CronTrigger(second="*/10", timezone=WARSAW), name="task")
    _, refused = crontab_jobs(scheduler.get_jobs())
    assert sorted(refused) == ["task", "task-2"]
    assert all(error.option == "trigger" for error in refused.values())
