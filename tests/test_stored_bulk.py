"""Stored schedules changed and removed many at once (``update_many``, ``remove_many``):
checked as ``update`` and ``remove`` check each before anything is written, written a batch a
round trip on every store, each batch whole or not at all, and followed by the replicas."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cron_bridge import ConfigError
from cron_bridge.beat.stored_sync import StoredSync
from cron_bridge.control import pause as control
from cron_bridge.control.bulk import BULK, LINE_MAX, json_lines
from cron_bridge.control.schedules import FEED_GROUP, GROUP, StoredSchedules
from cron_bridge.errors import StoreUnavailable
from cron_bridge.stores import MemoryStore, Store
from tests.conftest import StoreKit, make_kit, store_kinds
from tests.test_stored import polled

# Stored schedules are checked by the adapter they name (RQ's here).
pytestmark = pytest.mark.extras

RQ = {"library": "rq", "task": "proj.tasks.report"}


@pytest.fixture(autouse=True)
def _storable_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tasks these tests name are agreed to the way a team without them at hand does."""
    monkeypatch.setenv("CRON_BRIDGE_STORED_TASKS", "proj.*")


@pytest.fixture(params=store_kinds(["memory", "sqlite", "redis", "postgres"]))
def kit(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreKit]:
    """A fresh namespace on the memory store, SQLite, Redis and PostgreSQL."""
    made = make_kit(request.param, request, tmp_path)
    yield made
    made.close()


_EACH_BATCH = {"memory": 6, "sqlite": 6, "redis": 7, "postgres": 7}  # round trips of a write


def _tenants(count: int, **extra: Any) -> list[dict[str, Any]]:
    return [
        {"name": f"tenant-{n}.report", **RQ, "cron": f"{n % 60} 3 * * *", "kwargs": {"t": n}}
        | extra
        for n in range(count)
    ]


def _state(store: Store, names: list[str]) -> dict[str, Any]:
    """What a bulk write could change: the records, the feed, the change logs of ``names``."""
    return {
        "schedules": store.controls(GROUP, most=10**6, max_bytes=10**9),
        "feed": store.controls(FEED_GROUP, most=10**6),
        "changes": {name: store.controls(control.CHANGES.format(job=name)) for name in names},
    }


def test_update_many_changes_thousands_a_batch_a_round_trip_and_the_replicas_follow(
    kit: StoreKit,
) -> None:
    """12,000 schedules changed in one call: each as ``update`` would change it, read and
    written 5,000 a round trip (on the memory store, which reads key by key, only the
    writes), each change logged with what it was, and every replica told."""
    store = kit.open()
    schedules = StoredSchedules(store)
    schedules.add_many(_tenants(12_000))
    sync = StoredSync(store)
    polled(sync, 0.0)  # every schedule read (on its thread), before the writes are counted
    written = _updated_at(kit, "tenant-7.report") if kit.kind == "postgres" else None
    before = store.stats.round_trips
    specs = schedules.update_many(
        [
            {"name": f"tenant-{n}.report", "tz": "Europe/Warsaw", "queue": "q"}
            for n in range(12_000)
        ],
        by="ops",
    )
    trips = store.stats.round_trips - before
    assert len(specs) == 12_000
    assert specs[42] == schedules.get("tenant-42.report")
    assert specs[42].options == {"cron": "42 3 * * *", "tz": "Europe/Warsaw"}
    assert (specs[42].queue, specs[42].kwargs) == ("q", {"t": 42})
    # Three batches: the reads, then each batch's records, change logs and feed (its head,
    # the entries, the number below them, the head again, and a notice where the store pushes).
    reads = 12_000 if kit.kind == "memory" else 3
    assert trips == reads + 3 * _EACH_BATCH[kit.kind], trips
    if kit.kind == "postgres":  # the row says when it changed, as put_control's does
        assert _updated_at(kit, "tenant-7.report") > written
    changed, gone = sync.poll(1.0)  # type: ignore[misc]
    assert len(changed) == 12_000 and gone == set()
    assert "Europe/Warsaw" in repr(changed["tenant-7.report"].schedule)
    [updated, _] = control.changes(store, "tenant-11999.report")
    assert (updated.action, updated.by) == ("schedule updated", "ops")
    assert updated.reason == (
        "rq proj.tasks.report cron=59 3 * * * -> rq proj.tasks.report cron=59 3 * * *, "
        "tz=Europe/Warsaw"
    )


