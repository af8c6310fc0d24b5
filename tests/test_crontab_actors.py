"""``cron-bridge dramatiq-crontab``'s parts: the APScheduler jobs dramatiq-crontab registers,
read as cron-bridge jobs (no Django needed here: the triggers are built as it builds them)."""

from __future__ import annotations

from zoneinfo import ZoneInfo

import dramatiq
import pytest
from apscheduler.schedulers.blocking import BlockingScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger
from dramatiq.brokers.stub import StubBroker

from cron_bridge import ConfigError
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
    jobs = crontab_jobs(scheduler.get_jobs())
    assert list(jobs) == ["report", "report-2", "pulse"]
    first = jobs["report"][0].schedule
    assert isinstance(first, Cron)
    assert (first.expr, first.tz) == ("*/15 9-17 * * mon-fri", "Europe/Warsaw")
    assert jobs["report"][0].queue == "reports" and jobs["report"][1] is report
    every = jobs["pulse"][0].schedule
    assert isinstance(every, Every) and every.interval.total_seconds() == 30


def test_a_registration_that_is_not_an_actors_send_is_refused_naming_it() -> None:
    scheduler = BlockingScheduler()
    scheduler.add_job(print, IntervalTrigger(seconds=5), name="stray")
    with pytest.raises(ConfigError) as caught:
        crontab_jobs(scheduler.get_jobs())
    assert (caught.value.job, caught.value.option) == ("stray", "func")
