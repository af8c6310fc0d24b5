"""periodiq against ``cron-bridge periodiq``: specs generated within periodiq's grammar, each
walked with periodiq's own ``CronSpec.next_valid_date`` and ``validate`` (what its scheduler
does between wake-ups) and with the drop-in's schedule over a year, in the process's local
zone as periodiq reads it (pendulum's, DST included); the fire times must be the same but for
the differences docs/migrating.md names, each applied below as the rule it documents."""

from __future__ import annotations

import importlib.util
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import dramatiq
import dramatiq.broker
import pendulum
import pytest
from dramatiq.brokers.stub import StubBroker
from hypothesis import example, given, settings
from hypothesis import strategies as st
from periodiq import CronSpec, PeriodiqMiddleware, cron

from adapters.dramatiq.tests.differential.clock_changes import gap_end, gap_walls, repeated
from cron_bridge_dramatiq.periodiq import periodic_jobs, periodiq_schedule
from tests.e2e.processes import REPO

NAMED_DIFFERENCES: dict[str, str] = {
    "periodiq.sunday": "periodiq never sends a Sunday written 0, sun or @weekly (its day check "
    "compares ISO weekdays, Sunday 7, with 0); cron-bridge sends it on Sundays.",
    "periodiq.walk_skips": "a time the spec matches that periodiq's next-date arithmetic jumps "
    "over (a month jump keeps the day, an hour jump keeps the minute) is never sent by "
    "periodiq; cron-bridge sends it.",
    "periodiq.dst": "around a daylight saving change periodiq follows pendulum's arithmetic "
    "from its last wake-up, cron-bridge the rules of docs/jobs.md: a wall time in the spring "
    "gap is sent at the gap's end, one in the repeated hour once (every pass for an hour "
    "field of *).",
    # Rows of docs/migrating.md's table that are not about fire times (their tests are the
    # twin test, tests/e2e/test_periodiq.py, and ../test_periodiq_actors.py).
    "periodiq.replicas": "any number of replicas run, each occurrence sent once.",
    "periodiq.start": "nothing is sent at start, only at the minute boundaries.",
    "periodiq.scheduled_at": "scheduled_at is the occurrence's minute, not the second woken at.",
    "periodiq.never_fires": "an actor whose spec never fires is refused alone, said at start.",
    "periodiq.failed_send": "a failed send is recorded failed, not sent again; the beat goes on.",
    "periodiq.posix_tz": "a local zone without a name is refused at start.",
    "periodiq.no_actor": "no periodic actor is one line, exit 2.",
    "periodiq.names": "an actor name that is no job name runs as a mapped job name.",
}
WALKED = ("periodiq.sunday", "periodiq.walk_skips", "periodiq.dst")

ZONES = ("UTC", "Europe/Warsaw", "America/New_York", "Australia/Lord_Howe")
START = datetime(2025, 1, 1, tzinfo=UTC)
END = START + timedelta(days=366)
ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


def periodiq_fires(spec: CronSpec, zone: str) -> list[datetime]:
    """What periodiq sends for the one actor: it wakes at ``next_valid_date`` of its last
    wake-up and sends when ``validate`` agrees (pendulum times in the local zone)."""
    at: Any = pendulum.instance(START).in_timezone(zone)
    end = pendulum.instance(END)
    fires = []
    while True:
        at = spec.next_valid_date(at)
        if at > end:
            return fires
        if spec.validate(at):
            fires.append(datetime.fromtimestamp(at.timestamp(), UTC))


def as_periodiq_means(spec: CronSpec) -> CronSpec:
    """``periodiq.sunday``: the spec with each weekday 0 read as 7, the ISO Sunday its day
    check compares with, keeping which day fields periodiq called restricted."""
    if 0 not in spec.dow:
        return spec
    meant = spec.replace(dow=sorted({7 if day == 0 else day for day in spec.dow}))
    meant.is_dow_restricted = spec.is_dow_restricted
    return meant


def gap_matches(at: datetime, zone: ZoneInfo, spec: CronSpec) -> bool:
    """Whether a wall time of the spring gap ending at ``at`` matches the spec."""
    return any(spec.validate(pendulum.instance(wall)) for wall in gap_walls(at, zone))