def _updated_at(kit: StoreKit, name: str) -> Any:
    """When PostgreSQL's row of the stored schedule ``name`` was last written."""
    import psycopg

    base, _, query = kit.url.partition("?")
    table = f"{query.removeprefix('schema=')}.cron_bridge_controls"
    with psycopg.connect(base) as conn:
        row = conn.execute(
            f"SELECT updated_at FROM {table} WHERE grp = %s AND key = %s", (GROUP, name)
        ).fetchone()
    assert row is not None
    return row[0]


def test_remove_many_removes_a_batch_a_round_trip_and_says_which_were_not_stored(
    kit: StoreKit,
) -> None:
    """11,000 of 12,000 removed in one call, 5,000 a round trip; a name that is not stored
    (or that no schedule can have) is said with None, a name given twice is removed once,
    each removal is logged and every replica drops them."""
    store = kit.open()
    schedules = StoredSchedules(store)
    schedules.add_many(_tenants(12_000))
    sync = StoredSync(store)
    polled(sync, 0.0)  # every schedule read (on its thread), before the writes are counted
    names = [f"tenant-{n}.report" for n in range(11_000)]
    before = store.stats.round_trips
    gone = schedules.remove_many([*names, "nope", "tenant-3.report", "../x"], by="ops")
    trips = store.stats.round_trips - before
    assert list(gone) == [*names, "nope", "../x"]
    assert gone["nope"] is None and gone["../x"] is None
    assert gone["tenant-3.report"] is not None
    assert gone["tenant-3.report"].kwargs == {"t": 3}
    assert sorted(schedules.list()) == sorted(f"tenant-{n}.report" for n in range(11_000, 12_000))
    reads = 11_001 if kit.kind == "memory" else 3
    assert trips == reads + 3 * _EACH_BATCH[kit.kind], trips
    changed, dropped = sync.poll(1.0)  # type: ignore[misc]
    assert changed == {} and dropped == set(names)
    [removed, _] = control.changes(store, "tenant-10999.report")
    assert (removed.action, removed.by) == ("schedule removed", "ops")
    assert removed.reason == "rq proj.tasks.report cron=19 3 * * *"
    assert schedules.remove_many(["nope"]) == {"nope": None}
    assert schedules.remove_many([]) == {}


@pytest.mark.parametrize(
    ("bad", "option"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"task": "os.system"}, "task"),
        ({"library": "sidekiq"}, "library"),
        ({"kwargs": {"t": float("nan")}}, "kwargs"),
        ({"every": "10ms", "cron": None}, "every"),
        ({"cron": None}, "cron"),  # no schedule left
        ({"colour": "blue"}, "colour"),
        ({"name": "tenant-x.report"}, "name"),  # not stored
        ({"name": "tenant-1.report"}, "name"),  # a second entry of one name
        ({"name": 7}, "name"),
        ({"name": None}, "name"),
    ],
)
def test_one_bad_update_among_thousands_writes_nothing_and_is_named(
    bad: dict[str, Any], option: str
) -> None:
    store = MemoryStore()
    schedules = StoredSchedules(store)
    schedules.add_many(_tenants(6_000))
    before = _state(store, ["tenant-1.report", "tenant-5500.report"])
    entries: list[Any] = [{"name": f"tenant-{n}.report", "cron": "0 4 * * *"} for n in range(6_000)]
    entries[5_500] = entries[5_500] | bad
    with pytest.raises(ConfigError) as caught:
        schedules.update_many(entries)
    assert (caught.value.entry, caught.value.option) == (5_500, option), caught.value
    assert _unchanged(store, before)


def _unchanged(store: Store, before: dict[str, Any]) -> bool:
    """Whether ``store`` holds what ``_state`` found ``before``."""
    return _state(store, list(before["changes"])) == before


