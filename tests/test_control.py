"""Pause and resume across replicas, on a fake clock: a paused occurrence is claimed and
recorded once, nothing runs, resume runs the next one, and a bad record fails closed."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from cron_bridge import Beat, ConfigError
from cron_bridge.beat.pause_sync import BACK_EVERY, FULL_EVERY, PauseSync
from cron_bridge.control import pause as control
from cron_bridge.control.feed import Feed
from cron_bridge.errors import StoreUnavailable
from cron_bridge.stores import MemoryStore
from cron_bridge.stores.records import CONTROLS_MAX
from cron_bridge.testing import FakeClock
from tests.test_beat import beats, clock, inline, outcomes, total
from tests.test_stored import CountingStore
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


def test_a_claim_reads_one_feed_entry_however_many_jobs_are_paused() -> None:
    """10,000 paused jobs: before each claim a replica reads the pauses' feed entry after the
    last it saw, and the one pause each new entry names; a pause written past the feed is
    found at the next full read, the safety net."""
    store = CountingStore()
    for n in range(10_000):
        control.pause(store, f"tenant-{n}.report", reason="unpaid", by="billing")
    sync = PauseSync(store)
    assert len(sync.current(0.0)) == 10_000 and sync.full_reads == 1
    store.read.clear()
    first = sync.current(1.0)
    # One small read while nothing changes: the next entry and the head, one round trip.
    assert store.read == ["pause-feed/head", "pause-feed/seq:10001"]
    assert sync.current(1.5) is first  # unchanged, not copied
    control.resume(store, "tenant-7.report", by="billing")
    control.pause(store, "tenant-new.report", reason="trial over", by="billing")
    store.read.clear()
    now = sync.current(2.0)
    assert "tenant-7.report" not in now and now["tenant-new.report"].reason == "trial over"
    assert len(now) == 10_000 and "tenant-7.report" in first  # what was handed out stays
    assert [r for r in store.read if r.startswith("pause/")] == [
        "pause/tenant-7.report",
        "pause/tenant-new.report",
    ]
    assert {r.partition("/")[0] for r in store.read} == {"pause", "pause-feed"}
    assert sync.followed == 2 and sync.full_reads == 1
    # Written straight into the store, not announced: seen by the next full read, made on
    # a thread of its own while the claims go on.
    store.put_control(
        control.PAUSES, "tenant-7.report", store.control(control.PAUSES, "tenant-8.report")
    )  # type: ignore[arg-type]
    assert "tenant-7.report" not in sync.current(3.0)
    assert "tenant-7.report" not in sync.current(3.0 + FULL_EVERY)
    wait_for(
        lambda: "tenant-7.report" in sync.current(4.0 + FULL_EVERY), 30, "the safety net's read"
    )
    assert sync.full_reads == 2


def test_resume_reads_the_one_pause_it_ends() -> None:
    store = CountingStore()
    for n in range(1_000):
        control.pause(store, f"tenant-{n}.report", by="billing")
    store.read.clear()
    ended = control.resume(store, "tenant-3.report", by="billing")
    assert ended is not None and ended.by == "billing"
    assert [r for r in store.read if r.startswith("pause/")] == ["pause/tenant-3.report"]


class DeafStore(MemoryStore):
    """A memory store that cannot take a feed entry while ``deaf``."""

    deaf = False

    def add_controls(self, group: str, values: Any) -> list[str]:
        if self.deaf and group == control.FEED.group:
            raise StoreUnavailable("connection refused")
        return super().add_controls(group, values)


def test_a_pause_the_replicas_are_not_told_of_says_so_and_asking_again_tells_them() -> None:
    store = DeafStore()
    sync = PauseSync(store)
    assert sync.current(0.0) == {}
    store.deaf = True
    with pytest.raises(StoreUnavailable, match="tick is paused, but the replicas are not told"):
        control.pause(store, "tick", reason="INC-9", by="ops")
    assert "tick" in control.paused(store) and "tick" not in sync.current(1.0)
    store.deaf = False
    control.pause(store, "tick", reason="INC-9", by="ops")
    assert sync.current(2.0)["tick"].reason == "INC-9"
    store.deaf = True
    with pytest.raises(StoreUnavailable, match="tick is resumed, but the replicas are not told"):
        control.resume(store, "tick", by="ops")
    store.deaf = False
    assert control.resume(store, "tick", by="ops") is None  # already deleted: it tells them
    assert sync.current(3.0) == {}


def test_a_feed_entry_that_names_no_job_is_skipped_and_the_next_one_is_followed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    sync = PauseSync(store)
    sync.current(0.0)
    for raw in [
        '{"name": "../etc"}',
        "[1, 2]",
        "\udcff",
        '{"name": "' + "x" * 5000 + '"}',
        '{"names": ["ok.job", "../etc"]}',
        '{"names": []}',
        '{"names": "tick"}',
    ]:
        number = control.FEED.head(store) + 1
        store.put_control(control.FEED.group, f"seq:{number}", raw)
        store.put_control(control.FEED.group, "head", str(number))
    control.pause(store, "tick", by="ops")
    assert set(sync.current(1.0)) == {"tick"}
    assert sum("skipping the entry" in r.getMessage() for r in caplog.records) == 7


def test_more_pauses_than_a_control_group_holds_all_pause() -> None:
    """Past CONTROLS_MAX (10,000, the bound of a group read for show) every pause is still
    read: one left out would let its job run."""
    store = MemoryStore()
    count = CONTROLS_MAX + 2_000
    store.put_controls(
        control.PAUSES,
        {
            f"tenant-{n}.report": json.dumps(
                {"reason": "unpaid", "by": "billing", "since": "2026-12-01T00:00:00+00:00"}
            )
            for n in range(count)
        },
    )
    assert len(PauseSync(store).current(0.0)) == count


def test_a_pause_after_a_burst_of_pauses_is_obeyed_at_the_next_claim() -> None:
    """1,500 tenants paused at once, then one more: the next look has every one of them (a
    round trip per few hundred entries, not one look per thousand)."""
    store = MemoryStore()
    sync = PauseSync(store)
    sync.current(0.0)
    for n in range(1_500):
        control.pause(store, f"tenant-{n}.report", by="billing")
    control.pause(store, "tick", reason="INC-1", by="ops")
    now = sync.current(1.0)
    assert "tick" in now and len(now) == 1_501 and sync.full_reads == 1


def test_a_follower_the_feed_left_behind_or_that_went_back_reads_every_pause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Entries pruned while a replica was behind, or a store that went back (a failover to
    a replica a few writes behind): the feed cannot say what changed, so every pause is
    read again before the claim."""
    monkeypatch.setattr(control, "FEED", Feed("pause-feed", kept=50))
    store = MemoryStore()
    sync = PauseSync(store)
    sync.current(0.0)
    for n in range(120):  # the first 70 entries are pruned
        control.pause(store, f"tenant-{n}.report", by="billing")
    assert len(sync.current(1.0)) == 120 and sync.full_reads == 2
    # The store goes back three entries, then a pause takes a number already seen.
    for number in (118, 119, 120):
        store.put_control("pause-feed", f"seq:{number}", None)
    store.put_control("pause-feed", "head", "117")
    control.pause(store, "tick", by="ops")
    assert "tick" in sync.current(1.0 + BACK_EVERY) and sync.full_reads == 3


