"""rq-scheduler against ``cron-bridge import rq-scheduler``: cron strings generated within the
grammar of the ``crontab`` package rq-scheduler reads them with, each walked with
rq-scheduler's own ``get_next_scheduled_time`` (in the floor venv, rqscheduler_walk.py
beside this file: a send at each score, a score already past sent at the next poll) and
with the stored schedule the importer makes of it, over a year, with the host in each zone
(DST included); the send times must be the same but for the differences docs/migrating.md
names, each applied below as the rule it documents."""

from __future__ import annotations

import functools
import itertools
import json
import os
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st

from cron_bridge.adapters import ConfigError
from cron_bridge.control.schedules import ScheduleEntry
from cron_bridge.schedules import Schedule
from cron_bridge_rq.rq_scheduler import SCHEDULED, plan, stored_spec
from cron_bridge_rq.scheduled_job import ScheduledJob
from tests.conftest import unavailable
from tests.e2e.processes import REPO
from tests.servers import RedisServer

NAMED_DIFFERENCES: dict[str, str] = {
    "rqscheduler.spring_gap": "before the clocks go forward over a time the cron string "
    "matches, rq-scheduler scores that time in the past and sends the job at every poll "
    "(every minute by default) until the gap ends; cron-bridge sends it once, at the gap's "
    "end.",
    "rqscheduler.repeated_hour": "in the hour the clocks go back over, rq-scheduler sends only "
    "in the first pass; cron-bridge sends a cron string whose hour field covers every hour in "
    "both passes, as an hour really elapsed.",
    "rqscheduler.interval_phase": "rq-scheduler counts each interval from the poll that sent "
    "the run (up to its --interval, 60 s, late), so an interval that is not a multiple of its "
    "poll drifts later run by run; cron-bridge keeps the phase of the first run.",
    "rqscheduler.overdue_cron": "a cron job already due at the move (rqscheduler stopped for "
    "it) is sent by rq-scheduler once at its next poll; the imported schedule sends it at its "
    "next cron time (with repeat=N, N runs on both sides).",
    "rqscheduler.fields": "a cron string with seconds other than 0, a year other than *, or a "
    "Z day (days before the month's end) stays with rq-scheduler, said by the importer: "
    "stored schedules have whole minutes, no years and croniter has no Z.",
}

ZONES = ("UTC", "Europe/Warsaw", "America/New_York", "Australia/Lord_Howe")
START = datetime(2025, 1, 1, tzinfo=UTC)
END = START + timedelta(days=366)
FLOOR = REPO / ".venv-queue-floor" / "bin" / "python"
WALKER = Path(__file__).with_name("rqscheduler_walk.py")
POLL = 60  # rqscheduler's default --interval
MAX_FIRES = 1500  # a year of sends walked per example (rq-scheduler's crontab: ~1 ms a step)
WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")


