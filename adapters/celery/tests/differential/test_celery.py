"""Celery's schedules, as the drop-ins read them, against Celery's own fire times.

Hypothesis generates ``crontab`` and ``solar`` specs within Celery's grammar; each is walked
with Celery's own ``remaining_estimate`` (the clock at the last run, as celery beat calls it)
and with the schedule ``celery beat -S cron_bridge`` builds for it, over 400 days in zones with
and without daylight saving time. The fire times must be equal, except where a named
difference (docs/migrating.md, "Every intended difference from stock celery beat") applies;
each one is a predicate below, and what falls under it is compared with the documented rule.
"""

from __future__ import annotations

import importlib.util
import itertools
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.beat import ScheduleEntry
from celery.schedules import BaseSchedule, crontab, schedule, solar
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from cron_bridge_celery.scheduler import entry_job, job_name
from cron_bridge_celery.schedules import to_schedule
from tests.e2e.processes import REPO

NAMED_DIFFERENCES: dict[str, str] = {
    "celery.dst-transition-day": (
        "On the local day a zone's offset changes, a crontab time in the spring gap fires at "
        "the end of the gap and an every-hour field fires in both passes of the repeated hour, "
        "where Celery fires a gap time an hour late and skips the repeated hour."
    ),
    "celery.dst-stale-offset": (
        "The first fire after an offset change is at the wall time written, where Celery "
        "reads it in the previous run's offset (a monthly 00:00 at 23:00 on 31 March)."
    ),
    "celery.solar-milliseconds": (
        "A solar event is sent at Celery's time rounded up to the millisecond (ephem's answers "
        "differ by a few milliseconds with the search's start)."
    ),
    "celery.interval-fall-back": (
        "An interval is the same length across a fall-back change, where Celery (with a "
        "timezone that changes offset) waits longer by the hour given back."
    ),
    "celery.solar-offset-change": (
        "A solar event after the app's timezone changes offset is sent at the event, where "
        "Celery sends the first one off by the change (an hour early or late), and the one "
        "after a late one where ephem finds it searching from there (to 0.2 s)."
    ),
    "celery.interval-epoch": (
        "A timedelta, number or schedule() entry runs on multiples of its period since the Unix "
        "epoch, not counted from the beat's start or the entry's last run."
    ),
    # Not fire times (what the tests above compare); each is tested where it lives.
    "celery.replicas": "Any number of beats run, all active, each occurrence sent once.",
    "celery.missed-at-start": "An entry that fell due while no beat ran is recorded missed.",
    "celery.store-down": "While the store is down nothing is sent.",
    "celery.failed-send": "A send that fails is recorded failed and not sent again.",
    "celery.custom-schedule-walk": (
        "A schedule class of your own is walked on a fake clock from 00:00 UTC each day."
    ),
    "celery.last-run-at": "last_run_at and total_run_count are not kept; history shows runs.",
    "celery.no-task-name": "An entry without a task name is refused at start.",
    "celery.message-header": "Each message carries a cron_bridge header with the occurrence.",
    "celery.no-shelve": "No shelve file is written or read.",
}

ZONES = ["UTC", "Europe/Warsaw", "America/New_York", "Australia/Lord_Howe"]
START = datetime(2025, 12, 31, 12, 0, tzinfo=UTC)
DAYS = 400
MAX_FIRES = 3000  # keeps a generated spec's walk under a second

DAY_NAMES = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
LONG_DAY_NAMES = ["sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"]
MONTH_NAMES = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]


def text_field(low: int, high: int, names: list[str] | None = None) -> st.SearchStrategy[str]:
    """One crontab field as text (``crontab_parser``'s grammar, as django-celery-beat stores it)."""
    number = st.integers(low, high)
    word = number.map(str)
    if names:
        word = st.one_of(word, number.map(lambda n: names[n - low]))
    span = high - low + 1
    ranged = st.builds(lambda a, b: f"{a}-{b}", word, word)  # b < a wraps around, as in Celery
    part = st.one_of(
        word,
        st.just("*"),
        st.integers(1, span).map(lambda k: f"*/{k}"),
        ranged,
        st.builds(lambda r, k: f"{r}/{k}", ranged, st.integers(1, span)),
    )
    return st.builds(
        lambda parts, sep: sep.join(parts),
        st.lists(part, min_size=1, max_size=3),
        st.sampled_from([",", ", "]),
    )


def _field(low: int, high: int, names: list[str] | None = None) -> st.SearchStrategy[Any]:
    """One crontab field in every form Celery's ``crontab`` accepts (``_expand_cronspec``)."""
    number = st.integers(low, high)
    span = high - low + 1
    return st.one_of(
        number,
        text_field(low, high, names),
        st.sets(number, min_size=1, max_size=4),
        st.lists(number, min_size=1, max_size=4),
        st.builds(lambda a, k: range(a, high + 1, k), number, st.integers(1, span)),
    )


