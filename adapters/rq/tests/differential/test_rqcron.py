"""``rq cron``'s croniter strings, read by RQ's own next-run function
(``rq.cron.CronJob.get_next_enqueue_time``, walked from each send to the next, as its loop
does) and by ``cron-bridge rq-cron``'s schedule, over a year in the zones RQ 3 reads them in
(the process's local time: ``TZ`` is set for each walk), daylight saving included. The specs
are generated within RQ's grammar (croniter's: 5 or 6 fields, names, steps, ranges, lists,
``L``, ``W``, ``#``), plus the real configs under tests/fixtures/declarations/rq_cron/.

The fire times must be the same, except where ``NAMED_DIFFERENCES`` (docs/migrating.md's
table) says otherwise: each is a predicate the walk applies, comparing the documented rule.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis import Redis
from rq.cron import CronJob

from cron_bridge import ConfigError
from cron_bridge.schedules import Cron
from cron_bridge.stores import MemoryStore
from cron_bridge_rq.rq_cron import _Loading, anchored, jobs_of
from tests.apps.rq_cron_tasks import cleanup
from tests.e2e.processes import REPO

NAMED_DIFFERENCES: dict[str, str] = {
    "rqcron.spring_gap": "the wall times the clocks skip fire once at the end of the gap, "
    "where RQ fires the first of them the gap's length later (02:30 at 03:30 in Warsaw), so "
    "a job in the gap runs up to an hour earlier that night",
    "rqcron.fall_back_every_hour": "an expression whose hour field is every hour fires in "
    "both passes of the repeated hour, where RQ fires only the first, so an every-15-minutes "
    "job runs 4 more times on that night",
    "rqcron.random_field": "a random field (croniter's R) is refused, where RQ draws a new "
    "value at every send, since replicas would never agree on an occurrence",
    "rqcron.bad_interval": "a negative interval is refused, where RQ sends it in every loop "
    "without a pause",
    "rqcron.year_field": "croniter's 7-field string (a year after the seconds) is refused "
    "alone (logged, listed), where RQ runs it, so such a registration does not run until its "
    "year is taken out",
    "rqcron.interval_anchor": "an interval registration first runs when the cluster first saw "
    "it and every interval from then on, across restarts, where RQ starts again at each "
    "process's start, so a restart does not send it again",
    "rqcron.replicas": "any number of replicas send each occurrence once, where a second rq "
    "cron sends everything twice",
    "rqcron.job_id": "the RQ job id is the occurrence's, enqueued with unique=True, so a send "
    "again after a lost answer is refused by RQ instead of landing twice",
    "rqcron.missed_sends": "occurrences due while no replica ran are not sent late "
    "(misfire_grace), where RQ sends interval registrations at its next start",
    "rqcron.failed_send": "a send that fails is tried again within misfire_grace, then "
    "recorded failed, and the beat goes on, where rq cron stops with a traceback",
    "rqcron.unreachable_redis": "RQ's Redis unreachable at start is one line and exit 2, "
    "where rq cron prints a traceback",
    "rqcron.scheduler_registry": "RQ's registry of cron schedulers lists each replica with the "
    "sends it made, not one process with all of them",
    "rqcron.posix_tz": "a local zone without a name (a POSIX TZ string) is refused at start, "
    "where RQ reads it, since the replicas must agree on a named zone",
}

ZONES = ("UTC", "Europe/Warsaw", "America/New_York", "Australia/Lord_Howe")
START = datetime(2026, 1, 1, tzinfo=UTC)
YEAR = timedelta(days=366)
MOST = 500  # fires walked from START; then two days around each transition


def in_local_zone(zone: str) -> Iterator[None]:
    """RQ 3 reads cron fields in the process's local time: set it, as TZ would."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = zone
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


def transitions(zone: str) -> list[datetime]:
    """The instants in the walked year at which the zone's offset changes (to the minute)."""
    tz = ZoneInfo(zone)
    found, at = [], START
    while at < START + YEAR:
        step = at + timedelta(hours=1)
        if at.astimezone(tz).utcoffset() != step.astimezone(tz).utcoffset():
            low, high = at, step
            while high - low > timedelta(minutes=1):
                middle = low + (high - low) / 2
                same = middle.astimezone(tz).utcoffset() == at.astimezone(tz).utcoffset()
                low, high = (middle, high) if same else (low, middle)
            found.append(high.replace(second=0, microsecond=0))
        at = step
    return found


