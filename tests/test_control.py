"""Pause and resume across replicas, on a fake clock: a paused occurrence is claimed and
recorded once, nothing runs, resume runs the next one, and a bad record fails closed."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from cron_bridge import Beat, ConfigError
from cron_bridge.control import pause as control
from cron_bridge.stores import MemoryStore
from cron_bridge.testing import FakeClock
from tests.test_beat import beats, clock, inline, outcomes, total
from tests.waiting import wait_for

__all__ = ["beats", "clock"]  # fixtures


def test_a_pause_holds_every_replica_and_each_occurrence_is_recorded_once(
    clock: FakeClock, beats: list[Beat]
) -> None:
    store = MemoryStore(clock=clock)
    job, seen = inline("tick")
    beats += [Beat(store, [job], clock=clock, replica_id=f"r{i}") for i in range(3)]
    for beat in beats:
        beat.start()
    clock.advance(1)
    wait_for(lambda: total(store, "tick", beats) == 3, 30, "the first occurrence", every=0.01)
    control.pause(store, "tick", reason="incident 42", by="cli:ops@laptop")
    for step in range(2, 5):
        clock.advance(1)
        wait_for(
            lambda n=step: total(store, "tick", beats) == 3 * n,
            30,
            f"occurrence {step}",
            every=0.01,
        )
    assert len(seen) == 1
    paused = [
        counts for counts in outcomes(store, "tick", beats).values() if "skipped-paused" in counts
    ]
    assert paused == [Counter({"skipped-paused": 1, "skipped-claimed": 2})] * 3
    reasons = {r.reason for r in store.history("tick", 100) if r.outcome == "skipped-paused"}
    assert len(reasons) == 1
    assert reasons.pop().startswith("paused by cli:ops@laptop since ")

    assert control.resume(store, "tick", by="cli:ops@laptop") is not None
    clock.advance(1)
    wait_for(lambda: len(seen) == 2, 30, "the next occurrence after resume", every=0.01)
    assert seen[-1].occurrence_id.endswith("12:00:05.000Z")  # the paused ones not caught up
    assert control.resume(store, "tick", by="cli:ops@laptop") is None  # not paused: no-op


def test_a_replica_started_while_paused_obeys_and_instance_jobs_pause_too(
    clock: FakeClock, beats: list[Beat]
) -> None:
    store = MemoryStore(clock=clock)
    control.pause(store, "local", by="http:10.0.0.7")
    control.pause(store, "tick", by="http:10.0.0.7")
    local, ran_local = inline("local", scope="instance")
    job, seen = inline("tick")
    beats.append(Beat(store, [local, job], clock=clock, replica_id="late"))
    beats[0].start()
    clock.advance(1)
    wait_for(
        lambda: total(store, "local", beats) == 1 and total(store, "tick", beats) == 1,
        30,
        "records",
        every=0.01,
    )
    assert seen == [] and ran_local == []
    assert [r.outcome for r in store.history("local")] == ["skipped-paused"]


def test_an_unreadable_pause_record_keeps_its_job_paused(
    clock: FakeClock, beats: list[Beat], caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore(clock=clock)
    store.put_control("pause", "tick", "{not json")
    store.put_control("pause", "other", json.dumps({"reason": 7, "by": "x", "since": "now"}))
    found = control.paused(store)
    assert set(found) == {"tick", "other"}
    assert found["tick"].reason == "unreadable pause record"
    assert "unreadable" in caplog.text


@pytest.mark.parametrize(
    ("job", "reason", "option"),
    [
        ("tick", "x" * 501, "reason"),
        ("tick", "line one\nforged line", "reason"),
        ("", "", "name"),
        ("x" * 201, "", "name"),
        ("a:b", "", "name"),
    ],
)
def test_a_bad_pause_is_refused_and_writes_nothing(job: str, reason: str, option: str) -> None:
    store = MemoryStore()
    with pytest.raises(ConfigError) as caught:
        control.pause(store, job, reason=reason, by="cli:ops@laptop")
    assert caught.value.option == option
    assert store.controls("pause") == {}


def test_resume_with_catch_up_runs_the_latest_paused_occurrence_once(
    clock: FakeClock, beats: list[Beat]
) -> None:
    store = MemoryStore(clock=clock)
    job, seen = inline("tick")
    beats += [Beat(store, [job], clock=clock, replica_id=f"r{i}") for i in range(2)]
    for beat in beats:
        beat.start()
    pause = control.pause(store, "tick", by="cli:ops@laptop")
    for step in range(1, 4):
        clock.advance(1)
        wait_for(
            lambda n=step: total(store, "tick", beats) == 2 * n,
            30,
            f"occurrence {step}",
            every=0.01,
        )
    assert seen == []
    control.resume(store, "tick", by="cli:ops@laptop")
    first, second = (beat.catch_up_paused(pause) for beat in beats)
    assert first is not None and second is not None
    assert (first.outcome, first.trigger) == ("completed", "misfire")
    assert first.occurrence_id.endswith("12:00:03.000Z")  # the latest held back
    assert (second.outcome, second.occurrence_id) == ("skipped-claimed", first.occurrence_id)
    assert [ctx.trigger for ctx in seen] == ["misfire"]
    # A pause that held nothing back: nothing to catch up.
    later = control.pause(store, "tick", reason="another", by="cli:ops@laptop")
    assert beats[0].catch_up_paused(later) is None


def test_every_pause_and_resume_is_in_the_change_log_newest_first_and_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = MemoryStore()
    control.pause(store, "tick", reason="INC-1", by="cli:ana@laptop")
    control.resume(store, "tick", by="http:10.0.0.7")
    control.resume(store, "tick", by="http:10.0.0.7")  # not paused: no change
    control.pause(store, "other", by="dashboard:10.0.0.8")
    found = control.changes(store, "tick")
    assert [(c.action, c.by, c.reason) for c in found] == [
        ("resumed", "http:10.0.0.7", "INC-1"),
        ("paused", "cli:ana@laptop", "INC-1"),
    ]
    monkeypatch.setattr(control, "CHANGES_KEPT", 3)
    for n in range(4):
        control.pause(store, "tick", reason=f"again {n}", by="cli:ana@laptop")
    assert [c.reason for c in control.changes(store, "tick")] == ["again 3", "again 2", "again 1"]
    store.put_control("change:tick", "00000000000000000001:zz", "not json")
    assert len(control.changes(store, "tick")) == 3  # an unreadable one is skipped