def crontab_specs(field: Any = _field) -> st.SearchStrategy[dict[str, Any]]:
    """``crontab(**spec)`` keyword arguments, each field in the forms ``field`` draws."""
    day_names = st.sampled_from([DAY_NAMES, LONG_DAY_NAMES, None])
    return st.fixed_dictionaries(
        {},
        optional={
            "minute": field(0, 59),
            "hour": field(0, 23),
            "day_of_week": day_names.flatmap(lambda names: field(0, 6, names)),
            "day_of_month": field(1, 31),
            "month_of_year": field(1, 12, MONTH_NAMES),
        },
    )


def celery_app(zone: str | None, *, enable_utc: bool = True) -> Celery:
    app = Celery("differential", set_as_current=False)
    app.conf.enable_utc = enable_utc
    app.conf.timezone = zone
    return app


def celery_fires(
    value: BaseSchedule, zone: tzinfo, start: datetime, end: datetime
) -> list[datetime]:
    """Celery's fire times: ``last_run_at + remaining_estimate(last_run_at)`` with the clock
    at ``last_run_at``, each fire the next ``last_run_at`` (celery beat sets it when it sends)."""
    clock = [start.astimezone(zone)]
    value.nowfun = lambda: clock[0]
    fires: list[datetime] = []
    while True:
        last = clock[0]
        fired = (last + value.remaining_estimate(last)).astimezone(UTC)
        if fired <= last:
            # "Due now" again: celery beat would send once more at once.
            fired = last.astimezone(UTC) + timedelta(seconds=1)
        if fired > end:
            return fires
        fires.append(fired)
        clock[0] = fired.astimezone(zone)


def _offset(zone: tzinfo, when: datetime) -> timedelta:
    offset = when.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def offset_changes(zone: tzinfo, start: datetime, end: datetime) -> list[datetime]:
    """The instants in ``[start, end]`` at which the zone's UTC offset changes."""
    changes = []
    hour = start
    while hour < end:
        after = hour + timedelta(hours=1)
        if _offset(zone, hour) != _offset(zone, after):
            low, high = hour, after  # the change: the first instant in the new offset
            while high - low > timedelta(seconds=1):
                middle = low + (high - low) / 2
                low, high = (
                    (middle, high)
                    if _offset(zone, middle) == _offset(zone, hour)
                    else (low, middle)
                )
            changes.append(high)
        hour = after
    return changes


def compare(
    theirs: list[datetime], ours: list[datetime], zone: tzinfo, start: datetime, end: datetime
) -> None:
    """Equal fire times, but for the named differences, each checked by its documented rule."""
    changes = offset_changes(zone, start - timedelta(days=1), end + timedelta(days=1))
    dst_days = {
        (c.astimezone(zone) + d).date()
        for c in changes
        for d in (-timedelta(hours=3), timedelta(0))
    }
    ours_set, theirs_set = set(ours), set(theirs)
    left_theirs, left_ours = set(theirs), set(ours)
    for change in changes:
        # celery.dst-stale-offset: Celery's first fire after an offset change is the wall time
        # written read in the previous run's offset (early, then again on time; or late,
        # passing the times in between); ours is the wall time written.
        first = next((t for t in theirs if t >= change), None)
        if first is None:
            continue
        shift = _offset(zone, change) - _offset(zone, change - timedelta(seconds=1))
        written = first + shift
        if (
            timedelta(0) < shift
            and change <= first < change + shift
            and first not in ours_set
            and written not in ours_set
        ):
            # celery.dst-transition-day: Celery's first fire is a time in the spring gap read
            # in the old offset (as late as the change is wide), not a time written read in
            # it; ours fires that time once, at the end of the gap.
            assert change in ours_set, f"{first}: a time in the gap, ours not at its end {change}"
            left_theirs.discard(first)
            left_ours.discard(change)
            continue
        if first not in ours_set or (written in ours_set and written not in theirs_set):
            assert written in ours_set, f"{first}: neither ours nor {written} in the old offset"
            left_theirs.discard(first)
            left_ours -= {t for t in ours if change <= t <= first}

    def compared(times: set[datetime]) -> list[datetime]:
        # celery.dst-transition-day: on the local day of a change, our DST rules apply
        # (tests/test_schedules.py holds them to docs/jobs.md).
        return sorted(t for t in times if t.astimezone(zone).date() not in dst_days)

    assert compared(left_ours) == compared(left_theirs)


