"""The misfire rules and catch-up, on a fake timeline."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cron_bridge import Job, declare
from cron_bridge.beat.planning import Planned, catch_up, plan, plan_one

T = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def job(misfire: str = "skip") -> Job:
    return declare(
        "j", every="1m", misfire=misfire, misfire_grace="30s", target="inline", handler=print
    )


def summary(items: list[Planned]) -> list[tuple[str, str, bool]]:
    return [(i.occurrence.scheduled_at.strftime("%H:%M"), i.trigger, i.run) for i in items]


def test_an_occurrence_within_the_grace_runs_on_schedule() -> None:
    """Late by less than misfire_grace is on time."""
    decided = plan(job(), [T], T + timedelta(seconds=29))
    assert summary(decided.items) == [("12:00", "schedule", True)]


def test_skip_records_every_misfire_missed() -> None:
    """With misfire="skip" nothing late runs; each late occurrence is to be recorded missed."""
    due = [T, T + timedelta(minutes=1), T + timedelta(minutes=2)]
    decided = plan(job(), due, T + timedelta(minutes=2, seconds=40))
    assert summary(decided.items) == [
        ("12:00", "schedule", False),
        ("12:01", "schedule", False),
        ("12:02", "schedule", False),
    ]


def test_run_once_runs_the_latest_misfire_only() -> None:
    """With misfire="run-once" the latest late occurrence runs (trigger misfire), others missed."""
    due = [T, T + timedelta(minutes=1), T + timedelta(minutes=2)]
    decided = plan(job("run-once"), due, T + timedelta(minutes=2, seconds=40))
    assert summary(decided.items) == [
        ("12:00", "schedule", False),
        ("12:01", "schedule", False),
        ("12:02", "misfire", True),
    ]


def test_an_on_time_occurrence_supersedes_the_misfire() -> None:
    """When an on-time occurrence runs now, the late ones are only recorded missed."""
    due = [T, T + timedelta(minutes=1), T + timedelta(minutes=2)]
    decided = plan(job("run-once"), due, T + timedelta(minutes=2, seconds=10))
    assert summary(decided.items) == [
        ("12:00", "schedule", False),
        ("12:01", "schedule", False),
        ("12:02", "schedule", True),
    ]


def test_only_the_newest_misfires_are_listed() -> None:
    """A long outage lists the newest 100 misfires and counts the rest."""
    due = [T + timedelta(minutes=n) for n in range(500)]
    decided = plan(job(), due, T + timedelta(days=1))
    assert len(decided.items) == 100
    assert decided.dropped == 400
    assert decided.items[-1].occurrence.scheduled_at == due[-1]


def test_catch_up_covers_the_last_day_and_only_known_jobs() -> None:
    """Jobs with a last claimed occurrence catch up (at most 24 h back); new jobs do not."""
    known = job("run-once")
    other = declare("new", every="1m", misfire="run-once", target="inline", handler=print)
    now = T + timedelta(days=3, seconds=45)
    plans = catch_up([known, other], {"j": T}, now)
    (only,) = plans
    times = [i.occurrence.scheduled_at for i in only.items]
    assert min(times) > now - timedelta(hours=24)
    [ran] = [i for i in only.items if i.run]
    assert ran.trigger == "misfire"
    assert catch_up([other], {}, now) == []


def seconds_job(**options: object) -> Job:
    return declare("s", every="1s", misfire_grace="30s", target="inline", handler=print, **options)  # type: ignore[arg-type]


def test_a_late_batch_is_coalesced_into_its_latest_occurrence() -> None:
    """Three occurrences due together (the store was down for three seconds, within the
    grace): the latest runs, the others are missed, saying they were coalesced into it."""
    due = [T, T + timedelta(seconds=1), T + timedelta(seconds=2)]
    decided = plan(seconds_job(), due, T + timedelta(seconds=3))
    latest = decided.items[-1].occurrence.id
    assert [(i.run, i.reason) for i in decided.items] == [
        (False, f"coalesced into {latest}"),
        (False, f"coalesced into {latest}"),
        (True, None),
    ]


def test_without_coalesce_or_with_overlap_allowed_every_occurrence_of_a_batch_runs() -> None:
    """coalesce=False, or overlap="allow" (runs may overlap by choice): all three run."""
    due = [T, T + timedelta(seconds=1), T + timedelta(seconds=2)]
    for options in ({"coalesce": False}, {"overlap": "allow"}):
        decided = plan(seconds_job(**options), due, T + timedelta(seconds=3))
        assert [i.run for i in decided.items] == [True, True, True], options


def test_plan_one_decides_as_plan_does_for_a_single_occurrence() -> None:
    """The beat plans a lone due occurrence with ``plan_one``: for every misfire rule, grace,
    jitter and lateness it decides what ``plan`` decides for a list of that one occurrence."""
    jobs = [
        declare(
            "j",
            every="1m",
            misfire=misfire,
            misfire_grace=grace,
            jitter=jitter,
            target="inline",
            handler=print,
        )
        for misfire in ("skip", "run-once")
        for grace in ("1ms", "1s", "30s")
        for jitter in ("0s", "20s")
    ]
    lateness = [
        timedelta(milliseconds=ms)
        for ms in (0, 1, 999, 1000, 1001, 29_999, 30_000, 30_001, 50_001, 3_600_000)
    ]
    compared = 0
    for each in jobs:
        for late in lateness:
            assert plan_one(each, T, T + late) == plan(each, [T], T + late), (each, late)
            compared += 1
    assert compared == 120
