"""Stored schedules: validated like a declaration before anything is written, changed field
by field, removed; followed by a beat on a fake clock."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cron_bridge import Backoff, Beat, ConfigError
from cron_bridge.beat.stored_sync import FULL_EVERY, StoredSync
from cron_bridge.control import pause as control
from cron_bridge.control.schedules import FEED_GROUP, StoredSchedules
from cron_bridge.errors import StoreUnavailable
from cron_bridge.stores import MemoryStore
from cron_bridge.stores.records import CONTROLS_MAX
from cron_bridge.testing import FakeClock
from tests.test_beat import ListQueue, beats, clock, queue
from tests.waiting import wait_for

__all__ = ["beats", "clock", "queue"]  # fixtures
# Stored schedules are checked by the adapter they name (RQ's here).
pytestmark = pytest.mark.extras

RQ = {"library": "rq", "task": "proj.tasks.report"}


@pytest.fixture(autouse=True)
def _storable_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tasks these tests name are agreed to the way a team without them at hand does."""
    monkeypatch.setenv("CRON_BRIDGE_STORED_TASKS", "proj.*")


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"every": "soon"}, "every"),
        ({"cron": "61 * * * *"}, "cron"),
        ({}, "cron"),
        ({"every": "1m", "attempts": 0}, "attempts"),
        ({"every": "1m", "tz": "Mars/Olympus"}, "tz"),
        ({"every": "1m", "colour": "blue"}, "colour"),
        ({"every": "1m", "library": "sidekiq"}, "library"),
        ({"every": "1m", "task": ""}, "task"),
        ({"every": "1m", "args": {"not": "a list"}}, "args"),
        ({"every": "1m", "kwargs": ["not", "an", "object"]}, "kwargs"),
        ({"every": "1m", "kwargs": {"when": float("nan")}}, "kwargs"),
        ({"every": "1m", "queue": 7}, "queue"),
        ({"every": "1ms"}, "every"),  # at most once a second
        ({"every": 0.5}, "every"),
    ],
)
def test_a_bad_stored_schedule_names_the_option_and_writes_nothing(
    options: dict[str, object], option: str
) -> None:
    store = MemoryStore()
    with pytest.raises(ConfigError) as caught:
        StoredSchedules(store).add("tenant.7", **{**RQ, **options})  # type: ignore[arg-type]
    assert (caught.value.job, caught.value.option) == ("tenant.7", option)
    assert StoredSchedules(store).list() == {} and store.controls(FEED_GROUP) == {}


def test_add_update_remove_and_the_change_log() -> None:
    store = MemoryStore()
    schedules = StoredSchedules(store)
    schedules.add("tenant.7", every="2s", kwargs={"tenant": 7}, by="cli:ana@laptop", **RQ)
    with pytest.raises(ConfigError, match="exists"):
        schedules.add("tenant.7", every="5s", **RQ)
    updated = schedules.update("tenant.7", cron="*/5 * * * *", queue="reports", by="http:1")
    assert updated.options == {"cron": "*/5 * * * *"} and updated.queue == "reports"
    assert updated.kwargs == {"tenant": 7}
    with pytest.raises(ConfigError):
        schedules.update("tenant.7", cron="not cron")
    assert schedules.get("tenant.7") == updated  # a bad update changed nothing
    assert schedules.remove("tenant.7", by="cli:ana@laptop") == updated
    assert schedules.remove("tenant.7") is None
    changes = control.changes(store, "tenant.7")
    assert [(c.action, c.by) for c in changes] == [
        ("schedule removed", "cli:ana@laptop"),
        ("schedule updated", "http:1"),
        ("schedule added", "cli:ana@laptop"),
    ]
    assert (
        changes[1].reason
        == "rq proj.tasks.report every=2s -> rq proj.tasks.report cron=*/5 * * * *"
    )