def bounded(value: crontab) -> bool:
    days = len(value.day_of_week) / 7 * len(value.day_of_month) / 31 * len(value.month_of_year) / 12
    return len(value.minute) * len(value.hour) * days * DAYS <= MAX_FIRES


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    spec=crontab_specs(),
    zone=st.sampled_from(ZONES),
    own_tz=st.booleans(),
    enable_utc=st.booleans(),
)
# A time in the spring gap (02:01) that Celery fires at 03:01 and we at 03:00, the first fire
# after the change: celery.dst-transition-day, not celery.dst-stale-offset.
@example(
    spec={"minute": 1, "hour": range(2, 24, 4)},
    zone="Europe/Warsaw",
    own_tz=False,
    enable_utc=False,
)
def test_crontab_fires_when_celery_fires_it(
    spec: dict[str, Any], zone: str, own_tz: bool, enable_utc: bool
) -> None:
    """A generated ``crontab``, in the app's zone or its own ``tz``: Celery's fire times."""
    app = celery_app(None if own_tz else zone, enable_utc=enable_utc)
    try:
        value = crontab(app=app, **spec)
    except ValueError:
        assume(False)  # Celery refuses it too (a date that never occurs, a bad name)
        raise
    assume(bounded(value))
    if own_tz:
        value.tz = ZoneInfo(zone)  # as django-celery-beat's TzAwareCrontab sets it
    tz = ZoneInfo(zone)
    end = START + timedelta(days=DAYS)
    ours = to_schedule(value, app_zone=app.timezone)  # enable_utc: app.conf.timezone decides
    theirs = celery_fires(value, tz, START, end)
    compare(theirs, list(ours.occurrences(START, end)), tz, START, end)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    event=st.sampled_from(sorted(solar._all_events)),
    lat=st.floats(-80, 80, allow_nan=False).map(lambda x: round(x, 4)),
    lon=st.floats(-180, 180, allow_nan=False).map(lambda x: round(x, 4)),
    zone=st.sampled_from(ZONES),
)
# Lord Howe's half-hour fall-back: Celery's next dusk, searched from its late one, is ephem's
# answer 0.1 s before ours.
@example(event="dusk_civil", lat=48.5, lon=0.0, zone="Australia/Lord_Howe")
def test_solar_fires_when_celery_fires_it(event: str, lat: float, lon: float, zone: str) -> None:
    """A generated ``solar``: Celery's event times, rounded up to the millisecond, in any app
    zone (``celery.solar-milliseconds``, ``celery.solar-offset-change``)."""
    # Near the poles (events on few days, hours apart) Celery's run off by an offset change
    # sends a run ephem then searches from anew: those are compared in UTC only.
    assume(zone == "UTC" or abs(lat) <= 60)
    app = celery_app(zone)
    end = START + timedelta(days=DAYS)
    ours = to_schedule(solar(event, lat, lon, app=app), app_zone=app.timezone)
    # celery beat's last_run_at is in the app's zone (app.now()).
    theirs = celery_fires(solar(event, lat, lon, app=app), ZoneInfo(zone), START, end)
    assert theirs
    compare_solar(theirs, list(ours.occurrences(START, end)), ZoneInfo(zone), end)