def test_entries_that_are_not_changes_or_names_are_refused_by_number() -> None:
    store = MemoryStore()
    schedules = StoredSchedules(store)
    schedules.add_many(_tenants(3))
    before = _state(store, ["tenant-0.report"])
    for entries in (
        [{"name": "tenant-0.report", "cron": "0 4 * * *"}, ["tenant-1.report"]],
        [{"name": "tenant-0.report", "cron": "0 4 * * *"}, "tenant-1.report"],
        # A name that is no text, of a kind a dictionary cannot hold (it was a TypeError).
        [{"name": "tenant-0.report", "cron": "0 4 * * *"}, {"name": ["tenant-1.report"]}],
        [{"name": "tenant-0.report", "cron": "0 4 * * *"}, {"name": {"a": 1}}],
    ):
        with pytest.raises(ConfigError) as caught:
            schedules.update_many(entries)  # type: ignore[arg-type]
        assert (caught.value.job, caught.value.entry) == ("entry 2", 1)
    with pytest.raises(ConfigError) as caught:
        schedules.remove_many(["tenant-0.report", 7])  # type: ignore[list-item]
    assert (caught.value.job, caught.value.option, caught.value.entry) == ("entry 2", "name", 1)
    assert _unchanged(store, before)


@pytest.mark.parametrize("kind", store_kinds(["sqlite", "redis", "postgres"]))
def test_a_refused_update_writes_nothing_on_a_shared_store(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    kit = make_kit(kind, request, tmp_path)
    try:
        schedules = StoredSchedules(kit.open())
        schedules.add_many(_tenants(6_000))
        before = _state(schedules.store, ["tenant-0.report", "tenant-5999.report"])
        entries = [
            {"name": f"tenant-{n}.report", "every": "1h", "cron": None} for n in range(6_000)
        ]
        entries[5_999]["task"] = "os.system"
        with pytest.raises(ConfigError, match=r"os\.system") as caught:
            schedules.update_many(entries)
        assert caught.value.entry == 5_999
        assert _unchanged(schedules.store, before)
    finally:
        kit.close()


def _refuse_writes_of(kit: StoreKit, key: str, delete: bool) -> None:
    """Make the store's server refuse to write (add or update; or, with ``delete``, to
    delete) the stored schedule ``key``: a trigger that fails the statement, whose
    transaction then rolls back whole (the store reports it as an outage)."""
    if kit.kind == "sqlite":
        path = kit.url.removeprefix("sqlite:///")
        row = "OLD" if delete else "NEW"
        with sqlite3.connect(path) as conn:
            for event in ("DELETE",) if delete else ("INSERT", "UPDATE"):  # an add, an update
                conn.execute(
                    f"CREATE TRIGGER refuse_{event} BEFORE {event} ON controls "
                    f"WHEN {row}.grp = '{GROUP}' AND {row}.key = '{key}' "
                    "BEGIN SELECT json_extract('refused', '$'); END"  # an error as it runs
                )
        return
    import psycopg

    base, _, query = kit.url.partition("?")
    schema = query.removeprefix("schema=")
    row = "OLD" if delete else "NEW"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(
            f"CREATE FUNCTION {schema}.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "RAISE EXCEPTION 'refused' USING ERRCODE = 'query_canceled'; END $$"
        )
        conn.execute(
            f"CREATE TRIGGER refuse BEFORE {'DELETE' if delete else 'INSERT OR UPDATE'} ON "
            f"{schema}.cron_bridge_controls FOR EACH ROW WHEN ({row}.grp = '{GROUP}' AND "
            f"{row}.key = '{key}') EXECUTE FUNCTION {schema}.refuse()"
        )


@pytest.mark.parametrize("kind", store_kinds(["sqlite", "postgres"]))
@pytest.mark.parametrize("action", ["add", "update", "remove"])
def test_a_batch_the_store_fails_is_not_written_and_the_earlier_are(
    kind: str, action: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The server fails the write of the second batch (a trigger on one of its records):
    the first batch is written with its change logs, nothing of the second or third, and
    the error says how many were."""
    kit = make_kit(kind, request, tmp_path)
    try:
        schedules = StoredSchedules(kit.open())
        tenants = _tenants(8_000)
        if action != "add":
            schedules.add_many(tenants)
        assert len(schedules.list()) == (0 if action == "add" else 8_000)  # its tables made
        _refuse_writes_of(kit, "tenant-7000.report", delete=action == "remove")
        names = [t["name"] for t in tenants]
        with pytest.raises(StoreUnavailable, match=f"5000 of 8000 schedule.s. {action}"):
            if action == "add":
                schedules.add_many(tenants)
            elif action == "update":
                schedules.update_many([{"name": name, "queue": "q"} for name in names])
            else:
                schedules.remove_many(names)
        stored = schedules.list()
        first, rest = names[:BULK], names[BULK:]
        if action == "add":
            assert sorted(stored) == sorted(first)
        elif action == "update":
            assert {stored[n].queue for n in first} == {"q"}
            assert {stored[n].queue for n in rest} == {None}
        else:
            assert sorted(stored) == sorted(rest)
        logged = {
            n: [c.action for c in control.changes(schedules.store, n)] for n in (first[-1], rest[0])
        }
        done = {"add": "schedule added", "update": "schedule updated"}.get(
            action, "schedule removed"
        )
        assert done in logged[first[-1]] and done not in logged[rest[0]], logged
    finally:
        kit.close()


def test_a_new_task_is_asked_of_the_allow_list_and_an_unchanged_one_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As ``update``: a schedule whose task is no longer agreed to can still be changed, but
    no entry may move a schedule to a task that is not, even one that shares every other
    check with an entry before it."""
    store = MemoryStore()
    schedules = StoredSchedules(store)
    schedules.add_many(
        [
            {"name": "a", "library": "rq", "task": "proj.old", "every": "1h"},
            {"name": "b", "library": "rq", "task": "proj.new", "every": "1h"},
        ]
    )
    monkeypatch.setenv("CRON_BRIDGE_STORED_TASKS", "proj.new")
    [a] = schedules.update_many([{"name": "a", "every": "2h"}])
    assert (a.task, a.options) == ("proj.old", {"every": "2h"})
    with pytest.raises(ConfigError) as caught:
        schedules.update_many([{"name": "a", "every": "3h"}, {"name": "b", "task": "proj.old"}])
    assert (caught.value.job, caught.value.option, caught.value.entry) == ("b", "task", 1)
    assert schedules.get("a") == a


def test_an_entry_wrong_in_its_arguments_and_its_name_is_refused_as_add_refuses_it() -> None:
    """An entry whose task and options an earlier entry shared, with arguments and a name
    both wrong, is refused for its arguments, as ``add`` of it alone is."""
    with pytest.raises(ConfigError) as alone:
        StoredSchedules(MemoryStore()).check("-bad", args="x", every="1h", **RQ)  # type: ignore[arg-type]
    entries = [
        {"name": "a.1", "every": "1h", **RQ},
        {"name": "-bad", "args": "x", "every": "1h", **RQ},
    ]
    with pytest.raises(ConfigError) as many:
        StoredSchedules(MemoryStore()).add_many(entries)
    assert (many.value.job, many.value.option) == (alone.value.job, alone.value.option)
    assert (many.value.option, many.value.entry) == ("args", 1)


STORED = {
    "a.1": {**RQ, "cron": "0 3 * * *", "kwargs": {"t": 1}},
    "a.2": {**RQ, "every": "1h", "tz": "Europe/Warsaw"},
    "b": {"library": "celery", "task": "proj.tasks.other", "cron": "*/5 * * * *"},
}


def _stored() -> StoredSchedules:
    schedules = StoredSchedules(MemoryStore())
    for name, fields in STORED.items():
        schedules.add(name, **fields)  # type: ignore[arg-type]
    return schedules


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {"name": st.sampled_from(["a.1", "a.2", "b", "nope", "-bad"])},
            optional={
                "task": st.sampled_from(["proj.tasks.report", "os.system", "", 7]),
                "library": st.sampled_from(["rq", "celery", "sidekiq"]),
                "cron": st.sampled_from(["0 3 * * *", "99 * * * *", None]),
                "every": st.sampled_from(["1h", "1ms", "soon", None]),
                "args": st.sampled_from([[], [1, "a"], "x", [float("inf")]]),
                "kwargs": st.sampled_from([{}, {"t": 1}, [], {"t": float("nan")}]),
                "tz": st.sampled_from(["UTC", "Mars/Base", None]),
                "attempts": st.sampled_from([1, 0, "3"]),
                "queue": st.sampled_from(["q", 7, None]),
            },
        ),
        min_size=1,
        max_size=4,
    )
)
def test_update_many_refuses_exactly_what_update_refuses_one_by_one(
    entries: list[dict[str, Any]],
) -> None:
    """The same refusal, naming the same schedule, option and entry, as ``update`` of each
    in turn, whatever ``update_many`` checks once for entries that share their task and
    options; refused, nothing is written; else the same schedules as ``update`` makes."""
    one_by_one = _stored()
    expected: tuple[str | None, str | None, int] | None = None
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        fields = dict(entry)
        name = fields.pop("name")
        if name in seen:
            expected = (name, "name", index)
            break
        seen.add(name)
        try:
            one_by_one.update(name, **fields)
        except ConfigError as exc:
            expected = (exc.job, exc.option, index)
            break
    many = _stored()
    before = many.list()
    try:
        many.update_many(entries)
        got = None
    except ConfigError as exc:
        got = (exc.job, exc.option, exc.entry)
    assert got == expected
    assert many.list() == (before if got is not None else one_by_one.list())