def test_durations_and_times_are_stored_as_the_text_they_are_written_as() -> None:
    """A ``timedelta`` or ``datetime`` (as ``@cluster_task`` takes them) is stored as its text,
    and makes the job the text would; a time without its offset is refused, naming it."""
    store = MemoryStore()
    schedules = StoredSchedules(store)
    start = datetime(2027, 1, 4, 9, tzinfo=ZoneInfo("Europe/Warsaw"))
    given = schedules.add(
        "tenant.9",
        every=timedelta(minutes=90),
        lock_ttl=timedelta(seconds=1.25),
        start=start,
        **RQ,
    )
    assert given.options == {"every": "5400s", "lock_ttl": "1.25s", "start": start.isoformat()}
    written = StoredSchedules(MemoryStore()).add(
        "tenant.9", every="5400s", lock_ttl="1.25s", start=start.isoformat(), **RQ
    )
    assert given.job() == written.job()
    updated = schedules.update("tenant.9", every=timedelta(hours=2), timeout=timedelta(0.5))
    assert (updated.options["every"], updated.options["timeout"]) == ("7200s", "43200s")
    with pytest.raises(ConfigError) as caught:
        schedules.add("tenant.10", every="1h", start=datetime(2027, 1, 4, 9), **RQ)
    assert caught.value.option == "start"
    with pytest.raises(ConfigError) as caught:
        schedules.add("tenant.10", every="1h", jitter=-timedelta(seconds=1), **RQ)
    assert (caught.value.job, caught.value.option) == ("tenant.10", "jitter")
    assert caught.value.value == -timedelta(seconds=1)  # as given, not the text it became
    checked = schedules.check("tenant.10", every="1h", backoff=Backoff.fixed(5), **RQ)
    assert checked.backoff == {"kind": "fixed", "base": 5.0, "max": None}  # as add stores it


def test_a_backoff_is_kept_and_given_back_to_the_queue() -> None:
    store = MemoryStore()
    schedules = StoredSchedules(store)
    spec = schedules.add(
        "tenant.8", every="1m", attempts=3, backoff=Backoff.exponential(2, max=30), **RQ
    )
    assert spec.backoff == {"kind": "exponential", "base": 2.0, "max": 30.0}
    job = schedules.get("tenant.8").job(worker=True)  # type: ignore[union-attr]
    assert (job.attempts, job.backoff.delays(2)) == (3, [2.0, 4.0])
    with pytest.raises(ConfigError) as caught:
        schedules.update("tenant.8", backoff={"kind": "sometimes"})
    assert caught.value.option == "backoff"


