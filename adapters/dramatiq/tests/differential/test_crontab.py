"""dramatiq-crontab against ``cron-bridge dramatiq-crontab``: crontab specs generated within
APScheduler 3's ``CronTrigger.from_crontab`` grammar (what ``@cron(...)`` builds, in Django's
``TIME_ZONE``), each walked with the trigger's own ``get_next_fire_time`` (as APScheduler's
scheduler walks it) and with the drop-in's schedule over a year in several zones, DST
included; the fire times must be the same but for the differences docs/migrating.md names,
each applied below as the rule it documents."""

from __future__ import annotations

import bisect
import importlib.util
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import dramatiq
import pytest
from apscheduler.schedulers.blocking import BlockingScheduler
from apscheduler.triggers.cron import CronTrigger
from dramatiq.brokers.stub import StubBroker
from hypothesis import example, given, settings
from hypothesis import strategies as st

from adapters.dramatiq.tests.differential.clock_changes import (
    gap_end,
    gap_walls,
    in_gap,
    offset,
    repeated,
)
from cron_bridge.schedules import Cron
from cron_bridge_dramatiq.crontab import crontab_jobs
from tests.e2e.processes import REPO

NAMED_DIFFERENCES: dict[str, str] = {
    "crontab.dst_gap": "a wall time the spring-forward change skips is sent by APScheduler "
    "read with the offset before the change (02:30 at 03:30 in Warsaw, only once if 03:30 "
    "fires too), by cron-bridge at the end of the gap (03:00).",
    "crontab.after_spring_gap": "when a spring-forward change lies between two of its fire "
    "times, APScheduler 3 skips the next one if its wall time is within the gap's width after "
    "midnight (a daily 00:30 does not run the day after the change in Warsaw); cron-bridge "
    "sends it.",
    "crontab.dst_fold": "a fixed-hour time in the hour the clocks go back over is sent by "
    "APScheduler in both passes, by cron-bridge in the first only (as docs/jobs.md says).",
    # Rows of docs/migrating.md's table that are not about fire times (their tests are the
    # twin test, tests/e2e/test_dramatiq_crontab.py, and ../test_crontab_actors.py).
    "crontab.replicas": "any number of replicas are active, each occurrence sent once.",
    "crontab.interval": "@interval sends fall on multiples of N s since the Unix epoch, "
    "whatever the trigger's start_date.",
    "crontab.misfire_grace": "a send up to 30 s late still goes out.",
    "crontab.refused": "a registration that cannot run is refused alone, said at start.",
    "crontab.jitter": "a trigger's jitter delays each send by a share every replica draws "
    "alike from the occurrence id, not at random.",
    "crontab.refused_options": "a jitter, end_date, args or kwargs cron-bridge cannot carry "
    "refuses that registration alone, said at start.",
    "crontab.names": "an actor name that is no job name runs as a mapped job name.",
}
WALKED = ("crontab.dst_gap", "crontab.after_spring_gap", "crontab.dst_fold")

ZONES = ("UTC", "Europe/Warsaw", "America/New_York", "Australia/Lord_Howe")
START = datetime(2025, 1, 1, tzinfo=UTC)
END = START + timedelta(days=366)
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")  # APScheduler 3: mon is 0
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
BROKER = StubBroker()


@dramatiq.actor(broker=BROKER)
def task() -> None:
    pass


def trigger_fires(trigger: CronTrigger) -> list[datetime]:
    """What APScheduler sends: each next fire time from the previous one, as its scheduler
    asks the trigger (``get_next_fire_time(previous, now)``)."""
    fires = []
    at = trigger.get_next_fire_time(None, START + timedelta(microseconds=1))
    while at is not None and at <= END:
        fires.append(at.astimezone(UTC))
        at = trigger.get_next_fire_time(at, at)
    return fires


def drop_in(trigger: CronTrigger) -> Cron:
    """The schedule the drop-in reads from the registration ``@cron`` makes."""
    scheduler = BlockingScheduler()
    scheduler.add_job(task.send, trigger, name="task")
    jobs, refused = crontab_jobs(scheduler.get_jobs())
    assert not refused, refused
    schedule = jobs["task"][0].schedule
    assert isinstance(schedule, Cron)
    return schedule


def compare(text: str, zone: str) -> dict[str, int]:
    """Walk both over the year; fail on any difference no named one explains.

    Returns:
        How many times each named difference applied.
    """
    trigger = CronTrigger.from_crontab(text, timezone=ZoneInfo(zone))
    schedule = drop_in(trigger)
    ours = set(schedule.occurrences(START, END))
    theirs = set(trigger_fires(trigger))
    tz = ZoneInfo(zone)
    used = dict.fromkeys(WALKED, 0)
    fired = sorted(theirs)
    for at in sorted(ours - theirs):
        if gap_end(at, tz) and any(schedule.matches_wall(w) for w in gap_walls(at, tz)):
            used["crontab.dst_gap"] += 1
        elif skipped_after_the_gap(at, fired, tz):
            used["crontab.after_spring_gap"] += 1
        else:
            pytest.fail(
                f"{text!r} in {zone}: cron-bridge sends at {at.astimezone(tz)}, "
                "APScheduler does not"
            )
    for at in sorted(theirs - ours):
        if repeated(at, tz) and at - timedelta(hours=1) in ours | theirs:
            used["crontab.dst_fold"] += 1
        elif read_before_the_gap(at, tz):
            used["crontab.dst_gap"] += 1
        else:
            pytest.fail(
                f"{text!r} in {zone}: APScheduler fires at {at.astimezone(tz)}, "
                "cron-bridge does not"
            )
    return used