def test_json_lines_are_objects_and_a_bad_one_is_named_by_its_line() -> None:
    lines = b'{"name": "a"}\n\n  \n{"name": "b"}\n'
    assert json_lines(BytesIO(lines).readline) == [(1, {"name": "a"}), (4, {"name": "b"})]
    for body, says in (
        (b'{"name": "a"}\n{oops\n', "line 2"),
        (b'{"name": "a"}\n["a"]\n', "line 2"),
        (b"\xff\xfe\n", "line 1"),
        (b'{"name": "a"}\n' + b" " * (LINE_MAX + 1), "line 2"),
        (b"[" * 100 + b"]" * 100, "line 1"),
    ):
        with pytest.raises(ConfigError, match=says):
            json_lines(BytesIO(body).readline)


class LogsDown(MemoryStore):
    """A memory store whose writes of change logs fail (the schedules' own writes do not)."""

    def write_controls(self, writes: Any) -> None:
        if any(group.startswith("change:") for group in writes):
            raise StoreUnavailable("connection reset by peer")
        super().write_controls(writes)


def test_a_batch_whose_change_logs_fail_is_followed_by_the_replicas_and_said() -> None:
    """The feed names a batch before its change logs are written: a failure there leaves the
    replicas following what was written, and the error says how many were."""
    store = LogsDown()
    schedules = StoredSchedules(store)
    store.put_controls(
        GROUP,
        {
            f"t{n}": json.dumps({"name": f"t{n}", **RQ, "options": {"every": "1h"}})
            for n in range(3)
        },
    )
    sync = StoredSync(store)
    polled(sync, 0.0)
    assert set(sync.jobs) == {"t0", "t1", "t2"}
    with pytest.raises(StoreUnavailable, match=r"\(1 of 1 schedule\(s\) removed before it\)"):
        schedules.remove_many(["t1"])
    with pytest.raises(StoreUnavailable, match=r"\(1 of 1 schedule\(s\) updated before it\)"):
        schedules.update_many([{"name": "t2", "every": "2h"}])
    changed, gone = sync.poll(1.0)  # type: ignore[misc]
    assert gone == {"t1"} and set(changed) == {"t2"}