class Walker:
    """rq-scheduler's walk in a floor-venv process of its own, one JSON line each way."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.process = subprocess.Popen(
            [str(FLOOR), str(WALKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def fires(
        self,
        cron: str,
        zone: str,
        *,
        local: bool = False,
        start: datetime = START,
        span: timedelta = END - START,
    ) -> list[datetime] | str:
        """rq-scheduler's send times over ``span`` (a year) from ``start``, or why its
        ``crontab`` refuses the string."""
        assert self.process.stdin is not None and self.process.stdout is not None
        asked = {
            "cron": cron,
            "zone": zone,
            "start": start.timestamp(),
            "end": (start + span).timestamp(),
            "local": local,
        }
        self.process.stdin.write(json.dumps(asked) + "\n")
        self.process.stdin.flush()
        answer = json.loads(self.process.stdout.readline())
        if isinstance(answer, dict):
            return str(answer["refused"])
        return [datetime.fromtimestamp(at, UTC) for at in answer]

    def interval_sends(
        self, url: str, interval: int, first: datetime, poll: int, hours: int
    ) -> list[datetime]:
        """rqscheduler's sends of ``schedule(first, interval=...)`` polling every ``poll``."""
        assert self.process.stdin is not None and self.process.stdout is not None
        end = first + timedelta(hours=hours)
        asked = {
            "interval": interval,
            "url": url,
            "first": first.timestamp(),
            "poll": poll,
            "end": end.timestamp(),
        }
        self.process.stdin.write(json.dumps(asked) + "\n")
        self.process.stdin.flush()
        return [
            datetime.fromtimestamp(at, UTC) for at in json.loads(self.process.stdout.readline())
        ]

    def close(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


@pytest.fixture(scope="module")
def walker() -> Iterator[Walker]:
    if not FLOOR.exists():
        unavailable(
            "rq-scheduler (in the floor venv)",
            FileNotFoundError(f"{FLOOR} is missing: `make test` creates it"),
        )
    found = Walker()
    yield found
    found.close()


def _offset(at: datetime, zone: ZoneInfo) -> timedelta:
    offset = at.astimezone(zone).utcoffset()
    return offset if offset is not None else timedelta(0)


@functools.cache
def _forward_ends(zone: ZoneInfo) -> list[tuple[datetime, timedelta]]:
    """Each instant the clocks went forward in the year, with the gap's width (searched
    once per zone: a year of half hours)."""
    ends, at = [], START
    while at < END:
        step = at + timedelta(minutes=30)
        if _offset(step, zone) > _offset(at, zone):
            low, high = at, step
            while high - low > timedelta(seconds=1):
                mid = low + (high - low) / 2
                low, high = (mid, high) if _offset(mid, zone) == _offset(at, zone) else (low, mid)
            ends.append((high.replace(microsecond=0), _offset(step, zone) - _offset(at, zone)))
        at = step
    return ends


def _repeated(at: datetime, zone: ZoneInfo) -> bool:
    """Whether the wall time of ``at`` exists twice (the clocks went back over it)."""
    wall = at.astimezone(zone).replace(tzinfo=None)
    return (
        wall.replace(tzinfo=zone, fold=0).utcoffset()
        != wall.replace(tzinfo=zone, fold=1).utcoffset()
    )


def _second_pass(at: datetime, zone: ZoneInfo) -> bool:
    """Whether ``at`` is in the second pass of a repeated wall time."""
    wall = at.astimezone(zone).replace(tzinfo=None)
    return _repeated(at, zone) and wall.replace(tzinfo=zone, fold=1).astimezone(UTC) == at


def imported(expr: str, zone: str) -> Schedule:
    """The schedule ``cron-bridge import rq-scheduler`` stores for a ``scheduler.cron(expr)``
    job on a host in ``zone``, as the beat reads it back.

    Raises:
        ConfigError: the importer leaves the job where it is (``option`` says why).
    """
    job = ScheduledJob(
        job_id="j",
        next_at=START,
        task="proj.tasks.report",
        instance=False,
        args=[],
        kwargs={},
        interval=None,
        cron=expr,
        local_zone=False,
        repeat=None,
        queue="default",
        timeout=None,
        result_ttl=-1,
        ttl=None,
        meta={},
        at_front=False,
        cannot=(),
    )
    return _stored(stored_spec(job, zone, START))


def _stored(spec: dict[str, Any]) -> Schedule:
    """The schedule of the stored schedule with the importer's fields ``spec``."""
    fields = ("task", "library", "queue", "args", "kwargs")
    options = {key: value for key, value in spec.items() if key not in fields}
    stored = ScheduleEntry(name="j", options=options, **{f: spec[f] for f in fields})
    return stored.job().schedule


def compare(expr: str, zone: str, walker: Walker, *, generated: bool = True) -> dict[str, int]:
    """Walk both over the year; fail on any difference no named one explains.

    Returns:
        How many times each named difference applied.
    """
    used = dict.fromkeys(NAMED_DIFFERENCES, 0)
    try:
        schedule = imported(expr, zone)
    except ConfigError as exc:
        if exc.option == "cron_string":
            used["rqscheduler.fields"] += 1  # the importer says so; nothing is stored
            if generated:
                event("stays: " + exc.reason)
            return used
        # cron-bridge refuses one that never fires; rq-scheduler must never send it either.
        assert exc.reason == "never fires", exc
        never = walker.fires(expr, zone)
        assert isinstance(never, str) or not never, (expr, never[:3])
        return used
    ours = list(schedule.occurrences(START, END))
    if generated:
        assume(len(ours) <= MAX_FIRES)
        event(f"sends in the year: {'0' if not ours else '<100' if len(ours) < 100 else '100+'}")
    found = walker.fires(expr, zone)
    assert not isinstance(found, str), f"{expr!r}: rq-scheduler refuses it ({found})"
    tz = ZoneInfo(zone)
    theirs = set(found)
    gaps = _forward_ends(tz)
    for at in sorted(set(ours) - theirs):
        if _second_pass(at, tz):
            used["rqscheduler.repeated_hour"] += 1
        else:
            wall = at.astimezone(tz)
            pytest.fail(f"{expr!r} in {zone}: cron-bridge sends at {wall}, rq-scheduler does not")
    for at in sorted(theirs - set(ours)):
        if any(end - width <= at < end for end, width in gaps):
            used["rqscheduler.spring_gap"] += 1
        else:
            wall = at.astimezone(tz)
            pytest.fail(f"{expr!r} in {zone}: rq-scheduler sends at {wall}, cron-bridge does not")
    return used


def _number(draw: Any, low: int, high: int, names: tuple[str, ...] | None = None) -> str:
    value = draw(st.integers(low, high))
    if names and draw(st.booleans()):
        return names[value - low if names is MONTHS else value % 7]
    return str(value)


@st.composite
def _field(
    draw: Any, low: int, high: int, names: tuple[str, ...] | None = None, sparse: bool = False
) -> str:
    """One field as the ``crontab`` package reads it: ``*``, a value, a list, a range, a
    step over either (its first step must stay in range)."""
    kinds = ["value", "list", "range", "step"] + ([] if sparse else ["star"])
    kind = draw(st.sampled_from(kinds))
    if kind == "star":
        return "*"
    if kind == "value":
        return _number(draw, low, high, names)
    if kind == "list":
        values = draw(st.lists(st.integers(low, high), min_size=2, max_size=3, unique=True))
        return ",".join(str(v) for v in values)
    first = draw(st.integers(low, high - 1))
    last = draw(st.integers(first + 1, high))
    if kind == "range":
        return f"{_number(draw, first, first, names) if names is None else first}-{last}"
    step = draw(st.integers(1, max(1, (high - low) // 2)))
    start = draw(st.sampled_from(["*", str(first), f"{first}-{last}"]))
    base = low if start == "*" else first
    assume(base + step <= high)  # crontab refuses a step whose first next value is past the end
    return f"{start}/{step}"


@st.composite
def crontab_strings(draw: Any) -> str:
    minute = draw(_field(0, 59, sparse=True))
    hour = draw(_field(0, 23))
    # Mostly one day field restricted: both at once (which must both match) rarely meet.
    day = draw(st.just("*") | _field(1, 31) | st.sampled_from(["l", "?", "L"]))
    month = draw(_field(1, 12, MONTHS))
    weekday = draw(
        st.just("*")
        | _field(0, 6, WEEKDAYS)
        | st.sampled_from(["7", "mon-fri", "sat-sun", "l5", "?", "MON", "1-7"])
    )
    return " ".join((minute, hour, day, month, weekday))


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(expr=crontab_strings(), zone=st.sampled_from(ZONES))
@example(expr="0 9 1-7 * mon", zone="Europe/Warsaw")  # the first Monday (both day fields)
@example(expr="0 0 */15 * *", zone="UTC")
@example(expr="30 2 * * *", zone="Europe/Warsaw")
@example(expr="0 2 * * sun", zone="America/New_York")
@example(expr="0 * * 3,4,10,11 0", zone="Europe/Warsaw")
@example(expr="0 * * 3,4,10,11 0", zone="America/New_York")
@example(expr="*/30 * * 4,10 sun", zone="Australia/Lord_Howe")
@example(expr="0 0 l * *", zone="UTC")
@example(expr="0 12 * * l5", zone="Europe/Warsaw")
@example(expr="0 0 * * sat-sun", zone="UTC")
@example(expr="0 0 * * 7", zone="UTC")
@example(expr="@weekly", zone="America/New_York")
@example(expr="0 0 1 1 * 2030", zone="UTC")
@example(expr="30 0 0 1 1 * *", zone="UTC")
@example(expr="0 0 z3 * *", zone="UTC")
def test_rq_scheduler_sends_when_the_stored_schedule_does(
    walker: Walker, expr: str, zone: str
) -> None:
    compare(expr, zone, walker)


def test_each_named_difference_is_seen(walker: Walker) -> None:
    """Each named difference of the cron walk applies to at least one real case (none is
    dead text)."""
    seen = dict.fromkeys(NAMED_DIFFERENCES, 0)
    for expr, zone in (
        ("30 2 * * *", "Europe/Warsaw"),
        ("0 * * 10 0", "Europe/Warsaw"),
        ("0 0 1 1 * 2030", "UTC"),
    ):
        for name, count in compare(expr, zone, walker, generated=False).items():
            seen[name] += count
    walked = ("rqscheduler.spring_gap", "rqscheduler.repeated_hour", "rqscheduler.fields")
    assert all(seen[name] for name in walked), seen  # the others: the two tests below


def test_use_local_timezone_moves_no_run(walker: Walker) -> None:
    """rq-scheduler reads a cron string in the host's local time whatever
    ``use_local_timezone`` says: its sends are the same either way."""
    assert walker.fires("0 2 * * *", "Europe/Warsaw") == walker.fires(
        "0 2 * * *", "Europe/Warsaw", local=True
    )
    first = walker.fires("0 2 * * *", "Europe/Warsaw")
    assert not isinstance(first, str)
    assert first[0] == datetime(2025, 1, 1, 1, tzinfo=UTC)  # 02:00 in Warsaw, not UTC


DECLARATIONS = REPO / "tests" / "fixtures" / "declarations" / "rq_scheduler" / "calls.py"


@pytest.mark.redis
def test_real_declarations_move_as_rq_scheduler_runs_them(
    walker: Walker, redis_server: RedisServer, tmp_path: Path
) -> None:
    """The calls of tests/fixtures/declarations/rq_scheduler/ (public projects, rq-scheduler's
    README), made by rq-scheduler on a host in Europe/Warsaw and imported: a cron job's runs
    are rq-scheduler's own for a year (its count with ``repeat``), an interval job's every
    ``interval`` from its score (a score already due: right after the move), a one-off at
    its score; ``result_ttl``, ``ttl`` and ``meta`` go to RQ as given."""
    client = redis.Redis(port=redis_server.port, db=15)
    client.flushdb()
    url = f"{redis_server.url.rsplit('/', 1)[0]}/15"
    env = {**os.environ, "PYTHONPATH": str(REPO), "TZ": "Europe/Warsaw"}
    made = subprocess.run(
        [str(FLOOR), str(DECLARATIONS), url],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    ids: dict[str, str] = json.loads(made.stdout)
    now = datetime.now(UTC)
    moves = {move.job_id: move for move in plan(client, "Europe/Warsaw", now=now)}
    year = now + (END - START)
    for label, job_id in ids.items():
        move = moves[job_id]
        assert not move.left, (label, move.left)
        spec, schedule = move.spec, _stored(move.spec)
        score = datetime.fromtimestamp(float(client.zscore(SCHEDULED, job_id) or 0), UTC)
        ours = list(schedule.occurrences(now, year))
        if "cron" in spec:
            theirs = walker.fires(spec["cron"], "Europe/Warsaw", start=now)
            assert not isinstance(theirs, str) and theirs[0] == score, (label, theirs[:1])
            repeat = 10 if label == "readme-cron" else None
            assert ours == theirs[:repeat], label
        elif "every" in spec:
            interval = timedelta(seconds=int(spec["every"][:-1]))
            first = max(score, (now + timedelta(seconds=10)).replace(microsecond=0))
            count = {"readme-schedule": 10, "trendiguru-5x": 5}.get(label, len(ours))
            assert ours == [first + k * interval for k in range(count)], label
        else:
            assert schedule.next_after(now) == score, label
            assert schedule.next_after(score).year == 9999, label  # once
    readme = moves[ids["readme-cron"]].spec["send"]
    assert readme == {"result_ttl": 300, "ttl": 200, "meta": {"foo": "bar"}}
    assert moves[ids["sei-upload"]].spec["send"] == {"result_ttl": 3600}
    assert moves[ids["readme-schedule"]].spec["send"] == {"result_ttl": -1, "meta": {"foo": "bar"}}


@pytest.mark.redis
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(interval=st.sampled_from([60, 90, 120, 300, 3600]) | st.integers(30, 7200))
def test_interval_jobs_send_as_rq_scheduler_does_when_its_polls_come_on_time(
    walker: Walker, redis_server: RedisServer, interval: int
) -> None:
    """rq-scheduler's own ``enqueue_jobs`` at each 60 s poll against the imported
    ``every=``: the same sends when the interval is a multiple of the poll; else
    ``rqscheduler.interval_phase``, each of its sends the first poll at or after the last
    one plus the interval, while cron-bridge's stay on the first run's phase."""
    url = f"{redis_server.url.rsplit('/', 1)[0]}/15"
    first = datetime(2026, 3, 1, 12, tzinfo=UTC)
    theirs = walker.interval_sends(url, interval, first, POLL, hours=12)
    job = ScheduledJob(
        job_id="j",
        next_at=first,
        task="proj.tasks.sync",
        instance=False,
        args=[],
        kwargs={},
        interval=interval,
        cron=None,
        local_zone=False,
        repeat=None,
        queue="default",
        timeout=None,
        result_ttl=-1,
        ttl=None,
        meta={},
        at_front=False,
        cannot=(),
    )
    ours = list(
        _stored(stored_spec(job, "UTC", first - timedelta(hours=1))).occurrences(
            first - timedelta(seconds=1), theirs[-1]
        )
    )
    assert ours == [first + k * timedelta(seconds=interval) for k in range(len(ours))]
    if interval % POLL == 0:
        assert ours == theirs
        return
    # rqscheduler.interval_phase: the documented rule, run by run.
    assert theirs[0] == first
    for before, after in itertools.pairwise(theirs):
        due = before + timedelta(seconds=interval)
        assert due <= after < due + timedelta(seconds=POLL), (before, after)


@pytest.mark.parametrize("repeat", [None, 2, 5])
def test_a_cron_job_due_at_the_move_is_sent_at_its_next_cron_time(
    walker: Walker, repeat: int | None
) -> None:
    """``rqscheduler.overdue_cron``: rqscheduler, started again, would send a job whose
    score passed at its first poll, then at the next cron time; the imported schedule sends
    from the next cron time on, the same as rq-scheduler after that first send. With
    ``repeat=N`` both send N times: rq-scheduler the overdue run and N-1 more, the imported
    schedule N from its next cron time."""
    moved = datetime(2026, 3, 1, 12, 20, tzinfo=UTC)
    job = ScheduledJob(
        job_id="j",
        next_at=moved - timedelta(minutes=20),
        task="proj.tasks.r",
        instance=False,
        args=[],
        kwargs={},
        interval=None,
        cron="0 * * * *",
        local_zone=False,
        repeat=repeat,
        queue="default",
        timeout=None,
        result_ttl=-1,
        ttl=None,
        meta={},
        at_front=False,
        cannot=(),
    )
    ours = list(
        _stored(stored_spec(job, "Europe/Warsaw", moved)).occurrences(
            moved, moved + timedelta(days=2)
        )
    )
    theirs = walker.fires("0 * * * *", "Europe/Warsaw", start=moved, span=timedelta(days=2))
    assert not isinstance(theirs, str)
    assert [moved, *theirs][1 : len(ours) + 1] == ours  # all but rq-scheduler's overdue send
    if repeat is not None:
        assert len([moved, *theirs][:repeat]) == len(ours) == repeat
