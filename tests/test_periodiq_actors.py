"""``cron-bridge periodiq``'s parts: periodiq's specs read as cron expressions, its
middleware's ``skip_delay`` as the jobs' grace, and ``scheduled_at`` written so that the
middleware on the workers reads it back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import dramatiq
import pendulum
import pytest
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import SkipMessage
from periodiq import PeriodiqMiddleware, cron

from cron_bridge.jobs import Occurrence
from cron_bridge.plugins import Dispatch
from cron_bridge_dramatiq.periodiq import cron_expression, periodic_jobs, scheduled_at


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("* * * * *", "* * * * *"),
        ("@hourly", "0 * * * *"),
        ("@weekly", "0 0 * * 0"),
        ("*/15 9-17 * * mon-fri", "*/15 9-17 * * 1-5"),
        ("0 0 * * 7", "0 0 * * 0"),
        ("0 0 1,15 * *", "0 0 1,15 * *"),
        ("5 4 * 1-3,6 *", "5 4 * 1-3,6 *"),
        ("0-59/2 * * * sun-sat", "*/2 * * * *"),
    ],
)
def test_a_periodiq_spec_is_the_cron_expression_periodiq_expanded(spec: str, expected: str) -> None:
    assert cron_expression(cron(spec)) == expected


def test_each_periodic_actor_is_a_job_with_the_middlewares_skip_delay_as_grace() -> None:
    broker = StubBroker()
    broker.add_middleware(PeriodiqMiddleware(skip_delay=45))

    @dramatiq.actor(broker=broker, queue_name="reports", periodic=cron("0 9 * * mon-fri"))
    def weekday_report() -> None:
        pass

    ((job, actor),) = periodic_jobs([weekday_report], "Europe/Warsaw", 45).values()
    assert actor is weekday_report
    assert (job.name, job.queue, job.task) == ("weekday_report", "reports", "weekday_report")
    assert job.misfire_grace == timedelta(seconds=45)
    schedule = job.schedule
    assert (schedule.expr, schedule.tz) == ("0 9 * * 1-5", "Europe/Warsaw")  # type: ignore[attr-defined]


def test_the_middleware_on_the_workers_reads_our_scheduled_at_and_skips_a_late_one() -> None:
    broker = StubBroker()
    middleware = PeriodiqMiddleware(skip_delay=30)
    broker.add_middleware(middleware)

    @dramatiq.actor(broker=broker, periodic=cron("* * * * *"))
    def tick() -> None:
        pass

    ((job, _),) = periodic_jobs([tick], "UTC", 30).values()

    def message_at(at: datetime) -> dramatiq.Message[None]:
        occurrence = Occurrence(job=job.name, scheduled_at=at)
        dispatch = Dispatch(job=job, occurrence=occurrence, trigger="schedule", replica="r0")
        written = scheduled_at(dispatch, "Europe/Warsaw")
        assert pendulum.parse(written) == at  # as the middleware parses it
        return tick.message_with_options(scheduled_at=written)

    now = datetime.now(UTC).replace(microsecond=0)
    middleware.before_process_message(broker, message_at(now))  # fresh: processed
    with pytest.raises(SkipMessage):
        middleware.before_process_message(broker, message_at(now - timedelta(seconds=31)))
