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

from cron_bridge.jobs import Occurrence, name_for
from cron_bridge.queues.adapter import Dispatch
from cron_bridge_dramatiq.periodiq import (
    PeriodiqSender,
    cron_expression,
    declared,
    periodic_jobs,
    scheduled_at,
)


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
        # A field holding its lowest and highest value is not every value (issue 37).
        ("0 0 */15 * *", "0 0 */15 * *"),
        ("0 0 */2 * *", "0 0 */2 * *"),
        ("0 0 1,31 * *", "0 0 1,31 * *"),
        ("0 22,23,0,1 * * *", "0 0,1,22,23 * * *"),
        ("0,59 * * * *", "0,59 * * * *"),
        ("0 0 1 1,12 *", "0 0 1 1,12 *"),
        ("0 0 * * sat,sun", "0 0 * * 0,6"),
        ("0,60 * * * *", "0 * * * *"),  # minute 60 never matches in periodiq
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

    jobs, refused = periodic_jobs([weekday_report], "Europe/Warsaw", 45)
    ((job, actor),) = jobs.values()
    assert refused == {}
    assert actor is weekday_report
    assert (job.name, job.queue, job.task) == ("weekday_report", "reports", "weekday_report")
    assert job.misfire_grace == timedelta(seconds=45)
    schedule = job.schedule
    assert (schedule.expr, schedule.tz) == ("0 9 * * 1-5", "Europe/Warsaw")  # type: ignore[attr-defined]


def test_the_day_fields_match_either_only_when_periodiq_restricts_both() -> None:
    """periodiq's ``validate`` ORs the day fields when both are restricted (fewer than 31
    days, fewer than 7 weekday values) and ANDs them otherwise: ``0-5,7`` is seven values,
    so ``0 0 1 * 0-5,7`` is the 1st when it is not a Saturday."""
    broker = StubBroker(middleware=[PeriodiqMiddleware()])

    @dramatiq.actor(broker=broker, periodic=cron("0 0 1 * 0-5,7"))
    def both() -> None:
        pass

    @dramatiq.actor(broker=broker, periodic=cron("0 0 1 * mon"))
    def either() -> None:
        pass

    jobs, _ = periodic_jobs([both, either], "UTC", 30)
    assert [jobs[name][0].schedule.day_or for name in ("both", "either")] == [False, True]  # type: ignore[attr-defined]


def test_an_actor_whose_spec_never_fires_is_refused_alone() -> None:
    """``0 0 30 2 *`` never fires: periodiq sends the other actors all the same, and so
    does the beat; the refusal names the actor, the option and the value."""
    broker = StubBroker(middleware=[PeriodiqMiddleware()])

    @dramatiq.actor(broker=broker, periodic=cron("0 0 30 2 *"))
    def never() -> None:
        pass

    @dramatiq.actor(broker=broker, periodic=cron("0 25 * * *"))
    def past_midnight() -> None:
        pass

    @dramatiq.actor(broker=broker, periodic=cron("@daily"))
    def daily() -> None:
        pass

    jobs, refused = periodic_jobs([never, past_midnight, daily], "UTC", 30)
    assert list(jobs) == ["daily"]
    assert {name: (e.job, e.option, e.value) for name, e in refused.items()} == {
        "never": ("never", "periodic", "0 0 30 2 *"),
        "past_midnight": ("past_midnight", "periodic", "0 25 * * *"),
    }
    assert "never fires" in refused["never"].reason


def test_the_middleware_on_the_workers_reads_our_scheduled_at_and_skips_a_late_one() -> None:
    broker = StubBroker()
    middleware = PeriodiqMiddleware(skip_delay=30)
    broker.add_middleware(middleware)

    @dramatiq.actor(broker=broker, periodic=cron("* * * * *"))
    def tick() -> None:
        pass

    ((job, _),) = periodic_jobs([tick], "UTC", 30)[0].values()

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


ODD_NAMES = ("nightly report", "_cleanup", "zażółć gęślą", "r" * 250, "report:v2")


@pytest.mark.parametrize("shown", ODD_NAMES)
def test_an_actor_whose_name_is_no_job_name_runs_as_a_mapped_job(
    shown: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Stock periodiq schedules ``actor_name="nightly report"``; the beat stopped every actor
    on it (``job 'nightly report', option name=...``, exit 2). It runs as a job every replica
    names alike, the sender sends that actor, and the start says which job it is."""
    broker = StubBroker(middleware=[PeriodiqMiddleware()])

    @dramatiq.actor(broker=broker, actor_name=shown, periodic=cron("0 3 * * *"))
    def odd() -> None:
        pass

    @dramatiq.actor(broker=broker, periodic=cron("* * * * *"))
    def good() -> None:
        pass

    with caplog.at_level("INFO", logger="cron_bridge_dramatiq.periodiq"):
        jobs, refused = periodic_jobs([odd, good], "UTC", 30)
    assert refused == {}
    name = name_for(shown, fallback="periodiq")
    assert list(jobs) == [name, "good"] and name != shown and len(name) <= 200
    job, actor = jobs[name]
    assert (job.name, job.task, actor) == (name, shown, odd)
    assert f"periodiq actor {shown!r} runs as job {name}" in caplog.messages
    sender = PeriodiqSender({n: a for n, (_, a) in jobs.items()}, "UTC")
    occurrence = job.occurrence(datetime(2026, 6, 1, 3, tzinfo=UTC))
    dispatch = Dispatch(job=job, occurrence=occurrence, trigger="schedule", replica="r0")
    assert sender.enqueue_many([dispatch]) == [None]
    (message,) = [broker.queues[q].get() for q in broker.queues if broker.queues[q].qsize()]
    assert dramatiq.Message.decode(message).actor_name == shown


def test_an_actor_named_as_no_job_name_leaves_the_listing_whole() -> None:
    """``cron-bridge list -A`` failed the same way; it lists every actor now."""
    broker = StubBroker(middleware=[PeriodiqMiddleware()])
    previous = dramatiq.get_broker()
    dramatiq.set_broker(broker)
    try:

        @dramatiq.actor(actor_name="nightly report", periodic=cron("0 3 * * *"))
        def nightly() -> None:
            pass

        @dramatiq.actor(periodic=cron("* * * * *"))
        def every_minute() -> None:
            pass

        names = [job.name for job in declared([])]
    finally:
        dramatiq.set_broker(previous)
    assert names == [name_for("nightly report", fallback="periodiq"), "every_minute"]
