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

from cron_bridge.jobs import name_for
from cron_bridge.queues.adapter import Dispatch
from cron_bridge.schedules import Cron, Every
from cron_bridge.windows import NEVER
from cron_bridge_dramatiq.crontab import CrontabSender, crontab_jobs

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
    scheduler.add_job(
        report.send, CronTrigger.from_crontab("0 3 * * sun", timezone=WARSAW), name="report"
    )
    scheduler.add_job(pulse.send, IntervalTrigger(seconds=30, timezone=WARSAW), name="pulse")
    jobs, refused = crontab_jobs(scheduler.get_jobs())
    assert list(jobs) == ["report", "report-2", "pulse"] and refused == {}
    first = jobs["report"][0].schedule
    assert isinstance(first, Cron)
    assert (first.expr, first.tz, first.day_or) == ("*/15 9-17 * * 1-5", "Europe/Warsaw", False)
    assert jobs["report"][0].queue == "reports" and jobs["report"][1].actor is report
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
    scheduler.add_job(
        never.send, CronTrigger.from_crontab("0 0 30 2 *", timezone=WARSAW), name="never"
    )
    scheduler.add_job(
        daily.send, CronTrigger.from_crontab("0 0 * * *", timezone=WARSAW), name="daily"
    )
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


BROKER = StubBroker()


@dramatiq.actor(broker=BROKER)
def nightly(*args: object, **kwargs: object) -> None:
    pass


def _one(trigger: object, **options: object) -> tuple[dict[str, object], dict[str, object]]:
    scheduler = BlockingScheduler()
    scheduler.add_job(nightly.send, trigger, name="nightly", **options)
    return crontab_jobs(scheduler.get_jobs())  # type: ignore[return-value]


def _apscheduler_fires(trigger: CronTrigger, start: datetime, end: datetime) -> list[datetime]:
    """What APScheduler sends from ``start`` to ``end``, as its scheduler walks the trigger."""
    fires = []
    at = trigger.get_next_fire_time(None, start)
    while at is not None and at <= end:
        fires.append(at.astimezone(UTC))
        at = trigger.get_next_fire_time(at, at)
    return fires


@pytest.mark.parametrize(
    ("start_date", "end_date"),
    [
        (None, datetime(2020, 1, 1, tzinfo=WARSAW)),  # ended: APScheduler never fires
        (datetime(2030, 1, 1, tzinfo=WARSAW), None),  # not begun
        (datetime(2025, 3, 10, 3, tzinfo=WARSAW), datetime(2025, 4, 2, 3, tzinfo=WARSAW)),
        (datetime(2025, 3, 10, 3, 0, 1, tzinfo=WARSAW), None),  # just after a fire time
    ],
)
def test_a_triggers_start_and_end_dates_bound_its_sends_as_apscheduler_reads_them(
    start_date: datetime | None, end_date: datetime | None
) -> None:
    """``CronTrigger(hour=3, end_date=2020-01-01)`` never fires in APScheduler; the drop-in
    sent it daily, and one with ``start_date=2030-01-01`` from now on."""
    trigger = CronTrigger(
        hour=3, minute=0, timezone=WARSAW, start_date=start_date, end_date=end_date
    )
    jobs, refused = _one(trigger)
    assert refused == {}
    schedule = jobs["nightly"][0].schedule  # type: ignore[index]
    start, end = datetime(2025, 1, 1, tzinfo=UTC), datetime(2031, 1, 1, tzinfo=UTC)
    ours = list(schedule.occurrences(start, end))
    assert ours == _apscheduler_fires(trigger, start, end)
    if end_date is not None and end_date.year == 2020:
        assert ours == [] and schedule.next_after(start) == NEVER


def test_an_interval_triggers_end_date_ends_its_sends() -> None:
    trigger = IntervalTrigger(hours=1, timezone=WARSAW, end_date=datetime(2020, 1, 1, tzinfo=UTC))
    jobs, refused = _one(trigger)
    assert refused == {}
    schedule = jobs["nightly"][0].schedule  # type: ignore[index]
    last = datetime(2020, 1, 1, tzinfo=UTC)  # the end is included, as APScheduler reads it
    assert schedule.next_after(last - timedelta(minutes=30)) == last
    assert schedule.next_after(last) == NEVER


