"""Schedules: cron fields, our DST rules in Warsaw and New York, intervals anchored to the epoch."""

from __future__ import annotations

import itertools
import pickle
import sys
import threading
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from cron_bridge import ConfigError, Cron, Every
from cron_bridge.schedules import parse_duration


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def fire_times(expr: str, tz: str, start: str, end: str) -> list[str]:
    """Occurrences between two UTC times, shown as local ISO times with their offsets."""
    zone = ZoneInfo(tz)
    return [
        t.astimezone(zone).isoformat(timespec="minutes")
        for t in Cron(expr, tz=tz).occurrences(utc(start), utc(end))
    ]


DST_TABLE = [
    pytest.param(
        "30 2 * * *",
        "Europe/Warsaw",
        "2026-03-27T12:00",
        "2026-03-30T12:00",
        ["2026-03-28T02:30+01:00", "2026-03-29T03:00+02:00", "2026-03-30T02:30+02:00"],
        id="warsaw-spring-fixed-hour-fires-at-the-end-of-the-gap",
    ),
    pytest.param(
        "30 2 * * *",
        "Europe/Warsaw",
        "2026-10-23T12:00",
        "2026-10-26T12:00",
        ["2026-10-24T02:30+02:00", "2026-10-25T02:30+02:00", "2026-10-26T02:30+01:00"],
        id="warsaw-fall-fixed-hour-fires-once-in-the-first-pass",
    ),
    pytest.param(
        "0 * * * *",
        "Europe/Warsaw",
        "2026-10-24T22:30",
        "2026-10-25T02:30",
        [
            "2026-10-25T01:00+02:00",
            "2026-10-25T02:00+02:00",
            "2026-10-25T02:00+01:00",
            "2026-10-25T03:00+01:00",
        ],
        id="warsaw-fall-hourly-fires-in-both-passes",
    ),
    pytest.param(
        "0 */1 * * *",
        "Europe/Warsaw",
        "2026-10-24T23:30",
        "2026-10-25T01:30",
        ["2026-10-25T02:00+02:00", "2026-10-25T02:00+01:00"],
        id="warsaw-fall-step-over-every-hour-counts-as-wildcard",
    ),
    pytest.param(
        "0 1-3 * * *",
        "Europe/Warsaw",
        "2026-10-24T22:30",
        "2026-10-25T03:30",
        ["2026-10-25T01:00+02:00", "2026-10-25T02:00+02:00", "2026-10-25T03:00+01:00"],
        id="warsaw-fall-hour-range-is-a-fixed-hour",
    ),
    pytest.param(
        "0 * * * *",
        "Europe/Warsaw",
        "2026-03-28T23:30",
        "2026-03-29T02:30",
        ["2026-03-29T01:00+01:00", "2026-03-29T03:00+02:00", "2026-03-29T04:00+02:00"],
        id="warsaw-spring-hourly-skips-the-missing-hour-once",
    ),
    pytest.param(
        "*/20 2 * * *",
        "Europe/Warsaw",
        "2026-03-28T12:00",
        "2026-03-29T12:00",
        ["2026-03-29T03:00+02:00"],
        id="warsaw-spring-several-missing-times-fire-once",
    ),
    pytest.param(
        "0 2 * * *",
        "America/New_York",
        "2026-03-07T12:00",
        "2026-03-09T12:00",
        ["2026-03-08T03:00-04:00", "2026-03-09T02:00-04:00"],
        id="new-york-spring-fixed-hour-fires-at-the-end-of-the-gap",
    ),
    pytest.param(
        "30 1 * * *",
        "America/New_York",
        "2026-10-31T12:00",
        "2026-11-02T12:00",
        ["2026-11-01T01:30-04:00", "2026-11-02T01:30-05:00"],
        id="new-york-fall-fixed-hour-fires-once-in-the-first-pass",
    ),
    pytest.param(
        "*/30 * * * *",
        "America/New_York",
        "2026-11-01T04:15",
        "2026-11-01T07:15",
        [
            "2026-11-01T00:30-04:00",
            "2026-11-01T01:00-04:00",
            "2026-11-01T01:30-04:00",
            "2026-11-01T01:00-05:00",
            "2026-11-01T01:30-05:00",
            "2026-11-01T02:00-05:00",
        ],
        id="new-york-fall-wildcard-hour-fires-in-both-passes",
    ),
    pytest.param(
        "0 * * * *",
        "America/New_York",
        "2026-03-08T05:30",
        "2026-03-08T08:30",
        ["2026-03-08T01:00-05:00", "2026-03-08T03:00-04:00", "2026-03-08T04:00-04:00"],
        id="new-york-spring-hourly-skips-the-missing-hour-once",
    ),
]