def walk(
    next_after: Callable[[datetime], datetime], start: datetime, end: datetime, most: int
) -> list[datetime]:
    fires, at = [], start
    while len(fires) < most:
        at = next_after(at)
        if at > end:
            break
        fires.append(at)
    return fires


def rq_next(expr: str) -> Callable[[datetime], datetime]:
    """RQ's own next run after a send at ``after`` (its loop sets ``latest_enqueue_time``)."""
    job = CronJob("default", func=cleanup, cron=expr)

    def following(after: datetime) -> datetime:
        job.latest_enqueue_time = after
        return job.get_next_enqueue_time()

    return following


def windows(zone: str) -> list[tuple[datetime, datetime]]:
    """The walked spans: the year from START (up to MOST fires), and a day either side of
    each daylight-saving transition."""
    spans = [(START, START + YEAR)]
    spans += [(t - timedelta(days=1), t + timedelta(days=1)) for t in transitions(zone)]
    return spans


def gap_rule(
    schedule: Cron,
    zone: str,
    span: tuple[datetime, datetime],
    ours: list[datetime],
    theirs: list[datetime],
) -> None:
    """``rqcron.spring_gap``: the fires of wall times the clocks skip are checked against
    each side's rule (ours once at the gap's end, RQ's at each skipped wall time plus the
    gap's length), then taken out of both walks where no wall time after the gap fires
    then anyway."""
    tz = ZoneInfo(zone)

    def legit(instant: datetime) -> bool:
        return schedule.matches_wall(instant.astimezone(tz).replace(tzinfo=None))

    for change in transitions(zone):
        before, after = (change - timedelta(minutes=1)).astimezone(tz), change.astimezone(tz)
        gap = after.utcoffset() - before.utcoffset()  # type: ignore[operator]
        if gap <= timedelta(0) or not span[0] < change <= span[1]:
            continue
        wall, skipped = after.replace(tzinfo=None) - gap, []  # from the first skipped one
        while wall < after.replace(tzinfo=None):
            if schedule.matches_wall(wall):
                skipped.append(wall)
            wall += schedule._step
        if not skipped:
            continue
        # RQ reads the first skipped wall time with the offset before the gap (the gap later)
        # and goes on from there: the others in the gap are passed over.
        shifted = (skipped[0] + gap).replace(tzinfo=tz).astimezone(UTC)
        assert change in ours, ("ours fires the skipped wall times at the gap's end", change)
        assert shifted in theirs or shifted > span[1], ("RQ: the gap's length later", shifted)
        # ... and from the wall time it fired at: what ours fires before that, RQ passes over.
        theirs[:] = [f for f in theirs if f != shifted or legit(f)]
        ours[:] = [f for f in ours if not change <= f < shifted and (f != change or legit(f))]


def fold_rule(schedule: Cron, zone: str, ours: list[datetime], theirs: list[datetime]) -> None:
    """``rqcron.fall_back_every_hour``: an every-hour expression fires the second pass of a
    repeated hour in ours only; those fires are taken out of ours after checking RQ has
    none."""
    if not schedule._every_hour:
        return
    tz = ZoneInfo(zone)

    def second_pass(instant: datetime) -> bool:
        wall = instant.astimezone(tz)
        return wall.fold == 1 and wall.replace(fold=0).astimezone(UTC) != instant

    assert not [f for f in theirs if second_pass(f)]
    ours[:] = [f for f in ours if not second_pass(f)]


def compare(expr: str, zone: str, registration: CronJob | None = None) -> None:
    """The same fires from RQ and ours over the walked spans, after the named rules (of
    ``registration`` as a config loaded it, else of a registration of ``expr``)."""
    try:
        rq_next(expr)
    except Exception:
        with pytest.raises(ConfigError):
            Cron(expr, tz=zone, seconds=True)
        return
    loaded = registration or CronJob("default", func=cleanup, cron=expr)
    ((job, _),) = jobs_of([loaded], zone).values()
    schedule = job.schedule
    assert isinstance(schedule, Cron)
    with _local(zone):
        theirs_next = rq_next(expr)
        for start, end in windows(zone):
            ours = walk(schedule.next_after, start, end, MOST)
            theirs = walk(theirs_next, start, end, MOST)
            span_end = min(ours[-1] if ours else end, theirs[-1] if theirs else end)
            ours = [f for f in ours if f <= span_end]
            theirs = [f for f in theirs if f <= span_end]
            gap_rule(schedule, zone, (start, span_end), ours, theirs)
            fold_rule(schedule, zone, ours, theirs)
            assert ours == theirs, (expr, zone, start, _first_difference(ours, theirs))