class _RemovedWhileRead(StoredSchedules):
    """Stored schedules whose read of ``gone`` is followed at once by another operator
    removing it (as a remove landing between an update's read and its write)."""

    def __init__(self, store: Store, gone: str) -> None:
        super().__init__(store)
        self.gone = gone

    def get_many(self, names: Any) -> Any:
        found = super().get_many(names)
        if self.gone in names:  # the read of its batch done
            StoredSchedules(self.store).remove(self.gone, by="another operator")
        return found

    def get(self, name: str) -> Any:
        found = super().get(name)
        if name == self.gone:
            StoredSchedules(self.store).remove(self.gone, by="another operator")
        return found


def test_a_schedule_removed_while_an_update_reads_it_is_not_brought_back(kit: StoreKit) -> None:
    """A remove between an update's read and its write: ``update`` says there is no such
    schedule and ``update_many`` refuses that batch whole, naming the schedule; nothing of it
    is written and the removed schedule stays removed (it ran no more on any replica). The
    batches before it are written, and said."""
    store = kit.open()
    StoredSchedules(store).add_many(_tenants(6_000))
    racing = _RemovedWhileRead(store, "tenant-5500.report")
    changes: list[dict[str, Any]] = [
        {"name": f"tenant-{n}.report", "queue": "q"} for n in range(6_000)
    ]
    changes[5001] = {"name": "tenant-5001.report", "kwargs": {"t": 5001}}  # as it is stored
    with pytest.raises(ConfigError) as refused:
        racing.update_many(changes, by="ops")
    assert refused.value.job == "tenant-5500.report" and refused.value.entry == 5500
    assert "removed since it was read" in str(refused.value)
    said = f"{BULK} of 6000 schedule(s) updated before its batch)"  # and none of it
    assert said in str(refused.value)
    # Nothing of the batch was written: one already as the update would write it is not
    # said to be updated either.
    assert [c.action for c in control.changes(store, "tenant-5001.report")] == ["schedule added"]
    stored = StoredSchedules(store).list()
    assert "tenant-5500.report" not in stored and len(stored) == 5_999
    assert {stored[f"tenant-{n}.report"].queue for n in range(BULK)} == {"q"}
    assert {stored[f"tenant-{n}.report"].queue for n in range(BULK, 6_000) if n != 5500} == {None}

    single = _RemovedWhileRead(store, "tenant-42.report")
    with pytest.raises(ConfigError, match="removed since it was read"):
        single.update("tenant-42.report", queue="other")
    assert StoredSchedules(store).get("tenant-42.report") is None