def compare(text: str, zone: str) -> dict[str, int]:
    """Walk both over the year; fail on any difference no named one explains.

    Returns:
        How many times each named difference applied.
    """
    spec = cron(text)
    meant = as_periodiq_means(spec)
    tz = ZoneInfo(zone)
    ours = set(periodiq_schedule(spec, zone).occurrences(START, END))
    theirs = set(periodiq_fires(meant, zone))
    used = dict.fromkeys(WALKED, 0)
    used["periodiq.sunday"] = int(meant is not spec)
    for at in sorted(ours - theirs):
        wall = pendulum.instance(at).in_timezone(zone)
        if repeated(at, tz) and meant.validate(wall):
            used["periodiq.dst"] += 1  # sent in the other pass of the hour
        elif meant.validate(wall):
            used["periodiq.walk_skips"] += 1
        elif gap_end(at, tz) and gap_matches(at, tz, meant):
            used["periodiq.dst"] += 1
        else:
            pytest.fail(f"{text!r} in {zone}: cron-bridge sends at {wall}, periodiq does not")
    for at in sorted(theirs - ours):
        wall = pendulum.instance(at).in_timezone(zone)
        if repeated(at, tz):
            used["periodiq.dst"] += 1
        else:
            pytest.fail(f"{text!r} in {zone}: periodiq sends at {wall}, cron-bridge does not")
    return used


def _part(draw: Any, low: int, high: int, names: tuple[str, ...] | None, min_step: int) -> str:
    def value() -> str:
        number = draw(st.integers(low, high))
        if names is not None and number < len(names) and draw(st.booleans()):
            return draw(st.sampled_from([names[number], names[number].upper()]))
        return str(number)

    kind = draw(st.sampled_from(["value", "range", "star", "value-step", "range-step"]))
    if kind == "value":
        return value()
    step = f"/{draw(st.integers(min_step, max(min_step, high - low)))}"
    if kind == "star":
        return "*" + (step if draw(st.booleans()) else "")
    if kind == "value-step":  # periodiq reads "5/15" as 5 alone
        return value() + step
    first = draw(st.integers(low, high))
    last = draw(st.integers(first, high))
    return f"{first}-{last}" + (step if kind == "range-step" else "")


@st.composite
def fields(
    draw: Any, low: int, high: int, names: tuple[str, ...] | None = None, min_step: int = 1
) -> str:
    """One field of periodiq's grammar: ``*``, values, ranges, steps, lists of those."""
    count = draw(st.integers(1, 3))
    return ",".join(_part(draw, low, high, names, min_step) for _ in range(count))


