"""``celery beat -S cron_bridge`` in one process: entries become jobs, DST follows our rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.beat import PersistentScheduler, ScheduleEntry
from celery.schedules import crontab

from cron_bridge import Cron, JobContext, cluster_task
from cron_bridge.queues.adapter import Dispatch
from cron_bridge.registry import default_registry
from cron_bridge.stores import MemoryStore
from cron_bridge_celery import CeleryAdapter
from cron_bridge_celery.scheduler import ClusterScheduler, job_name
from cron_bridge_celery.schedules import to_schedule
from tests.waiting import waited

WARSAW = ZoneInfo("Europe/Warsaw")


def local_times(schedule: Cron, start: str, end: str) -> list[str]:
    begin = datetime.fromisoformat(start).replace(tzinfo=UTC)
    until = datetime.fromisoformat(end).replace(tzinfo=UTC)
    return [
        t.astimezone(WARSAW).isoformat(timespec="minutes")
        for t in schedule.occurrences(begin, until)
    ]


def test_crontab_entries_follow_the_dst_rules_in_the_app_timezone() -> None:
    """A daily 02:30 crontab in Europe/Warsaw fires once on both transition days; an hourly
    one fires in both passes of the repeated hour (Celery's own crontab has skipped it)."""
    app = Celery("proj", set_as_current=False)
    app.conf.timezone = "Europe/Warsaw"
    daily = to_schedule(crontab(minute=30, hour=2, app=app), app_zone=app.timezone)
    assert isinstance(daily, Cron) and daily.tz == "Europe/Warsaw"
    assert local_times(daily, "2026-03-28T00:00", "2026-03-30T00:00") == [
        "2026-03-28T02:30+01:00",
        "2026-03-29T03:00+02:00",
    ]
    assert local_times(daily, "2026-10-24T12:00", "2026-10-26T12:00") == [
        "2026-10-25T02:30+02:00",
        "2026-10-26T02:30+01:00",
    ]
    hourly = to_schedule(crontab(minute=0, app=app), app_zone=app.timezone)
    assert isinstance(hourly, Cron)
    assert local_times(hourly, "2026-10-24T23:30", "2026-10-25T01:30") == [
        "2026-10-25T02:00+02:00",
        "2026-10-25T02:00+01:00",
    ]
    weekdays = to_schedule(
        crontab(minute="*/15", hour="9-17", day_of_week="mon-fri", app=app), app_zone=app.timezone
    )
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

    def ticked() -> bool:
        for scheduler in (first, second):
            scheduler.tick()
        return len(sent) >= 10

    waited(ticked, 10, every=0.05)  # asserted on below, with what was sent
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
    from celery.utils.imports import load_extension_class_names, symbol_by_name

    aliases = dict(load_extension_class_names("celery.beat_schedulers"))
    assert aliases["cron_bridge"] == "cron_bridge.schedulers:ClusterScheduler"
    assert aliases["cron_bridge_django"] == "cron_bridge.schedulers:DjangoClusterScheduler"
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(cron_bridge_store="memory://")
    built = symbol_by_name("cron_bridge", aliases=aliases)(app=app, lazy=True)
    assert type(built) is ClusterScheduler  # the core's name builds the adapter's scheduler
    built.close()


def test_schedule_entries_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scheduler reads args, kwargs and options of each entry."""
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(
        cron_bridge_store="memory://",
        beat_schedule={
            "x": {
                "task": "proj.noop",
                "schedule": 5,
                "args": (1,),
                "kwargs": {"a": 1},
                "options": {"queue": "q", "priority": 3},
            },
        },
    )
    scheduler = ClusterScheduler(app)
    entry = scheduler.schedule["x"]
    assert isinstance(entry, ScheduleEntry)
    assert (entry.args, entry.kwargs, entry.options["queue"]) == ((1,), {"a": 1}, "q")
    scheduler.close()


def scheduler_jobs(app: Celery) -> dict[str, Any]:
    scheduler = ClusterScheduler(app)
    assert scheduler._beat is not None
    jobs = {job.name: job for job in scheduler._beat.jobs()}
    scheduler.close()
    return jobs


def test_celerys_default_entries_are_scheduled_as_celery_beat_schedules_them(
    tmp_path: Path,
) -> None:
    """With a result backend that does not expire results, celery beat adds
    celery.backend_cleanup (04:00 daily, expires 12 h); so do we, with the same entries."""
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(
        cron_bridge_store="memory://",
        timezone="Europe/Warsaw",
        result_backend=f"file://{tmp_path}",
        beat_schedule={"x": {"task": "proj.noop", "schedule": 5}},
    )
    stock = PersistentScheduler(app, schedule_filename=str(tmp_path / "schedule"))
    expected = set(stock.schedule)
    stock.close()
    jobs = scheduler_jobs(app)
    assert set(jobs) == expected == {"x", "celery.backend_cleanup"}
    cleanup = jobs["celery.backend_cleanup"]
    assert cleanup.schedule == Cron("0 4 * * *", tz="Europe/Warsaw", day_or=False)
    assert cleanup.task == "celery.backend_cleanup"


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        (
            {"task": "proj.noop", "schedule": "every 5 minutes"},
            "'nightly': schedule='every 5 minutes'",
        ),
        ({"schedule": 5}, "'nightly': task=None"),
        ({"task": "proj.noop", "schedule": 5, "shedule": 3}, "'nightly'"),
        ({"task": "proj.noop", "schedule": timedelta(0)}, "schedule=datetime.timedelta(0)"),
    ],
)
def test_an_entry_celery_cannot_run_is_one_line_naming_it_and_exit_2(
    entry: dict[str, Any], says: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """A bad schedule, a missing task, a misspelt field, a zero interval: one line naming
    the entry, the field and the value, exit 2, no traceback."""
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(cron_bridge_store="memory://", beat_schedule={"nightly": entry})
    with pytest.raises(SystemExit) as caught:
        ClusterScheduler(app)
    err = capfd.readouterr().err
    assert caught.value.code == 2
    assert says in err and "beat_schedule entry" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


# Celery 5.7 deprecates the task's own queue in favour of task_routes; projects still use it.
@pytest.mark.filterwarnings("ignore::celery.exceptions.CDeprecationWarning")
def test_a_cluster_task_is_sent_through_its_own_apply_async_to_its_own_queue() -> None:
    """A @cluster_task over @app.task(queue="mail") reaches the task's queue, with its own
    expires, whatever Celery version (send_task by name drops them before 5.7)."""
    app = Celery("proj", broker="memory://", set_as_current=False)

    @cluster_task(every="5s", name="mail.digest")
    @app.task(name="proj.digest", queue="mail", expires=60, shared=False)  # this app only
    def digest(ctx: JobContext) -> None:
        """Sends the digest."""

    job = default_registry.get("mail.digest")
    default_registry.remove("mail.digest")
    assert job is not None
    now = datetime.now(UTC)
    dispatch = Dispatch(job=job, occurrence=job.occurrence(now), trigger="schedule", replica="r1")
    assert CeleryAdapter().enqueue_many([dispatch]) == [None]
    with app.connection_for_read() as connection:
        message = connection.SimpleQueue("mail").get(timeout=5)
        headers = message.headers
        message.ack()
    assert headers["task"] == "proj.digest"
    assert headers["cron_bridge"]["occurrence_id"] == dispatch.occurrence.id
    assert headers["expires"] is not None