def skipped_after_the_gap(at: datetime, fired: list[datetime], zone: ZoneInfo) -> bool:
    """``crontab.after_spring_gap``: whether the clocks went forward since APScheduler's fire
    before ``at`` and ``at``'s wall time is within that change's width after midnight."""
    index = bisect.bisect_left(fired, at)
    previous = fired[index - 1] if index else START
    width = offset(at, zone) - offset(previous, zone)
    wall = at.astimezone(zone)
    since_midnight = timedelta(hours=wall.hour, minutes=wall.minute)
    return width > timedelta(0) and since_midnight < width


def read_before_the_gap(at: datetime, zone: ZoneInfo) -> bool:
    """``crontab.dst_gap``: whether ``at`` is a wall time of a spring gap read with the
    offset before it, where APScheduler fires one."""
    before = offset(at - timedelta(hours=3), zone)
    wall = (at + before).replace(tzinfo=None)
    return in_gap(wall, zone) and wall.replace(tzinfo=zone, fold=0).astimezone(UTC) == at


def _number(draw: Any, low: int, high: int, names: tuple[str, ...] | None) -> str:
    number = draw(st.integers(low, high))
    if names and draw(st.booleans()):
        name = names[number - low]
        return draw(st.sampled_from([name, name.upper(), name.title()]))
    return str(number)


def _part(draw: Any, low: int, high: int, names: tuple[str, ...] | None, min_step: int) -> str:
    kind = draw(st.sampled_from(["value", "range", "star", "value-step", "range-step"]))
    first = draw(st.integers(low, high))
    last = draw(st.integers(first, high))
    if kind == "value" or (kind == "value-step" and first + min_step > high):
        return _number(draw, first, first, names and names[first - low :])
    if kind == "star":
        step = draw(st.integers(min_step, high - low))
        return "*" + (f"/{step}" if draw(st.booleans()) else "")
    if kind == "value-step":  # from the value to the field's end
        return f"{first}/{draw(st.integers(min_step, high - first))}"
    if names is not None and draw(st.booleans()):  # a name range, as APScheduler reads it
        return f"{names[first - low]}-{names[last - low]}"
    if kind == "range-step" and last - first >= min_step:
        return f"{first}-{last}/{draw(st.integers(min_step, last - first))}"
    return f"{first}-{last}"


@st.composite
def fields(
    draw: Any,
    low: int,
    high: int,
    names: tuple[str, ...] | None = None,
    min_step: int = 1,
    last: bool = False,
) -> str:
    """One field of from_crontab's grammar: ``*``, values, ranges, steps, names, ``last``."""
    parts = [_part(draw, low, high, names, min_step) for _ in range(draw(st.integers(1, 3)))]
    if last and draw(st.integers(0, 4)) == 0:
        parts.append("last")
    return ",".join(draw(st.permutations(parts)))


@st.composite
def specs(draw: Any) -> str:
    """A crontab spec APScheduler accepts, sending at most a dozen times a day (so a year
    walks in well under a second)."""
    minute, hour = draw(fields(0, 59, min_step=5)), draw(fields(0, 23))
    if _count(minute, 0) * _count(hour, 1) > 12:  # a few minutes of a few hours instead
        minute = str(draw(st.integers(0, 59)))
        first = draw(st.integers(0, 23))
        hour = f"{first}-{min(23, first + draw(st.integers(0, 11)))}"
    day = draw(fields(1, 31, last=True))
    month = draw(fields(1, 12, MONTHS))
    dow = draw(fields(0, 6, WEEKDAYS))
    return f"{minute} {hour} {day} {month} {dow}"


def _count(field: str, position: int) -> int:
    """How many values the minute (0) or hour (1) field matches, as APScheduler reads it."""
    spec = ["0", "0", "*", "*", "*"]
    spec[position] = field
    trigger = CronTrigger.from_crontab(" ".join(spec), timezone=UTC)
    found = {f.name: f for f in trigger.fields}["minute" if position == 0 else "hour"]
    return len(_values(found, 0, 59 if position == 0 else 23))


def _values(field: Any, low: int, high: int) -> list[int]:
    probe = (
        (lambda v: datetime(2000, 1, 1, 0, v))
        if field.name == "minute"
        else (lambda v: datetime(2000, 1, 1, v))
    )
    return [v for v in range(low, high + 1) if field.get_next_value(probe(v)) == v]