def test_a_head_hint_that_went_back_or_is_garbage_does_not_stop_pausing() -> None:
    store = MemoryStore()
    for n in range(2_000):
        control.pause(store, f"tenant-{n}.report", by="billing")
    for head in ("junk", "5", "9" * 40):
        store.put_control("pause-feed", "head", head)
        control.pause(store, "tick", by="ops")  # past the top of the numbers taken
    assert control.FEED.head(store) == 2_003
    numbers = [int(k.removeprefix("seq:")) for k in store.controls("pause-feed") if k != "head"]
    assert (
        max(numbers) == 2_003
        and json.loads(store.control("pause-feed", "seq:2003"))["name"] == "tick"
    )  # type: ignore[arg-type]


def test_a_pause_the_store_took_but_could_not_announce_is_in_the_change_log() -> None:
    store = DeafStore()
    store.deaf = True
    with pytest.raises(StoreUnavailable):
        control.pause(store, "tick", reason="INC-9", by="eve")
    with pytest.raises(StoreUnavailable):
        control.resume(store, "tick", by="mallory")
    assert [(c.action, c.by) for c in control.changes(store, "tick")] == [
        ("resumed", "mallory"),
        ("paused", "eve"),
    ]


def test_a_writer_that_fell_behind_the_feed_writes_at_its_top_not_in_a_hole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A writer that read the head, then stalled while more than ``kept`` entries were
    written, finds its next number pruned (free), a number the followers are past: the
    entry is written at the top as well, and a follower obeys the pause at its next look."""
    monkeypatch.setattr(control, "FEED", Feed("pause-feed", kept=50))
    store = MemoryStore()
    for n in range(120):
        control.pause(store, f"tenant-{n}.report", by="billing")
    sync = PauseSync(store)
    sync.current(0.0)
    store.put_control("pause-feed", "head", "5")  # what the stalled writer read
    control.pause(store, "tick", by="ops")
    assert "tick" in sync.current(0.5)  # not waiting for BACK_EVERY: no head went back
    assert sync.full_reads == 1 and control.FEED.head(store) == 121
    # A head that is junk reads 0: the next entry takes seq:1 (pruned, free), the head goes
    # back, and the followers read every pause within BACK_EVERY.
    store.put_control("pause-feed", "head", "junk")
    control.pause(store, "tock", by="ops")
    assert control.FEED.head(store) == 1
    assert "tock" in sync.current(1.0 + BACK_EVERY) and sync.full_reads == 2