@pytest.mark.nats
def test_an_update_many_racing_a_remove_on_nats_says_and_announces_what_it_wrote(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """NATS has no transactions: a schedule removed after ``replace_controls`` read its
    revision, but before its write, is not written again, while the others of its batch are.
    Those are changed as any update changes them: announced to the replicas (within a
    second, not at the next full read), logged, and counted in the error."""
    import threading
    import time

    kit = make_kit("nats", request, tmp_path)
    try:
        store, other = kit.open(), kit.open()
        count = BULK
        StoredSchedules(store).add_many(_tenants(count))
        sync = StoredSync(store)
        polled(sync, 0.0)
        last = f"tenant-{count - 1}.report"

        def remove_once_the_batch_is_being_written() -> None:
            # the first of the batch written: the last one, not yet written, is removed
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if json.loads(other.control(GROUP, "tenant-0.report") or "{}").get("queue"):
                    break
            StoredSchedules(other).remove(last, by="another operator")

        remover = threading.Thread(target=remove_once_the_batch_is_being_written)
        remover.start()
        try:
            with pytest.raises(ConfigError) as refused:
                StoredSchedules(store).update_many(
                    [{"name": f"tenant-{n}.report", "queue": "q"} for n in range(count)]
                )
        finally:
            remover.join(60)
        assert refused.value.job == last and refused.value.entry == count - 1
        stored = StoredSchedules(store).list()
        assert last not in stored  # not brought back
        written = {name for name, spec in stored.items() if spec.queue == "q"}
        assert written == set(stored) and len(written) == count - 1  # the rest of the batch
        said = f"0 of {count} schedule(s) updated before its batch, {count - 1} of its batch"
        assert said in str(refused.value)
        changed, _ = sync.poll(1.0)  # type: ignore[misc]
        assert written <= set(changed)  # followed within a second
        for name in ("tenant-0.report", f"tenant-{count - 2}.report"):
            logged = store.controls(control.CHANGES.format(job=name)).values()
            assert any("schedule updated" in entry for entry in logged)
    finally:
        kit.close()