def test_an_end_date_before_the_start_date_is_refused_naming_it() -> None:
    trigger = CronTrigger(
        hour=3,
        timezone=WARSAW,
        start_date=datetime(2030, 1, 1, tzinfo=UTC),
        end_date=datetime(2020, 1, 1, tzinfo=UTC),
    )
    jobs, refused = _one(trigger)
    assert jobs == {} and refused["nightly"].option == "end_date"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "trigger",
    [
        CronTrigger(hour=3, minute=0, timezone=WARSAW, jitter=600),
        IntervalTrigger(hours=1, jitter=600),
    ],
)
def test_a_triggers_jitter_delays_each_send_by_up_to_that_many_seconds(trigger: object) -> None:
    """APScheduler adds ``random.uniform(0, jitter)`` seconds to each fire; the job adds a
    share of it every replica draws alike from the occurrence id. It was dropped."""
    jobs, refused = _one(trigger)
    assert refused == {}
    job = jobs["nightly"][0]
    assert job.jitter == timedelta(seconds=600)  # type: ignore[attr-defined]
    due = job.schedule.next_after(datetime(2026, 6, 1, tzinfo=UTC))  # type: ignore[attr-defined]
    delays = {
        job.fire_at(due + timedelta(days=day)) - due - timedelta(days=day)  # type: ignore[attr-defined]
        for day in range(20)
    }
    assert all(timedelta(0) <= delay < timedelta(seconds=600) for delay in delays)
    assert len(delays) > 1


@pytest.mark.parametrize("jitter", [-5, 86401, "600"])
def test_a_jitter_the_job_cannot_take_is_refused_naming_it(jitter: object) -> None:
    jobs, refused = _one(CronTrigger(hour=3, timezone=WARSAW, jitter=jitter))
    error = refused["nightly"]
    assert jobs == {} and (error.option, error.value) == ("jitter", jitter)  # type: ignore[attr-defined]


def test_the_args_and_kwargs_add_job_was_given_are_sent() -> None:
    """``scheduler.add_job(actor.send, trigger, args=[42])``: APScheduler calls
    ``actor.send(42)``; the drop-in called ``actor.send()``, and 42 was lost."""
    jobs, refused = _one(IntervalTrigger(hours=1), args=[42], kwargs={"region": "eu"})
    assert refused == {}
    job, _ = jobs["nightly"]
    assert job.kwargs == {"region": "eu"}  # type: ignore[attr-defined]
    sender = CrontabSender({name: c for name, (_, c) in jobs.items()})  # type: ignore[misc]
    occurrence = job.occurrence(datetime(2026, 6, 1, tzinfo=UTC))  # type: ignore[attr-defined]
    dispatch = Dispatch(job=job, occurrence=occurrence, trigger="schedule", replica="r0")  # type: ignore[arg-type]
    assert sender.enqueue_many([dispatch]) == [None]
    message = dramatiq.Message.decode(BROKER.queues[nightly.queue_name].get())
    assert (message.actor_name, message.args, message.kwargs) == (
        "nightly",
        (42,),
        {"region": "eu"},
    )


@pytest.mark.parametrize(
    ("option", "given"),
    [("args", {"args": [object()]}), ("kwargs", {"kwargs": {"at": datetime(2026, 1, 1)}})],
)
def test_arguments_dramatiq_cannot_send_as_json_are_refused_naming_them(
    option: str, given: dict[str, object]
) -> None:
    jobs, refused = _one(IntervalTrigger(hours=1), **given)
    assert jobs == {} and refused["nightly"].option == option  # type: ignore[attr-defined]


ODD_NAMES = ("nightly report", "_cleanup", "zażółć gęślą", "r" * 250, "r" * 199, "r" * 200)


@pytest.mark.parametrize("shown", ODD_NAMES)
def test_an_actor_of_any_name_runs_each_registration_as_its_own_job(
    shown: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An actor named ``nightly report`` was refused; one of 199 or 200 characters registered
    twice (``<name>-2`` is over 200) stopped the command. Each registration is a job now,
    named alike on every replica, sending that actor."""
    broker = StubBroker()

    @dramatiq.actor(broker=broker, actor_name=shown)
    def odd() -> None:
        pass

    scheduler = BlockingScheduler()
    scheduler.add_job(odd.send, CronTrigger.from_crontab("0 3 * * *", timezone=WARSAW))
    scheduler.add_job(odd.send, IntervalTrigger(hours=1, timezone=WARSAW))
    with caplog.at_level("INFO", logger="cron_bridge_dramatiq.crontab"):
        jobs, refused = crontab_jobs(scheduler.get_jobs())
    assert refused == {} and len(jobs) == 2
    assert all(
        len(name) <= 200 and call.actor is odd and job.task == shown
        for name, (job, call) in jobs.items()
    )
    first = name_for(shown, fallback="dramatiq-crontab")
    assert next(iter(jobs)) == first
    if first != shown:
        assert f"dramatiq-crontab actor {shown!r} runs as job {first}" in caplog.messages