@pytest.mark.parametrize(("expr", "tz", "start", "end", "expected"), DST_TABLE)
def test_dst_rules(expr: str, tz: str, start: str, end: str, expected: list[str]) -> None:
    """Each row: the local fire times our DST rules give across one transition."""
    assert fire_times(expr, tz, start, end) == expected


def test_next_after_is_strictly_after_even_inside_the_repeated_hour() -> None:
    """Asking from inside the first pass of a fall-back hour still finds the second pass."""
    hourly = Cron("30 * * * *", tz="Europe/Warsaw")
    first_pass = utc("2026-10-25T00:30")  # 02:30+02:00
    second_pass = utc("2026-10-25T01:30")  # 02:30+01:00
    assert hourly.next_after(first_pass - timedelta(seconds=1)) == first_pass
    assert hourly.next_after(first_pass) == second_pass
    daily = Cron("30 2 * * *", tz="Europe/Warsaw")
    assert daily.next_after(first_pass) == utc("2026-10-26T01:30")


def test_aliases_and_utc() -> None:
    """``@hourly``-style aliases read as their expressions; UTC is the default zone."""
    start = utc("2026-05-01T10:20")
    assert Cron("@hourly").next_after(start) == utc("2026-05-01T11:00")
    assert Cron("@daily").next_after(start) == utc("2026-05-02T00:00")
    assert Cron("@weekly").next_after(start) == utc("2026-05-03T00:00")  # a Sunday
    assert Cron("@monthly").next_after(start) == utc("2026-06-01T00:00")
    assert Cron("@yearly").next_after(start) == utc("2027-01-01T00:00")
    assert Cron("@daily") == Cron("0 0 * * *")


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("61 * * * *", "bad expression"),
        ("* * *", "5 fields"),
        ("0 0 * * * *", "5 fields"),
        ("0 0 30 2 *", "never fires"),
        ("0 0 31 4 *", "never fires"),
        ("@reboot", "5 fields"),
        ("banana", "5 fields"),
    ],
)
def test_bad_cron_expressions_raise_config_error(expr: str, reason: str) -> None:
    """A bad or never-firing expression is a ConfigError naming the option and the value."""
    with pytest.raises(ConfigError, match=reason) as caught:
        Cron(expr)
    assert caught.value.option == "cron"
    assert caught.value.value == expr
    assert repr(expr) in str(caught.value)


def test_unknown_zone_raises_config_error() -> None:
    """An unknown zone names the tz option and the value."""
    with pytest.raises(ConfigError, match="unknown time zone") as caught:
        Cron("0 3 * * *", tz="Europe/Atlantis")
    assert (caught.value.option, caught.value.value) == ("tz", "Europe/Atlantis")


def test_naive_datetimes_are_refused() -> None:
    """Schedules only take aware datetimes."""
    with pytest.raises(ValueError, match="aware"):
        Cron("* * * * *").next_after(datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="aware"):
        Every("5m").next_after(datetime(2026, 1, 1))


def test_intervals_are_anchored_to_the_epoch() -> None:
    """Every replica gets the same occurrences whatever time it starts at."""
    every = Every("90s")
    a = list(every.occurrences(utc("2026-01-01T00:00:07"), utc("2026-01-01T00:10")))
    b = list(every.occurrences(utc("2026-01-01T00:01:01"), utc("2026-01-01T00:10")))
    assert a[-len(b) :] == b
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert all((t - epoch) % timedelta(seconds=90) == timedelta(0) for t in a)
    assert Every("1h", offset="15m").next_after(utc("2026-01-01T10:20")) == utc("2026-01-01T11:15")
    assert Every(timedelta(minutes=5)) == Every("5m") == Every(300)


def test_intervals_count_elapsed_time_across_dst() -> None:
    """An hourly interval stays one hour apart through a fall-back night."""
    times = list(Every("1h").occurrences(utc("2026-10-24T22:30"), utc("2026-10-25T03:30")))
    assert [b - a for a, b in itertools.pairwise(times)] == [timedelta(hours=1)] * 4