@st.composite
def specs(draw: Any) -> str:
    """A periodiq spec sending at most a dozen times a day (so a year walks in well under a
    second): five fields, or one of periodiq's aliases."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(ALIASES))
    while True:
        minute = draw(fields(0, 59, min_step=5))
        hour = draw(fields(0, 23))
        parsed = cron(f"{minute} {hour} * * *")
        if len(parsed.minute) * len(parsed.hour) <= 12:
            break
    day, month, dow = draw(fields(1, 31)), draw(fields(1, 12)), draw(fields(0, 7, WEEKDAYS))
    return f"{minute} {hour} {day} {month} {dow}"


# The specs issue 37 found read as every day before the fix, and the DST corners.
@example(text="0 0 */15 * *", zone="UTC")
@example(text="0 0 */2 * *", zone="Europe/Warsaw")
@example(text="0 0 1,31 * *", zone="America/New_York")
@example(text="0 22,23,0,1 * * *", zone="Europe/Warsaw")
@example(text="0 0 1 1,12 *", zone="UTC")
@example(text="0 0 * * sat,sun", zone="Australia/Lord_Howe")
@example(text="30 2 * * *", zone="Europe/Warsaw")
@example(text="30 2 * * *", zone="America/New_York")
@example(text="15,45 1,2 * * *", zone="Australia/Lord_Howe")
@example(text="0 0 * 6 mon", zone="UTC")
@example(text="@weekly", zone="Europe/Warsaw")
@example(text="0 0 1 * 0-5,7", zone="UTC")
@given(text=specs(), zone=st.sampled_from(ZONES))
@settings(max_examples=80, deadline=None)
def test_the_drop_in_sends_when_periodiq_sends(text: str, zone: str) -> None:
    """Over a year, cron-bridge sends a periodiq actor exactly when periodiq would, but for
    the named differences."""
    compare(text, zone)


@pytest.mark.parametrize(
    ("text", "zone"),
    [
        ("0,59 * * * *", "Europe/Warsaw"),
        ("@hourly", "Australia/Lord_Howe"),
        ("*/30 * * * 1-5", "America/New_York"),
    ],
)
def test_the_busiest_specs(text: str, zone: str) -> None:
    """Specs sending too often for the generated ones (thousands a year), each in a zone
    with a daylight saving change."""
    compare(text, zone)


def test_the_named_differences_are_each_seen() -> None:
    """Each named difference is one the walks really meet (none is a dead exception)."""
    seen = dict.fromkeys(WALKED, 0)
    for text, zone in [
        ("0 0 * * 0", "UTC"),
        ("0 0 * 6 mon", "UTC"),
        ("30 2 * * *", "Europe/Warsaw"),
    ]:
        for name, count in compare(text, zone).items():
            seen[name] += count
    assert all(seen.values()), seen


def _per_day(text: str) -> int:
    spec = cron(text)
    return len(spec.minute) * len(spec.hour)


FIXTURES = REPO / "tests" / "fixtures" / "declarations" / "periodiq"


def _declared_actors() -> list[Any]:
    """The fixture actors, declared on a stub broker with periodiq's middleware set as the
    global one for the import (the one before it put back)."""
    before = dramatiq.broker.global_broker
    broker = StubBroker()
    broker.add_middleware(PeriodiqMiddleware())
    dramatiq.set_broker(broker)
    try:
        for path in sorted(FIXTURES.glob("*.py")):
            loader = importlib.util.spec_from_file_location(f"periodiq_fixture_{path.stem}", path)
            assert loader is not None and loader.loader is not None
            loader.loader.exec_module(importlib.util.module_from_spec(loader))
    finally:
        dramatiq.broker.global_broker = before
    return [actor for actor in broker.actors.values() if "periodic" in actor.options]


ACTORS = _declared_actors()
REAL_SPECS = sorted({str(actor.options["periodic"]) for actor in ACTORS})


def meaning(text: str) -> str:
    """What periodiq's walk and ``validate`` read of a spec: its parsed fields, without the
    text they came from (``* * * * *`` and ``*/1 * * * *`` parse to the same)."""
    return repr(sorted((k, v) for k, v in vars(cron(text)).items() if k != "parsed_from"))


FIRST_ALIKE: dict[str, str] = {}  # the first real spec of each meaning
for _text in REAL_SPECS:
    FIRST_ALIKE.setdefault(meaning(_text), _text)


def test_the_real_declarations_are_read_by_the_drop_in() -> None:
    """Every fixture actor becomes a job (none refused), with the schedule compared below."""
    jobs, refused = periodic_jobs(ACTORS, "Europe/Warsaw", 30)
    assert refused == {} and len(jobs) == len(ACTORS) >= 10
    for job, actor in jobs.values():
        assert job.schedule == periodiq_schedule(actor.options["periodic"], "Europe/Warsaw")


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(text, marks=[pytest.mark.slow] if _per_day(text) > 24 else [])
        for text in REAL_SPECS
    ],
)
def test_a_real_declaration_fires_as_periodiq_fires_it(text: str) -> None:
    """Each real spec over a year in Warsaw (DST both ways); those sending more than hourly
    are slow (periodiq's walk takes some 60 µs a step). A spec periodiq parses as an earlier
    one (``*/1 * * * *`` as ``* * * * *``) is walked by the earlier one's test: here the
    drop-in must read it alike too, so that the walk holds for both."""
    first = FIRST_ALIKE[meaning(text)]
    if first != text:
        assert _read(text) == _read(first)
        return
    compare(text, "Europe/Warsaw")


def _read(text: str) -> tuple[str, str, bool, bool]:
    """The drop-in's schedule of a spec in Warsaw, as what it fires by."""
    schedule = periodiq_schedule(cron(text), "Europe/Warsaw")
    return schedule.expr, schedule.tz, schedule.day_or, schedule.seconds