def _first_difference(ours: list[datetime], theirs: list[datetime]) -> tuple[str, str]:
    for a, b in zip(ours, theirs, strict=False):
        if a != b:
            return a.isoformat(), b.isoformat()
    return f"ours {len(ours)}", f"theirs {len(theirs)}"


class _local:
    def __init__(self, zone: str) -> None:
        self._gen = in_local_zone(zone)

    def __enter__(self) -> None:
        next(self._gen)

    def __exit__(self, *exc: object) -> None:
        next(self._gen, None)


def _field(low: int, high: int, names: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    value = st.integers(low, high)
    named = st.sampled_from(names) if names else value.map(str)
    single = st.one_of(value.map(str), named)
    ranged = st.tuples(value, value).map(lambda p: f"{min(p)}-{max(p)}")
    stepped = st.tuples(st.sampled_from(["*", f"{low}-{high}"]), st.integers(1, high - low + 1))
    return st.one_of(
        st.just("*"),
        single,
        ranged,
        stepped.map(lambda p: f"{p[0]}/{p[1]}"),
        st.lists(value, min_size=2, max_size=4, unique=True).map(lambda v: ",".join(map(str, v))),
    )


MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# Hours near the transitions are drawn often, so the gap and the fold are looked at.
HOURS = st.one_of(st.sampled_from(["1", "2", "3", "1-3", "2,3", "*", "*/2"]), _field(0, 23))
DOM = st.one_of(_field(1, 31), st.sampled_from(["L", "15W", "1W", "31"]))
DOW = st.one_of(_field(0, 6, DAYS), st.sampled_from(["5#3", "mon#1", "L5", "7", "mon-fri"]))
MONTH = _field(1, 12, MONTHS)
MINUTES = st.one_of(st.sampled_from(["0", "30", "*/15", "0,45", "15-20"]), _field(0, 59))
SECONDS = st.sampled_from(["0", "*/15", "30", "0,20,40", "10-12"])


@st.composite
def rq_specs(draw: st.DrawFn) -> str:
    fields = [draw(MINUTES), draw(HOURS), draw(DOM), draw(MONTH), draw(DOW)]
    if draw(st.booleans()):
        fields.append(draw(SECONDS))
    return " ".join(fields)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=rq_specs(), zone=st.sampled_from(ZONES))
def test_generated_specs_fire_as_rq_fires_them(spec: str, zone: str) -> None:
    compare(spec, zone)


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize(
    "spec",
    [
        "*/15 * * * *",
        "30 2 * * *",
        "0 2 * * 0",
        "* * * * * */15",
        "15 1-3 * * *",
        "0 0 L * *",
        "0 9 * * 5#3",
        "@daily",
        "0 0 29 2 *",
        "*/30 * * * * 0",
    ],
)
def test_examples_fire_as_rq_fires_them(spec: str, zone: str) -> None:
    compare(spec, zone)


def test_named_rules_are_the_ones_the_walk_meets() -> None:
    """Each DST rule changes something on its night: without them the walks differ."""
    ((job, _),) = jobs_of(
        [CronJob("default", func=cleanup, cron="*/15 * * * *")], "Europe/Warsaw"
    ).values()
    assert isinstance(job.schedule, Cron)
    change = datetime(2026, 10, 25, 1, tzinfo=UTC)  # 03:00 CEST back to 02:00 CET
    with _local("Europe/Warsaw"):
        ours = walk(
            job.schedule.next_after, change - timedelta(hours=2), change + timedelta(hours=2), 99
        )
        theirs = walk(
            rq_next("*/15 * * * *"), change - timedelta(hours=2), change + timedelta(hours=2), 99
        )
    assert len(ours) == len(theirs) + 4
    spring = datetime(2026, 3, 29, 1, tzinfo=UTC)
    ((gap_job, _),) = jobs_of(
        [CronJob("default", func=cleanup, cron="30 2 * * *")], "Europe/Warsaw"
    ).values()
    with _local("Europe/Warsaw"):
        assert gap_job.schedule.next_after(spring - timedelta(hours=1)) == spring
        assert rq_next("30 2 * * *")(spring - timedelta(hours=1)) == spring + timedelta(minutes=30)