def test_occurrences_are_after_start_up_to_and_including_end() -> None:
    """``occurrences(start, end)`` excludes start and includes end."""
    times = list(Every("1m").occurrences(utc("2026-01-01T00:00"), utc("2026-01-01T00:03")))
    assert times == [utc("2026-01-01T00:01"), utc("2026-01-01T00:02"), utc("2026-01-01T00:03")]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("5m", 300),
        ("1h", 3600),
        ("1d", 86400),
        ("1h30m", 5400),
        ("250ms", 0.25),
        (12, 12),
        (1.5, 1.5),
        (timedelta(minutes=2), 120),
        ("5", 5),
        ("2.5", 2.5),
    ],
)
def test_durations(text: object, seconds: float) -> None:
    """Durations read as strings, numbers of seconds (as text too: ``--shutdown-timeout 5``)
    or timedeltas."""
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize(
    ("value", "option"), [("5 parsecs", "every"), ("0s", "every"), (-1, "every")]
)
def test_bad_intervals_raise_config_error(value: object, option: str) -> None:
    """A bad or non-positive interval is a ConfigError for the ``every`` option."""
    with pytest.raises(ConfigError) as caught:
        Every(value)  # type: ignore[arg-type]
    assert caught.value.option == option


def test_offset_must_be_shorter_than_the_interval() -> None:
    """An offset outside [0, interval) is refused."""
    with pytest.raises(ConfigError, match="offset"):
        Every("5m", offset="5m")


ZONES = ["Europe/Warsaw", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "UTC"]
MINUTES = ["0", "30", "*/15", "5,35", "59"]
HOURS = ["*", "2", "1", "1-3", "*/2", "*/1", "0,2,14", "23"]
DAYS = ["*", "1", "15", "*/10"]
MONTHS = ["*", "3", "10,11", "*/3", "4,9,10"]
WEEKDAYS = ["*", "0", "1-5", "6"]
# Windows around the 2026 transitions of the zones above, and one quiet week.
STARTS = [
    utc("2026-03-07T00:00"),
    utc("2026-03-28T00:00"),
    utc("2026-04-04T00:00"),
    utc("2026-09-05T00:00"),
    utc("2026-10-03T00:00"),
    utc("2026-10-24T00:00"),
    utc("2026-10-31T00:00"),
    utc("2026-06-10T00:00"),
]


@settings(max_examples=80, deadline=None)
@given(
    minute=st.sampled_from(MINUTES),
    hour=st.sampled_from(HOURS),
    day=st.sampled_from(DAYS),
    month=st.sampled_from(MONTHS),
    weekday=st.sampled_from(WEEKDAYS),
    tz=st.sampled_from(ZONES),
    start=st.sampled_from(STARTS),
    shift=st.integers(min_value=0, max_value=36 * 60),
)
def test_cron_properties(
    minute: str, hour: str, day: str, month: str, weekday: str, tz: str, start: datetime, shift: int
) -> None:
    """Occurrences strictly increase, match the expression in local time (or end a DST gap),
    cover every existing matching wall time, and a fixed hour never fires twice on a day."""
    expr = f"{minute} {hour} {day} {month} {weekday}"
    zone = ZoneInfo(tz)
    begin = start + timedelta(minutes=shift)
    end = begin + timedelta(days=3)
    times = list(Cron(expr, tz=tz).occurrences(begin, end))

    assert all(a < b for a, b in itertools.pairwise(times))
    assert all(begin < t <= end for t in times)
    for t in times:
        wall = t.astimezone(zone).replace(tzinfo=None)
        gap_end = (
            t.astimezone(zone).utcoffset()
            != (t - timedelta(seconds=1)).astimezone(zone).utcoffset()
        )
        assert croniter.match(expr, wall) or gap_end, (expr, tz, t)

    # Every wall time that matches and exists fires, in its first pass at least.
    fired = set(times)
    wall = begin.astimezone(zone).replace(tzinfo=None, second=0, microsecond=0)
    matches = croniter(expr, wall)
    while True:
        local = matches.get_next(datetime)
        first = local.replace(tzinfo=zone, fold=0).astimezone(UTC)
        if first > end:
            break
        exists = first.astimezone(zone).replace(tzinfo=None) == local
        if exists and first > begin:
            assert first in fired, (expr, tz, local)

    every_hour = hour in ("*", "*/1")
    if not every_hour:
        walls = [t.astimezone(zone).replace(tzinfo=None) for t in times]
        assert len(walls) == len(set(walls)), (expr, tz)


@settings(max_examples=150, deadline=None)
@given(
    minute=st.sampled_from([*MINUTES, "*", "*/7"]),
    hour=st.sampled_from(HOURS),
    day=st.sampled_from(DAYS),
    month=st.sampled_from(MONTHS),
    weekday=st.sampled_from(WEEKDAYS),
    tz=st.sampled_from(ZONES),
    start=st.sampled_from(STARTS),
    shift=st.integers(min_value=0, max_value=36 * 60 * 60),
    days=st.integers(min_value=0, max_value=40),
    day_or=st.booleans(),
)
def test_occurrences_walk_to_what_next_after_gives_one_by_one(
    minute: str,
    hour: str,
    day: str,
    month: str,
    weekday: str,
    tz: str,
    start: datetime,
    shift: int,
    days: int,
    day_or: bool,
) -> None:
    """``occurrences`` walks the wall times in one pass; ``next_after`` looks each time,
    from a fold margin back. Over windows across every DST change of the zones, starting at
    any second, the two give the same instants."""
    cron = Cron(f"{minute} {hour} {day} {month} {weekday}", tz=tz, day_or=day_or)
    begin = start + timedelta(seconds=shift)
    end = begin + timedelta(days=days, minutes=shift % 97)
    walked = list(cron.occurrences(begin, end))
    looked: list[datetime] = []
    at = cron.next_after(begin)
    while at <= end:
        looked.append(at)
        at = cron.next_after(at)
    assert walked == looked


