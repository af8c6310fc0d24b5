"""The dashboard's occurrence states and the job catalog, from records as the store keeps them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from cron_bridge import catalog, declare
from cron_bridge.jobs import Occurrence
from cron_bridge.stores import MemoryStore, RunRecord
from cron_bridge.strips import marks, parse_holder, strip

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def record(second: int, outcome: str, *, attempt: int = 1, after: float = 0.05,
           replica: str = "r1", duration: float | None = None) -> RunRecord:  # fmt: skip
    at = T0 + timedelta(seconds=second)
    return RunRecord(
        job="sync", occurrence_id=Occurrence(job="sync", scheduled_at=at).id, outcome=outcome,
        trigger="schedule", replica=replica, started_at=at + timedelta(seconds=after),
        attempt=attempt, duration_ms=duration,
    )  # fmt: skip


def test_each_occurrence_takes_the_state_of_its_run_not_of_the_replicas_that_stood_aside() -> None:
    records = [
        record(0, "skipped-claimed", replica="r2"), record(0, "enqueued"),
        record(0, "completed", after=0.2, replica="w1", duration=120.0),
        record(1, "enqueued"), record(1, "failed", after=0.3, replica="w1", duration=5.0),
        record(1, "completed", attempt=2, after=2.0, replica="w1", duration=7.0),
        record(2, "enqueued"), record(2, "failed", after=0.1, replica="w1"),
        record(3, "enqueued"),
        record(4, "missed"), record(5, "skipped-paused"), record(6, "skipped-overlap"),
        record(7, "skipped-claimed", replica="r2"),
        record(8, "completed", replica="w1"), record(8, "skipped-completed", after=9.0),
    ]  # fmt: skip
    found = marks(reversed(records))  # the store answers newest first
    assert [m.state for m in found] == [
        "completed", "completed", "failed", "queued", "missed", "paused", "skipped-overlap",
        "claimed", "completed"]  # fmt: skip
    first = found[0]
    assert (first.replica, first.duration_ms, round(first.lag_ms or 0)) == ("w1", 120.0, 200)
    assert round(found[1].lag_ms or 0) == 300, "lag: to the first attempt's start"
    assert found[1].duration_ms == 7.0, "duration: of the attempt that completed"
    assert found[3].lag_ms is None


def test_a_run_in_flight_is_running_until_it_completes() -> None:
    held = f"w1|{Occurrence(job='sync', scheduled_at=T0).id}|abcd1234"
    running = parse_holder("sync", held)
    assert running is not None and running.replica == "w1"
    assert [m.state for m in marks([record(0, "enqueued")], running)] == ["running"]
    # A first attempt that failed while the retry runs: running.
    assert [m.state for m in marks([record(0, "failed")], running)] == ["running"]
    assert [m.state for m in marks([record(0, "completed")], running)] == ["completed"]
    assert [m.state for m in marks([], running)] == ["running"], "no record yet (inline)"


def test_lock_owners_that_are_not_runs_of_the_job_are_ignored() -> None:
    other = Occurrence(job="other", scheduled_at=T0).id
    for holder in (None, "", "w1", f"w1|{other}|x", "w1|not-an-id|x", "|sync@x|y", "x" * 5000):
        assert parse_holder("sync", holder) is None, holder


def test_the_strip_keeps_the_last_fifty_and_escapes_titles() -> None:
    records = [record(s, "completed", replica="<b>r1</b>") for s in range(60)]
    found = marks(records)
    assert len(found) == 50 and found[0].scheduled_at == T0 + timedelta(seconds=10)
    drawn = strip(found, label="last 50")
    assert drawn.count("<rect") == 50 and "<b>" not in drawn and "&lt;b&gt;r1" in drawn


def test_the_catalog_writes_only_what_changed_and_reads_hostile_entries_safely() -> None:
    store = MemoryStore()
    jobs = [declare(f"job{i}", every="1m", target="inline", handler=lambda ctx: None)
            for i in range(3)]  # fmt: skip
    assert catalog.publish(store, jobs) == 3
    assert catalog.publish(store, jobs) == 0, "nothing changed"
    changed = [declare("job0", cron="*/5 * * * *", tz="Europe/Warsaw", target="inline",
                       handler=lambda ctx: None), *jobs[1:]]  # fmt: skip
    assert catalog.publish(store, changed) == 1
    later = T0 + timedelta(days=400)
    assert catalog.publish(store, changed, now=later) == 3, "refreshed once a day"
    store.put_control(catalog.GROUP, "bad name!", json.dumps({"schedule": "x"}))
    store.put_control(catalog.GROUP, "job9", "not json")
    store.put_control(catalog.GROUP, "job8", json.dumps({"schedule": "x" * 5000, "tz": "UTC",
                      "scope": "cluster", "target": "inline", "seen": "2026-01-01"}))  # fmt: skip
    read = catalog.read(store)
    assert sorted(read) == ["job0", "job1", "job2"]
    assert (read["job0"].schedule, read["job0"].tz) == ("*/5 * * * *", "Europe/Warsaw")