def test_a_random_field_rq_takes_is_refused_alone() -> None:
    """``rqcron.random_field``: RQ takes ``R``; ours refuses the registration."""
    rq_next("R 3 * * *")
    with pytest.raises(ConfigError, match="random"):
        jobs_of([CronJob("default", func=cleanup, cron="R 3 * * *")], "UTC")


def test_a_negative_interval_rq_takes_is_refused() -> None:
    """``rqcron.bad_interval``: RQ takes ``interval=-5`` (and sends it every loop)."""
    registration = CronJob("default", func=cleanup, interval=-5)
    registration.set_enqueue_time(START)
    assert registration.next_enqueue_time is not None and registration.next_enqueue_time < START
    with pytest.raises(ConfigError, match="positive"):
        jobs_of([registration], "UTC")


FIXTURES = REPO / "tests" / "fixtures" / "declarations" / "rq_cron"
CONFIGS = sorted(path.name for path in FIXTURES.glob("*.py"))
# A first deploy off every epoch multiple of the configs' intervals (START is on them all).
DEPLOYED = START + timedelta(seconds=4321, milliseconds=250)


@functools.cache
def loaded(config: str) -> tuple[CronJob, ...]:
    """The registrations of a real config, read by RQ's own loader as ``cron-bridge rq-cron``
    reads it (the Redis is never asked); once per process, as a module is imported once."""
    scheduler = _Loading(connection=Redis(port=1))
    scheduler.load_config_from_file(str(FIXTURES / config))
    assert not scheduler.refused, scheduler.refused
    return tuple(scheduler.get_jobs())


def rq_interval_walk(
    registration: CronJob, started: datetime, skip: int, most: int
) -> list[datetime]:
    """RQ's sends of an interval registration from a start at ``started``: the first at once
    (``should_run`` of one never sent), then each at ``get_next_enqueue_time`` after the
    last, as its loop sets ``latest_enqueue_time``; the ``skip`` first ones passed over."""
    job = CronJob(registration.queue_name, func=cleanup, interval=registration.interval)
    assert job.should_run()
    fires, at = [], started
    for index in range(skip + most):
        if index >= skip:
            fires.append(at)
        job.set_enqueue_time(at)
        assert job.next_enqueue_time is not None
        at = job.next_enqueue_time
    return fires


def test_every_fixture_is_a_real_config_with_registrations() -> None:
    assert len(CONFIGS) >= 4
    for config in CONFIGS:
        assert (FIXTURES / config).read_text().startswith('"""'), config  # its source, said
        assert loaded(config), config


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("config", CONFIGS)
def test_real_configs_fire_as_rq_fires_them(config: str, zone: str) -> None:
    """Every registration of each real config, read by the drop-in, against RQ's own
    next-enqueue function over a year: a cron string walked as ``compare`` walks it, an
    interval from a first deploy at DEPLOYED (anchored in a store, ``rqcron.interval_anchor``),
    the first 200 sends and 200 a year on (in UTC only: an interval reads no zone)."""
    registrations = loaded(config)
    jobs = jobs_of(list(registrations), zone)
    assert len(jobs) == len(registrations)
    store = MemoryStore(allow_local_cluster=True)
    armed, since = anchored(
        store,
        [job for job, _ in jobs.values()],
        {name: reg for name, (_, reg) in jobs.items()},
        DEPLOYED,
    )
    for job, (name, (_, registration)) in zip(armed, jobs.items(), strict=True):
        assert job.name == name
        if registration.cron:
            compare(registration.cron, zone, registration)
            continue
        assert registration.interval is not None
        if zone != "UTC":
            continue
        later = int(YEAR.total_seconds() // registration.interval)  # the sends a year on
        for skip in (0, later):
            theirs = rq_interval_walk(registration, DEPLOYED, skip, 200)
            first = theirs[0] - timedelta(milliseconds=1) if skip else since[name]
            ours = walk(job.schedule.next_after, first, theirs[-1], 200)
            assert ours == theirs, (config, name, skip, _first_difference(ours, theirs))
