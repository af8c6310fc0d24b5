"""``cron-bridge rq-cron``'s parts: the jobs an ``rq cron`` config makes, the zone its cron
fields are read in, and a send again after a lost answer (against a real Redis)."""

from __future__ import annotations

import json
import logging
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from rq import Queue
from rq.cron import CronJob

from cron_bridge import ConfigError, refusals
from cron_bridge.beat.replica import Beat
from cron_bridge.jobs import NAME_PATTERN, Occurrence
from cron_bridge.queues.adapter import Dispatch
from cron_bridge.schedules import Cron, Every
from cron_bridge.stores import store_from_url
from cron_bridge_rq import rq_cron
from cron_bridge_rq.rq_cron import RQCronSender, anchored, job_name, jobs_of, rq_cron_zone
from tests.apps.rq_cron_tasks import cleanup, send_report
from tests.e2e.processes import REPO, cli, command_env


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


def test_a_refused_registration_takes_no_name_and_given_names_stay_where_they_are(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Found by a hostile tester: a refused registration of a function took its ``-2``, so
    ``name='...-2'`` given to another ran as ``...-2-2`` (and fixing the refused line later
    renamed the job and moved its interval's anchor). A refused one takes no name, and a
    name given with ``name=`` is kept wherever it stands in the config."""
    refusals.clear()
    base = "tests.apps.rq_cron_tasks.cleanup"
    registrations = [
        CronJob("default", func=cleanup, interval=60),
        CronJob("default", func=cleanup, cron="0 0 * * * 0 2027"),  # a year: refused
        CronJob("default", func=cleanup, interval=120),
        CronJob("default", func=cleanup, interval=300, name=f"{base}-2"),
    ]
    with caplog.at_level(logging.ERROR):
        jobs = jobs_of(registrations, "UTC", strict=False)
    assert {name: registration for name, (_, registration) in jobs.items()} == {
        base: registrations[0],
        f"{base}-3": registrations[2],
        f"{base}-2": registrations[3],
    }
    assert [(r.name, r.source) for r in refusals.refused()] == [(base, "rq cron")]
    refusals.clear()


def test_a_registration_that_cannot_be_a_job_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError) as caught:
        jobs_of([CronJob("default", func=cleanup, interval=-5, name="bad")], "UTC")
    assert (caught.value.job, caught.value.option, caught.value.value) == ("bad", "interval", -5)


def test_without_strict_a_refused_registration_is_refused_alone_logged_once_and_shown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The others become jobs; the refused one is logged at ERROR once (read twice: by a
    listing and a beat) and shown by /healthz."""
    refusals.clear()
    registrations = [
        CronJob("default", func=cleanup, interval=-5, name="bad"),
        CronJob("default", func=cleanup, cron="R * * * *", name="random"),
        CronJob("default", func=cleanup, interval=5, name="good"),
    ]
    with caplog.at_level(logging.ERROR):
        jobs = jobs_of(registrations, "UTC", strict=False)
        jobs_of(registrations, "UTC", strict=False)
    assert list(jobs) == ["good"]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2 and "'bad'" in errors[0] and "'random'" in errors[1]
    assert [(r.name, r.source) for r in refusals.refused()] == [
        ("bad", "rq cron"),
        ("random", "rq cron"),
    ]
    health = Beat(store_from_url("memory://"), []).health()
    assert [entry["name"] for entry in health["refused"]] == ["bad", "random"]
    assert "interval=-5" in health["refused"][0]["reason"]
    refusals.clear()
    assert "refused" not in Beat(store_from_url("memory://"), []).health()


def test_names_rq_takes_are_kept_in_rq_and_mapped_to_a_job_name_alike_everywhere() -> None:
    """``nightly report (EU)`` runs as a valid job name, the same in every process, distinct
    from a name that differs only in the replaced characters; RQ keeps its own name (its
    registry, its job history key)."""
    assert job_name("nightly report (EU)") == job_name("nightly report (EU)")
    mapped = job_name("nightly report (EU)")
    assert mapped.startswith("nightly-report-EU-") and NAME_PATTERN.fullmatch(mapped)
    assert job_name("nightly report [EU]") != mapped
    assert job_name("plain-name.v2") == "plain-name.v2"
    assert NAME_PATTERN.fullmatch(job_name("(((")) and NAME_PATTERN.fullmatch(job_name("é" * 300))
    registration = CronJob(
        "reports", func=send_report, cron="0 2 * * *", name="nightly report (EU)"
    )
    ((name, (job, kept)),) = jobs_of([registration], "UTC").items()
    assert name == job.name == mapped and kept.name == "nightly report (EU)"


def test_six_field_strings_fire_on_the_seconds_croniter_gives_rq() -> None:
    registration = CronJob("default", func=cleanup, cron="* * * * * */15")
    ((job, _),) = jobs_of([registration], "Europe/Warsaw").values()
    start = datetime(2026, 3, 29, 0, 59, 50, tzinfo=UTC)  # the spring gap begins at 01:00 UTC
    fires = list(job.schedule.occurrences(start, start + timedelta(seconds=70)))
    assert [f.strftime("%H:%M:%S") for f in fires] == [
        "01:00:00",
        "01:00:15",
        "01:00:30",
        "01:00:45",
        "01:01:00",
    ]
    with pytest.raises(ConfigError):  # elsewhere a sixth field is still a typo
        Cron("* * * * * */15")


def test_interval_registrations_are_anchored_where_the_cluster_first_saw_them() -> None:
    """The first replica writes the anchor; one started 10 s later reads the same one and
    arms from it too (the first send is claimed once); a restart an hour later keeps the
    schedule and arms from its start: nothing is sent again."""
    store = store_from_url("memory://")
    registration = CronJob("sync", func=cleanup, interval=86400, name="daily")
    loaded = jobs_of([registration], "UTC")
    jobs = [job for job, _ in loaded.values()]
    regs = {name: reg for name, (_, reg) in loaded.items()}
    first_seen = datetime(2026, 12, 2, 14, 7, 31, 250000, tzinfo=UTC)
    first, since = anchored(store, jobs, regs, first_seen)
    assert since == {"daily": first_seen - timedelta(milliseconds=1)}
    assert first[0].schedule.next_after(since["daily"]) == first_seen
    assert first[0].schedule.next_after(first_seen) == first_seen + timedelta(days=1)
    later, since_later = anchored(store, jobs, regs, first_seen + timedelta(seconds=10))
    assert later[0].schedule == first[0].schedule and since_later == since
    restarted, none = anchored(store, jobs, regs, first_seen + timedelta(hours=1))
    assert restarted[0].schedule == first[0].schedule and none == {}
    other = CronJob("sync", func=cleanup, interval=3600, name="daily")  # its interval changed
    changed = jobs_of([other], "UTC")
    three_days = first_seen + timedelta(days=3)
    moved, _ = anchored(
        store, [j for j, _ in changed.values()], {n: r for n, (_, r) in changed.items()}, three_days
    )
    assert moved[0].schedule.next_after(first_seen + timedelta(days=3, seconds=-1)) == (
        first_seen + timedelta(days=3)
    )


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
    registration = CronJob(
        queue_name,
        func=send_report,
        interval=5,
        args=("x",),
        meta={"owner": "ops"},
        name=f"n{uuid.uuid4().hex[:6]}",
    )
    ((job, _),) = jobs_of([registration], "UTC").values()
    sender = RQCronSender(connection, {job.name: registration})
    occurrence = Occurrence(job=job.name, scheduled_at=datetime(2026, 12, 1, 12, tzinfo=UTC))
    first = Dispatch(job=job, occurrence=occurrence, trigger="schedule", replica="r0")
    again = Dispatch(job=job, occurrence=occurrence, trigger="schedule", replica="r0", again=True)
    assert sender.enqueue_many([first]) == [None]
    assert sender.enqueue_many([again]) == [None]
    jobs = Queue(queue_name, connection=connection).get_jobs()
    assert len(jobs) == 1
    assert jobs[0].id.startswith("cb-") and jobs[0].id.endswith(str(occurrence.epoch_ms))
    assert (jobs[0].args, jobs[0].meta) == (("x",), {"owner": "ops"})
    assert registration.job_options.get("job_id") is None  # the registration is unchanged


def test_list_shows_the_registrations_rq_refuses_as_refused_beside_the_others(
    tmp_path: Path,
) -> None:
    listed = cli(
        "list",
        "-A",
        "tests.apps.rq_cron_mixed",
        "--json",
        env=command_env(tmp_path / "j.jsonl"),
        cwd=REPO,
    )
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert {n for n, r in rows.items() if r.get("refused")} == {"no interval", "both", "minute 61"}
    assert rows[job_name("nightly report (EU)")]["schedule"] == "0 2 * * *"
    assert rows["tests.apps.rq_cron_tasks.cleanup"]["schedule"] == "* * * * * */15"
    assert listed.stderr.count("'minute 61' is refused") == 1


def test_strict_refuses_to_start_in_one_line(tmp_path: Path, redis_server: Any) -> None:
    env = command_env(tmp_path / "j.jsonl")
    run = cli(
        "rq-cron",
        "-u",
        redis_server.url,
        "--store",
        "memory://",
        "--strict",
        "tests.apps.rq_cron_mixed",
        env=env,
        cwd=REPO,
    )
    assert run.returncode == 2, run.stderr
    assert "no interval" in run.stderr and "Traceback" not in run.stderr


def test_list_shows_an_interval_registration_at_its_anchor_or_at_first_deploy(
    tmp_path: Path,
) -> None:
    """NEXT of an interval registration: from the anchor the store keeps (read, not written),
    else "at its first deploy" (no store, or no anchor kept yet), never an epoch multiple."""
    env, name = command_env(tmp_path / "j.jsonl"), job_name("daily sync")
    url = f"sqlite:///{tmp_path}/s.db"

    def daily_row(*store: str) -> dict[str, Any]:
        listed = cli("list", "-A", "tests.apps.rq_cron_mixed", "--json", *store, env=env, cwd=REPO)
        assert listed.returncode == 0, listed.stderr
        return {row["name"]: row for row in json.loads(listed.stdout)}[name]

    assert daily_row()["next_note"] == "at its first deploy, then every 1d"
    assert daily_row()["next"] is None
    store = store_from_url(url)
    assert daily_row("--store", url)["next_note"] == "at its first deploy, then every 1d"
    assert store.control(rq_cron.ANCHORS, f"{name}:86400000") is None  # a listing is no deploy

    deployed = datetime.now(UTC) - timedelta(hours=5, minutes=17, seconds=3)
    registration = CronJob("sync", func=cleanup, interval=86400, name="daily sync")
    ((job, _),) = jobs_of([registration], "UTC").values()
    anchored(store, [job], {name: registration}, deployed)
    store.close()
    row = daily_row("--store", url)
    assert "next_note" not in row
    expected = deployed.replace(microsecond=0) + timedelta(days=1)
    assert datetime.fromisoformat(row["next"]) == expected, (row["next"], deployed)