@example(text="0 9 1-7 * mon", zone="Europe/Warsaw")  # the first Monday
@example(text="0 0 13 * fri", zone="America/New_York")
@example(text="0 0 * * 0", zone="UTC")  # Mondays in APScheduler 3
@example(text="0 0 * * 6", zone="Australia/Lord_Howe")  # Sundays
@example(text="0 23 last * *", zone="Europe/Warsaw")
@example(text="30 2 * * *", zone="Europe/Warsaw")
@example(text="30 2 * * *", zone="America/New_York")
@example(text="15,45 1,2 * * *", zone="Australia/Lord_Howe")
@given(text=specs(), zone=st.sampled_from(ZONES))
@settings(max_examples=80, deadline=None)
def test_the_drop_in_sends_when_apscheduler_fires(text: str, zone: str) -> None:
    """Over a year, cron-bridge sends a dramatiq-crontab actor exactly when APScheduler's
    trigger fires, but for the named differences."""
    compare(text, zone)


@pytest.mark.parametrize(
    ("text", "zone"),
    [
        ("0,59 * * * *", "Europe/Warsaw"),
        ("0 * * * *", "Australia/Lord_Howe"),
        ("*/30 * * * mon-fri", "America/New_York"),
    ],
)
def test_the_busiest_specs(text: str, zone: str) -> None:
    """Specs sending too often for the generated ones (thousands a year), each in a zone
    with a daylight saving change."""
    compare(text, zone)


FIXTURES = REPO / "tests" / "fixtures" / "declarations" / "dramatiq_crontab"


def _declarations() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for path in sorted(FIXTURES.glob("*.py")):
        loader = importlib.util.spec_from_file_location(f"crontab_fixture_{path.stem}", path)
        assert loader is not None and loader.loader is not None
        module = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(module)
        found += module.DECLARATIONS
    return found


DECLARATIONS = _declarations()


def _per_day(text: str) -> int:
    fields_ = {f.name: f for f in CronTrigger.from_crontab(text, timezone=UTC).fields}
    return len(_values(fields_["minute"], 0, 59)) * len(_values(fields_["hour"], 0, 23))


def test_the_real_declarations_are_read_by_the_drop_in() -> None:
    """Every fixture registration (as ``@cron`` makes it, in Django's zone) becomes a job."""
    broker = StubBroker()
    scheduler = BlockingScheduler()
    for index, (text, _) in enumerate(DECLARATIONS):
        actor: Any = dramatiq.actor(actor_name=f"real_{index}", broker=broker)(lambda: None)
        scheduler.add_job(
            actor.send,
            CronTrigger.from_crontab(text, timezone=ZoneInfo("Europe/Berlin")),
            name=actor.actor_name,
        )
    jobs, refused = crontab_jobs(scheduler.get_jobs())
    assert refused == {} and len(jobs) == len(DECLARATIONS) >= 10


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(text, marks=[pytest.mark.slow] if _per_day(text) > 24 else [])
        for text in sorted({text for text, _ in DECLARATIONS})
    ],
)
def test_a_real_declaration_fires_as_apscheduler_fires_it(text: str) -> None:
    """Each real spec over a year in Berlin (dramatiq-crontab's documented zone, DST both
    ways); those sending more than hourly are slow. A spec APScheduler parses as an earlier
    one (``*/1 * * * *`` as ``* * * * *``) is walked by the earlier one's test: here the
    drop-in must read it alike too, so that the walk holds for both."""
    first = FIRST_ALIKE[meaning(text)]
    if first != text:
        assert _read(text) == _read(first)
        return
    compare(text, "Europe/Berlin")


def meaning(text: str) -> str:
    """What APScheduler's trigger fires by: each field's parsed expressions, without the text
    (a step of 1 is none: ``AllExpression`` and ``RangeExpression`` step by ``step or 1``)."""
    trigger = CronTrigger.from_crontab(text, timezone=UTC)
    return repr(
        [
            (
                field.name,
                [
                    (
                        type(e).__name__,
                        sorted({**vars(e), "step": getattr(e, "step", 0) or 1}.items()),
                    )
                    for e in field.expressions
                ],
            )
            for field in trigger.fields
        ]
    )


FIRST_ALIKE: dict[str, str] = {}  # the first real spec of each meaning
for _text in sorted({text for text, _ in DECLARATIONS}):
    FIRST_ALIKE.setdefault(meaning(_text), _text)


def _read(text: str) -> tuple[str, str, bool, bool]:
    """The drop-in's schedule of a spec in Berlin, as what it fires by."""
    schedule = drop_in(CronTrigger.from_crontab(text, timezone=ZoneInfo("Europe/Berlin")))
    return schedule.expr, schedule.tz, schedule.day_or, schedule.seconds


def test_the_named_differences_are_each_seen() -> None:
    """Each named difference is one the walks really meet (none is a dead exception)."""
    seen = dict.fromkeys(WALKED, 0)
    for text in ("30 2 * * *", "0 0 * * *"):
        for name, count in compare(text, "Europe/Warsaw").items():
            seen[name] += count
    assert all(seen.values()), seen
