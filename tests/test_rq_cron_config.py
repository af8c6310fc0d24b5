"""``cron-bridge rq-cron``'s parts: the jobs an ``rq cron`` config makes, the zone its cron
fields are read in, and a send again after a lost answer (against a real Redis)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from redis import Redis
from rq import Queue
from rq.cron import CronJob

from cron_bridge import ConfigError
from cron_bridge.jobs import Occurrence
from cron_bridge.plugins import Dispatch
from cron_bridge.schedules import Cron, Every
from cron_bridge_rq import rq_cron
from cron_bridge_rq.rq_cron import RQCronSender, jobs_of, rq_cron_zone
from tests.apps.rq_cron_tasks import cleanup, send_report


def test_each_registration_is_a_job_named_after_it_and_twice_registered_ones_are_numbered() -> None:
    registrations = [
        CronJob("default", func=cleanup, interval=3),
        CronJob("reports", func=send_report, cron="0 9 * * 1-5", args=("daily",), name="daily"),
        CronJob("reports", func=send_report, interval=60, args=("a",)),
        CronJob("reports", func=send_report, interval=120, args=("b",)),
    ]
    jobs = jobs_of(registrations, "Europe/Warsaw")
    assert list(jobs) == [
        "tests.apps.rq_cron_tasks.cleanup",
        "daily",
        "tests.apps.rq_cron_tasks.send_report",
        "tests.apps.rq_cron_tasks.send_report-2",
    ]
    daily = jobs["daily"][0]
    assert isinstance(daily.schedule, Cron)
    assert (daily.schedule.expr, daily.schedule.tz) == ("0 9 * * 1-5", "Europe/Warsaw")
    assert (daily.queue, daily.task) == ("reports", "tests.apps.rq_cron_tasks.send_report")
    every = jobs["tests.apps.rq_cron_tasks.cleanup"][0].schedule
    assert isinstance(every, Every) and every.interval.total_seconds() == 3
    assert jobs["tests.apps.rq_cron_tasks.send_report-2"][1] is registrations[3]


def test_a_registration_that_cannot_be_a_job_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError) as caught:
        jobs_of([CronJob("default", func=cleanup, interval=-5, name="bad")], "UTC")
    assert (caught.value.job, caught.value.option, caught.value.value) == ("bad", "interval", -5)
    with pytest.raises(ConfigError) as named:
        jobs_of([CronJob("default", func=cleanup, interval=5, name="no spaces")], "UTC")
    assert named.value.option == "name"


def test_cron_fields_are_read_in_the_zone_rq_cron_reads_them_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RQ 3 reads them in the process's local time (TZ first); before RQ 3, in UTC."""
    monkeypatch.setattr(rq_cron, "_RQ_MAJOR", 3)
    monkeypatch.setenv("TZ", "Europe/Warsaw")
    assert rq_cron_zone() == "Europe/Warsaw"
    monkeypatch.setenv("TZ", ":America/New_York")
    assert rq_cron_zone() == "America/New_York"
    monkeypatch.setenv("TZ", "CET-1CEST")
    with pytest.raises(ConfigError) as caught:
        rq_cron_zone()
    assert caught.value.option == "TZ" and "Area/City" in caught.value.reason
    monkeypatch.setattr(rq_cron, "_RQ_MAJOR", 2)
    assert rq_cron_zone() == "UTC"


def test_a_send_again_after_a_lost_answer_lands_once(redis_server: Any) -> None:
    """The same occurrence sent twice (the second time as after a timeout): one job in RQ,
    with the occurrence's id; the second send is counted as sent."""
    connection = Redis.from_url(redis_server.url)
    queue_name = f"q-{uuid.uuid4().hex[:8]}"
    registration = CronJob(queue_name, func=send_report, interval=5, args=("x",),
                           meta={"owner": "ops"}, name=f"n{uuid.uuid4().hex[:6]}")  # fmt: skip
    ((job, _),) = jobs_of([registration], "UTC").values()
    sender = RQCronSender(connection, {job.name: registration})
    occurrence = Occurrence(job=job.name, scheduled_at=datetime(2026, 12, 1, 12, tzinfo=UTC))
    first = Dispatch(job=job, occurrence=occurrence, trigger="schedule", replica="r0")
    again = Dispatch(job=job, occurrence=occurrence, trigger="schedule", replica="r0",
                     again=True)  # fmt: skip
    assert sender.enqueue_many([first]) == [None]
    assert sender.enqueue_many([again]) == [None]
    jobs = Queue(queue_name, connection=connection).get_jobs()
    assert len(jobs) == 1
    assert jobs[0].id.startswith("cb-") and jobs[0].id.endswith(str(occurrence.epoch_ms))
    assert (jobs[0].args, jobs[0].meta) == (("x",), {"owner": "ops"})
    assert registration.job_options.get("job_id") is None  # the registration is unchanged