@pytest.mark.parametrize("expr", ["* * * * * */15", "*/20 1-3 * * * 10", "0 2 * * * 0,59"])
@pytest.mark.parametrize("start", [utc("2026-03-29T00:00"), utc("2026-10-25T00:00")])
def test_seconds_fields_walk_as_next_after_looks(expr: str, start: datetime) -> None:
    """The 6-field form (``rq cron``'s) walks second by second through both changes."""
    cron = Cron(expr, tz="Europe/Warsaw", seconds=True)
    begin, end = start + timedelta(seconds=7), start + timedelta(hours=4)
    looked: list[datetime] = []
    at = cron.next_after(begin)
    while at <= end:
        looked.append(at)
        at = cron.next_after(at)
    assert list(cron.occurrences(begin, end)) == looked and looked


def test_one_cron_shared_by_threads_answers_each_as_it_would_alone() -> None:
    """A ``Cron`` keeps its parsed fields and moves them for each look, under a lock: eight
    threads asking one schedule at once (the beat's timer, the dashboard, the HTTP API) get
    what each would get alone. It pickles as its expression, zone and day rule."""
    cron = Cron("7,37 */2 * * 1-5", tz="Europe/Warsaw")
    starts = [datetime(2026, 3, 1, tzinfo=UTC) + timedelta(hours=7 * n) for n in range(8)]
    alone = [
        list(itertools.islice(cron.occurrences(s, s + timedelta(days=60)), 200)) for s in starts
    ]
    results: dict[int, list[datetime]] = {}
    barrier = threading.Barrier(len(starts))

    def walk(index: int) -> None:
        fresh = Cron("7,37 */2 * * 1-5", tz="Europe/Warsaw")
        assert fresh == cron
        barrier.wait()
        start = starts[index]
        results[index] = list(
            itertools.islice(cron.occurrences(start, start + timedelta(days=60)), 200)
        )

    threads = [threading.Thread(target=walk, args=(i,)) for i in range(len(starts))]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        sys.setswitchinterval(switch)
    assert [results[i] for i in range(len(starts))] == alone
    copy = pickle.loads(pickle.dumps(cron))
    assert copy == cron and copy.next_after(starts[0]) == cron.next_after(starts[0])


@settings(max_examples=400, deadline=None)
@given(
    minute=st.sampled_from([*MINUTES, "*", "*/7", "58-59"]),
    hour=st.sampled_from(HOURS),
    day=st.sampled_from([*DAYS, "L", "31", "29"]),
    month=st.sampled_from([*MONTHS, "2", "jan-mar"]),
    weekday=st.sampled_from([*WEEKDAYS, "mon#2", "sun", "5L", "7"]),
    second=st.sampled_from([None, "*", "0", "*/15", "59"]),
    day_or=st.booleans(),
    wall=st.datetimes(min_value=datetime(1999, 12, 25), max_value=datetime(2041, 1, 5)),
    within=st.integers(0, 60 * 10**6 - 1),
)
def test_matches_wall_answers_as_croniter_match(
    minute: str,
    hour: str,
    day: str,
    month: str,
    weekday: str,
    second: str | None,
    day_or: bool,
    wall: datetime,
    within: int,
) -> None:
    """``matches_wall`` looks on the parsed fields instead of parsing again: it answers what
    croniter's own ``match`` does, at a generated wall time, at the next one that matches,
    anywhere within that minute, and a microsecond before it."""
    expr = f"{minute} {hour} {day} {month} {weekday}" + (f" {second}" if second else "")
    try:
        cron = Cron(expr, day_or=day_or, seconds=second is not None)
    except ConfigError:
        return  # one that never fires (the 31st of February): no schedule to ask
    matching = croniter(expr, wall, day_or=day_or).get_next(datetime)
    inside = matching + timedelta(microseconds=within)
    for at in (wall, matching, inside, matching - timedelta(microseconds=1)):
        assert cron.matches_wall(at) == croniter.match(expr, at, day_or=day_or), (expr, at)