def test_a_library_whose_adapter_cannot_run_stored_schedules_is_refused(
    queue: ListQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An adapter with no stored-schedule task (a fourth library's): a clear error."""
    monkeypatch.setattr("cron_bridge.control.schedule_spec.LIBRARIES", ("listqueue",))
    store = MemoryStore()
    with pytest.raises(ConfigError, match="cannot run stored schedules") as caught:
        StoredSchedules(store).add("x", library="listqueue", task="proj.report", every="1m")
    assert caught.value.option == "library"
    assert StoredSchedules(store).list() == {}


def test_a_beat_follows_a_stored_schedule_and_drops_it(
    clock: FakeClock, beats: list[Beat], queue: ListQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queue, "stored_task", "listqueue.stored")
    monkeypatch.setattr("cron_bridge.control.schedule_spec.LIBRARIES", ("listqueue",))
    store = MemoryStore(clock=clock)
    beats.append(Beat(store, [], clock=clock))
    beats[0].start()
    StoredSchedules(store).add("tenant.7", library="listqueue", task="proj.report", every="1s")
    # Followed within a second of real time: the look at the store is not on the fake clock,
    # which only has to move for the loop to come round.
    wait_for(lambda: has(beats[0], "tenant.7", clock), 30, "the stored job", every=0.01)
    clock.advance(1)
    wait_for(
        lambda: any(m["job"] == "tenant.7" for m in queue.sent),
        30,
        "the stored job sent",
        every=0.01,
    )
    assert queue.sent[-1]["trigger"] == "schedule"
    StoredSchedules(store).remove("tenant.7")
    clock.advance(timedelta(milliseconds=100))
    wait_for(lambda: not has(beats[0], "tenant.7", clock), 30, "dropped", every=0.01)
    assert {j.task for j in beats[0].jobs()} == set()


def has(beat: Beat, name: str, clock: FakeClock) -> bool:
    clock.advance(timedelta(milliseconds=10))
    return name in {job.name for job in beat.jobs()}


class CountingStore(MemoryStore):
    """A memory store that counts the control records read, to show what a look costs."""

    def __init__(self) -> None:
        super().__init__()
        self.read: list[str] = []

    def control(self, group: str, key: str) -> str | None:
        self.read.append(f"{group}/{key}")
        return super().control(group, key)

    def controls(self, group: str, **bounds: int) -> dict[str, str]:
        found = super().controls(group, **bounds)
        self.read.extend(f"{group}/{key}" for key in found)
        return found


def polled(sync: StoredSync, now: float) -> tuple[dict[str, Any], set[str]] | None:
    """``poll``, and once the full read it may have begun (on its thread) is done, ``poll``
    again: what the two found."""
    first = sync.poll(now)
    assert sync.wait_read(30)
    second = sync.poll(now)
    changed = {**(first[0] if first else {}), **(second[0] if second else {})}
    gone = (first[1] if first else set()) | (second[1] if second else set())
    return (changed, gone) if changed or gone else None


def test_a_change_costs_what_it_changes_not_a_read_of_every_schedule() -> None:
    """1,000 stored schedules: a look while nothing changed reads one feed entry; a change
    reads its feed entry and its one schedule; a record written past the feed is found by the
    full read, the safety net."""
    store = CountingStore()
    schedules = StoredSchedules(store)
    for n in range(1000):
        schedules.add(f"tenant-{n}.report", every="1h", **RQ)
    sync = StoredSync(store)
    assert sync.poll(0.0) is None  # the first read runs on a thread of its own
    changed, gone = polled(sync, 0.0)  # type: ignore[misc]
    assert len(changed) == 1000 and gone == set() and sync.full_reads == 1
    store.read.clear()
    assert sync.poll(1.0) is None
    # One small read while nothing changes: the next entry and the head, one round trip.
    assert store.read == ["schedule-feed/head", "schedule-feed/seq:1001"]
    schedules.update("tenant-7.report", every="2h")
    schedules.remove("tenant-8.report")
    store.read.clear()
    changed, gone = sync.poll(2.0)  # type: ignore[misc]
    assert set(changed) == {"tenant-7.report"} and gone == {"tenant-8.report"}
    assert [r for r in store.read if r.startswith("schedule/")] == [
        "schedule/tenant-7.report",
        "schedule/tenant-8.report",
    ]
    assert {r.partition("/")[0] for r in store.read} == {"schedule", "schedule-feed"}
    assert sync.followed == 2
    # Written straight into the store, not announced: seen by the next full read.
    store.put_control(
        "schedule",
        "tenant-8.report",
        store.control("schedule", "tenant-9.report").replace("tenant-9", "tenant-8"),
    )  # type: ignore[union-attr]
    assert sync.poll(3.0) is None
    changed, gone = polled(sync, 3.0 + FULL_EVERY)  # type: ignore[misc]
    assert set(changed) == {"tenant-8.report"} and sync.full_reads == 2


def test_two_adds_of_one_name_at_once_one_wins_and_one_is_told() -> None:
    store = MemoryStore()
    barrier = threading.Barrier(2)
    said: list[str] = []

    def add(every: str) -> None:
        barrier.wait()
        try:
            StoredSchedules(store).add("tenant.7", every=every, **RQ)
            said.append("added")
        except ConfigError as exc:
            said.append("exists" if "exists" in str(exc) else str(exc))

    threads = [threading.Thread(target=add, args=(e,)) for e in ("1h", "2h")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(said) == ["added", "exists"]
    assert [c.action for c in control.changes(store, "tenant.7")] == ["schedule added"]


def test_more_schedules_than_a_control_group_holds_are_all_read_and_all_run() -> None:
    """Past CONTROLS_MAX (10,000, the bound of a group read for show) every stored schedule
    is still read: one left out would silently not run."""
    store = MemoryStore()
    count = CONTROLS_MAX + 2_000
    store.put_controls(
        "schedule",
        {
            f"tenant-{n}.report": json.dumps(
                {"name": f"tenant-{n}.report", **RQ, "options": {"every": "1h"}}
            )
            for n in range(count)
        },
    )
    changed, gone = polled(StoredSync(store), 0.0)  # type: ignore[misc]
    assert len(changed) == count and gone == set()


class FlakyStore(MemoryStore):
    """A memory store whose next read of stored schedules by name fails, once."""

    fail_next = False

    def controls_of(self, group: str, keys: Any) -> dict[str, str]:
        if group == "schedule" and self.fail_next:
            self.fail_next = False
            raise StoreUnavailable("connection reset")
        return super().controls_of(group, keys)


def test_a_change_whose_schedule_read_failed_is_followed_at_the_next_look() -> None:
    store = FlakyStore()
    sync = StoredSync(store)
    polled(sync, 0.0)
    StoredSchedules(store).add("tenant-1.report", every="1h", **RQ)
    store.fail_next = True
    with pytest.raises(StoreUnavailable):
        sync.poll(1.0)
    changed, gone = sync.poll(2.0)  # type: ignore[misc]
    assert set(changed) == {"tenant-1.report"} and gone == set() and sync.full_reads == 1


def test_a_group_read_whole_is_kept_whole_for_a_key_of_the_wrong_type() -> None:
    """The Redis store reads a control group found of the wrong type as it last read it (a
    pause stays paused). The pauses and the stored schedules, read whole past the budget the
    other groups share, are kept whole."""
    from cron_bridge.stores.redis_types import LastReads

    kept = LastReads(max_bytes=1_000)
    pauses = {f"tenant-{n}.report": "x" * 100 for n in range(1_000)}  # 100 KB
    kept.keep("pause", pauses, bound=10**9)
    kept.keep("jobs", {"a": "y" * 600})
    kept.keep("aside", {"b": "z" * 600})  # the budget's: "jobs" goes
    assert kept.get("pause") == pauses and kept.get("jobs") == {}
    assert kept.get("aside") == {"b": "z" * 600}


def _tenants(count: int, **extra: Any) -> list[dict[str, Any]]:
    return [
        {"name": f"tenant-{n}.report", **RQ, "cron": f"{n % 60} 3 * * *", "kwargs": {"t": n}}
        | extra
        for n in range(count)
    ]


def test_many_schedules_are_added_a_batch_a_round_trip_and_followed_by_the_replicas() -> None:
    store = MemoryStore()
    sync = StoredSync(store)
    polled(sync, 0.0)
    before = store.stats.round_trips
    specs = StoredSchedules(store).add_many(_tenants(12_000), by="signup")
    trips = store.stats.round_trips - before
    assert len(specs) == 12_000 and len(StoredSchedules(store).list()) == 12_000
    # Three batches of 5,000, each: the records, the change logs, and the feed (its head,
    # the entries, the number below them, the head again); the first has none below.
    assert trips == 3 * 6 - 1, trips
    changed, gone = sync.poll(1.0)  # type: ignore[misc]
    assert len(changed) == 12_000 and gone == set() and sync.full_reads == 1
    entries = [v for k, v in store.controls(FEED_GROUP, most=10**6).items() if k != "head"]
    assert all(len(raw.encode()) <= 4096 for raw in entries)  # many names to an entry
    named = [name for raw in entries for name in json.loads(raw)["names"]]
    assert sorted(named) == sorted(spec.name for spec in specs)
    assert set(json.loads(entries[0])) == {"names", "at"}
    [added] = control.changes(store, "tenant-11999.report")
    assert (added.action, added.by) == ("schedule added", "signup")
    assert added.reason == "rq proj.tasks.report cron=59 3 * * *"


@pytest.mark.parametrize(
    ("bad", "option"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"name": "../etc/passwd"}, "name"),
        ({"kwargs": {"t": float("nan")}}, "kwargs"),
        ({"task": "os.system"}, "task"),
        ({"every": "10ms", "cron": None}, "every"),
        ({"colour": "blue"}, "colour"),
        ({"task": None}, "task"),
    ],
)
def test_one_bad_entry_among_thousands_writes_nothing_and_is_named(
    bad: dict[str, Any], option: str
) -> None:
    store = MemoryStore()
    entries = _tenants(6_000)
    entries[5_500] = {k: v for k, v in (entries[5_500] | bad).items() if v is not None}
    with pytest.raises(ConfigError) as caught:
        StoredSchedules(store).add_many(entries)
    assert caught.value.option in (option, "entry"), caught.value
    assert str(caught.value.job) in ("tenant-5500.report", "../etc/passwd", "entry 5501")
    assert StoredSchedules(store).list() == {} and store.controls(FEED_GROUP) == {}


def test_a_batch_that_meets_a_stored_name_is_not_written_and_the_earlier_are() -> None:
    store = MemoryStore()
    StoredSchedules(store).add("tenant-7000.report", every="1h", **RQ)
    with pytest.raises(ConfigError, match="5000 of 8000 added before this batch") as caught:
        StoredSchedules(store).add_many(_tenants(8_000))
    assert caught.value.job == "tenant-7000.report"
    assert len(StoredSchedules(store).list()) == 5_001
    with pytest.raises(ConfigError, match="two entries of one name"):
        StoredSchedules(store).add_many([*_tenants(2), *_tenants(1)])


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {"name": st.sampled_from(["a.1", "a.2", "b", "-bad", "x" * 201])},
            optional={
                "task": st.sampled_from(["proj.tasks.report", "os.system", "", 7]),
                "library": st.sampled_from(["rq", "celery", "sidekiq"]),
                "cron": st.sampled_from(["0 3 * * *", "99 * * * *", "*/5 * * * *"]),
                "every": st.sampled_from(["1h", "1ms", "soon"]),
                "args": st.sampled_from([[], [1, "a"], "x", [float("inf")]]),
                "kwargs": st.sampled_from([{}, {"t": 1}, [], {"t": float("nan")}]),
                "tz": st.sampled_from(["UTC", "Mars/Base", "Europe/Warsaw"]),
                "attempts": st.sampled_from([1, 0, "3"]),
            },
        ),
        min_size=1,
        max_size=4,
    )
)
def test_add_many_refuses_exactly_what_add_refuses_one_by_one(
    entries: list[dict[str, Any]],
) -> None:
    """The same refusal, naming the same entry and option, as ``add`` of each in turn
    (``check``), whatever ``add_many`` checks once for entries that share their task and
    options."""
    expected: tuple[str | None, str | None] | None = None
    seen: set[str] = set()
    for entry in entries:
        fields = dict(entry)
        name = fields.pop("name")
        try:
            StoredSchedules(MemoryStore()).check(name, **fields)
        except ConfigError as exc:
            expected = (exc.job, exc.option)
            break
        except TypeError:
            expected = (name, "entry")
            break
        if name in seen:
            expected = (name, "name")
            break
        seen.add(name)
    store = MemoryStore()
    try:
        StoredSchedules(store).add_many(entries)
        got = None
    except ConfigError as exc:
        got = (exc.job, exc.option)
    assert got == expected
    assert (got is None) == bool(StoredSchedules(store).list())


