"""Stored schedules: validated like a declaration before anything is written, changed field
by field, removed; followed by a beat on a fake clock."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cron_bridge import Beat, ConfigError, control
from cron_bridge.stored import Schedules
from cron_bridge.stores import MemoryStore
from cron_bridge.testing import FakeClock
from tests.test_beat import ListQueue, beats, clock, eventually, queue

__all__ = ["beats", "clock", "queue"]  # fixtures

RQ = {"library": "rq", "task": "proj.tasks.report"}


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
    ],
)
def test_a_bad_stored_schedule_names_the_option_and_writes_nothing(
    options: dict[str, object], option: str
) -> None:
    store = MemoryStore()
    with pytest.raises(ConfigError) as caught:
        Schedules(store).add("tenant.7", **{**RQ, **options})  # type: ignore[arg-type]
    assert (caught.value.job, caught.value.option) == ("tenant.7", option)
    assert Schedules(store).list() == {} and store.controls("schedule-version") == {}


def test_add_update_remove_and_the_change_log() -> None:
    store = MemoryStore()
    schedules = Schedules(store)
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
    actions = [(c.action, c.by) for c in control.changes(store, "tenant.7")]
    assert actions == [("schedule removed", "cli:ana@laptop"), ("schedule updated", "http:1"),
                       ("schedule added", "cli:ana@laptop")]  # fmt: skip


def test_a_library_whose_adapter_cannot_run_stored_schedules_is_refused(
    queue: ListQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An adapter with no stored-schedule task (a fourth library's): a clear error."""
    monkeypatch.setattr("cron_bridge.stored.LIBRARIES", ("listqueue",))
    store = MemoryStore()
    with pytest.raises(ConfigError, match="cannot run stored schedules") as caught:
        Schedules(store).add("x", library="listqueue", task="proj.report", every="1m")
    assert caught.value.option == "library"
    assert Schedules(store).list() == {}


def test_a_beat_follows_a_stored_schedule_and_drops_it(
    clock: FakeClock, beats: list[Beat], queue: ListQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queue, "stored_task", "listqueue.stored", raising=False)
    monkeypatch.setattr("cron_bridge.stored.LIBRARIES", ("listqueue",))
    store = MemoryStore(clock=clock)
    beats.append(Beat(store, [], clock=clock))
    beats[0].start()
    Schedules(store).add("tenant.7", library="listqueue", task="proj.report", every="1s")
    # Followed within a second of real time: the look at the store is not on the fake clock,
    # which only has to move for the loop to come round.
    eventually(lambda: has(beats[0], "tenant.7", clock), "the stored job")
    clock.advance(1)
    eventually(lambda: any(m["job"] == "tenant.7" for m in queue.sent), "the stored job sent")
    assert queue.sent[-1]["trigger"] == "schedule"
    Schedules(store).remove("tenant.7")
    clock.advance(timedelta(milliseconds=100))
    eventually(lambda: not has(beats[0], "tenant.7", clock), "dropped")
    assert {j.task for j in beats[0].jobs()} == set()


def has(beat: Beat, name: str, clock: FakeClock) -> bool:
    clock.advance(timedelta(milliseconds=10))
    return name in {job.name for job in beat.jobs()}