@settings(max_examples=30, deadline=None)
@given(seconds=st.integers(1, 3 * 86400), as_number=st.booleans())
def test_an_interval_keeps_celerys_period_on_epoch_multiples(seconds: int, as_number: bool) -> None:
    """``celery.interval-epoch``: Celery's ``schedule(period)`` fires every period after the last
    run; ours fires every period too, on multiples of it since the Unix epoch."""
    app = celery_app("Europe/Warsaw")
    end = START + timedelta(days=3 * seconds // 86400 + 2)
    period = timedelta(seconds=seconds)
    ours = list(
        to_schedule(seconds if as_number else period, app_zone=app.timezone).occurrences(START, end)
    )
    theirs = celery_fires(schedule(period, app=app), UTC, START, end)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert all((t - epoch) % period == timedelta(0) for t in ours)
    gaps = {b - a for a, b in itertools.pairwise(ours)} | {
        b - a for a, b in itertools.pairwise(theirs)
    }
    assert gaps == {period}
    assert abs(len(ours) - len(theirs)) <= 1


DECLARATIONS = REPO / "tests" / "fixtures" / "declarations" / "celery"
AROUND = timedelta(days=2)  # a frequent entry is walked this long on each side of each change


def _declared() -> list[tuple[str, str, dict[str, Any]]]:
    """Each ``beat_schedule`` entry of the fixture modules: (module, key, entry)."""
    found = []
    for path in sorted(DECLARATIONS.glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"declared_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        found += [(path.stem, key, entry) for key, entry in module.beat_schedule.items()]
    return found


DECLARED = _declared()


def test_the_real_declarations_are_many() -> None:
    """At least 15 entries, copied from Celery's docs and public projects."""
    assert len(DECLARED) >= 15


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize(
    ("module", "key", "raw"), DECLARED, ids=[f"{m}:{k}" for m, k, _ in DECLARED]
)
def test_a_real_entry_fires_when_celery_beat_fires_it(
    module: str, key: str, raw: dict[str, Any], zone: str
) -> None:
    """The entry read as ``celery beat -S cron_bridge`` reads it (a ``ScheduleEntry`` of the
    app, then ``entry_job``) and as celery beat schedules it, over a year in each zone (an
    entry that fires more than ``MAX_FIRES`` times a year: two days each side of each offset
    change)."""
    app = celery_app(zone)
    entry = ScheduleEntry(**dict(raw, name=key, app=app))
    job = entry_job(job_name(key), entry, app.timezone)
    theirs_schedule = entry.schedule
    tz = ZoneInfo(zone)
    start = START + timedelta(days=80)
    end = start + timedelta(days=DAYS)
    windows = [(start, end)]
    if isinstance(theirs_schedule, crontab):
        frequent = not bounded(theirs_schedule)
    else:
        frequent = not isinstance(theirs_schedule, solar)
    if frequent:
        changes = offset_changes(tz, start, end)
        windows = [(c - AROUND, c + AROUND) for c in changes] or [(start, start + 2 * AROUND)]
    for begin, until in windows:
        ours = list(job.schedule.occurrences(begin, until))
        theirs = celery_fires(theirs_schedule, tz, begin, until)
        assert theirs
        if isinstance(theirs_schedule, crontab):
            compare(theirs, ours, tz, begin, until)
        elif isinstance(theirs_schedule, solar):
            compare_solar(theirs, ours, tz, until)
        else:
            compare_interval(theirs, ours, tz, theirs_schedule.run_every)


def fall_backs(zone: tzinfo, start: datetime, end: datetime) -> list[tuple[datetime, timedelta]]:
    """Each change in ``[start, end]`` that turns the clocks back, and by how much."""
    found = []
    for change in offset_changes(zone, start, end):
        back = _offset(zone, change - timedelta(seconds=1)) - _offset(zone, change)
        if back > timedelta(0):
            found.append((change, back))
    return found


def compare_interval(
    theirs: list[datetime], ours: list[datetime], zone: tzinfo, period: timedelta
) -> None:
    """``celery.interval-epoch``: ours on multiples of the period since the epoch, every
    period, where Celery counts from the last run; ``celery.interval-fall-back``: Celery's
    wait across a fall-back is longer by the hour given back."""
    assert all((t - datetime(1970, 1, 1, tzinfo=UTC)) % period == timedelta(0) for t in ours)
    assert {b - a for a, b in itertools.pairwise(ours)} == {period}
    backs = fall_backs(zone, theirs[0], theirs[-1])
    for a, b in itertools.pairwise(theirs):
        longer = [back for change, back in backs if a < change <= b]
        assert b - a == period + (longer[0] if longer else timedelta(0)), (a, b)


def compare_solar(
    theirs: list[datetime], ours: list[datetime], zone: tzinfo, end: datetime
) -> None:
    """``celery.solar-milliseconds``: Celery's event times rounded up to the millisecond (ephem
    answers a few milliseconds apart for searches from different starts);
    ``celery.solar-offset-change``: Celery's first event after the app's zone changes offset is
    off by the change (an hour early after spring forward, then the event; late after fall
    back), and the event it then searches from the off time is ephem's answer from there, to
    0.2 s."""
    slack = timedelta(milliseconds=5)
    kept = list(theirs)
    for change in offset_changes(zone, theirs[0], end):
        first = next((t for t in theirs if t >= change), None)
        if first is None or any(abs(first - t) <= slack for t in ours):
            continue
        shift = _offset(zone, change) - _offset(zone, change - timedelta(seconds=1))
        [event] = [t for t in ours if abs(first + shift - t) <= slack]
        kept.remove(first)
        if shift > timedelta(0):
            # Early: then the event itself, as ephem finds it from an hour before (to 0.2 s).
            again = theirs[theirs.index(first) + 1]
            assert abs(again - event) <= timedelta(milliseconds=200), (again, event)
            kept.remove(again)
        elif theirs.index(first) + 1 < len(theirs):
            # Late: Celery searches the next event from the change's width after this one, and
            # ephem finds it from there to 0.2 s of where ours, searched from the event, is.
            after = theirs[theirs.index(first) + 1]
            [ours_after] = [t for t in ours if abs(after - t) <= timedelta(milliseconds=200)]
            kept.remove(after)
            ours.remove(ours_after)
        ours = [t for t in ours if t != event]
    assert len(ours) == len([k for k in kept if _rounded_up(k) <= end])
    assert all(abs(a - _rounded_up(b)) <= slack for a, b in zip(ours, kept, strict=False))


def _rounded_up(when: datetime) -> datetime:
    whole = when.replace(microsecond=when.microsecond // 1000 * 1000)
    return whole if whole == when else whole + timedelta(milliseconds=1)