class SlowStore(MemoryStore):
    """A memory store whose read of every stored schedule waits for ``go`` (a million
    schedules take a minute), or fails while ``fails`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()
        self.fails: Exception | None = None

    def controls(self, group: str, **bounds: int) -> dict[str, str]:
        if group == "schedule":
            assert self.go.wait(30)
            if self.fails is not None:
                raise self.fails
        return super().controls(group, **bounds)


def test_every_schedule_is_read_beside_the_loop_and_a_failed_read_is_said_by_each_look() -> None:
    """The full read runs on a thread of its own: a look meanwhile returns at once, and what
    changed through the feed while it read is applied on top of it. A read that failed is
    raised by the next look, and by every look until a read works."""
    store = SlowStore()
    schedules = StoredSchedules(store)
    for n in range(5):
        schedules.add(f"tenant-{n}.report", every="1h", **RQ)
    sync = StoredSync(store)
    assert sync.poll(0.0) is None  # the read waits; the look does not
    assert sync.poll(1.0) is None and sync.full_reads == 0
    store.go.set()
    assert sync.wait_read(30)
    schedules.update("tenant-3.report", every="2h")  # after the read's head: followed
    changed, gone = sync.poll(2.0)  # type: ignore[misc]
    assert set(changed) == {f"tenant-{n}.report" for n in range(5)} and gone == set()
    assert changed["tenant-3.report"].schedule.describe() == "every 2h"
    store.fails = StoreUnavailable("connection reset")
    store.go.clear()
    assert sync.poll(2.0 + FULL_EVERY) is None  # a safety net begun; the feed followed
    store.go.set()
    assert sync.wait_read(30)
    for now in (3.0 + FULL_EVERY, 4.0 + FULL_EVERY):
        with pytest.raises(StoreUnavailable):
            sync.poll(now)
        assert sync.wait_read(30)
    store.fails = None
    with pytest.raises(StoreUnavailable):  # the read the last look began failed too
        sync.poll(5.0 + FULL_EVERY)
    assert sync.wait_read(30)
    assert sync.poll(6.0 + FULL_EVERY) is None  # read again, nothing changed
    assert sync.full_reads == 2 and len(sync.jobs) == 5


def test_the_texts_tenants_share_are_held_once_whatever_the_number_of_schedules() -> None:
    """A replica holding a million stored schedules keeps one copy of each cron expression,
    zone, task and queue they share, and of each name (its record's key), not one per
    schedule."""
    store = MemoryStore()
    StoredSchedules(store).add_many(
        [
            {"name": f"tenant-{n}.report", **RQ, "cron": "0 3 * * *", "tz": "Europe/Warsaw"}
            for n in range(3)
        ],
        by="signup",
    )
    store.put_controls("schedule", dict(store.controls("schedule")))  # texts read anew
    specs = list(StoredSchedules(store).each())
    assert len(specs) == 3
    for field in ("library", "task", "queue"):
        assert len({id(getattr(spec, field)) for spec in specs}) == 1, field
    for option in ("cron", "tz"):
        assert len({id(spec.options[option]) for spec in specs}) == 1, option
    jobs = [spec.job() for spec in specs]
    assert len({id(job.schedule.expr) for job in jobs}) == 1  # type: ignore[attr-defined]
