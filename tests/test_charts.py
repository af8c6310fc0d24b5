"""The dashboard's occurrence states and the job catalog, from records as the store keeps them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cron_bridge import declare
from cron_bridge.control import catalog
from cron_bridge.http.charts import marks, parse_holder, strip, unrecorded, unrecorded_marks
from cron_bridge.http.views import marks_of
from cron_bridge.jobs import Occurrence
from cron_bridge.schedules import Cron, Every, latest_occurrences
from cron_bridge.stores import MemoryStore, RunRecord, SQLiteStore

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def record(
    second: int,
    outcome: str,
    *,
    attempt: int = 1,
    after: float = 0.05,
    replica: str = "r1",
    duration: float | None = None,
) -> RunRecord:
    at = T0 + timedelta(seconds=second)
    return RunRecord(
        job="sync",
        occurrence_id=Occurrence(job="sync", scheduled_at=at).id,
        outcome=outcome,
        trigger="schedule",
        replica=replica,
        started_at=at + timedelta(seconds=after),
        attempt=attempt,
        duration_ms=duration,
    )


def completed(job: str, at: datetime, *, after_ms: float = 0) -> RunRecord:
    return RunRecord(
        job=job,
        occurrence_id=Occurrence(job=job, scheduled_at=at).id,
        outcome="completed",
        trigger="schedule",
        replica="r1",
        started_at=at + timedelta(milliseconds=after_ms),
    )


def test_each_occurrence_takes_the_state_of_its_run_not_of_the_replicas_that_stood_aside() -> None:
    records = [
        record(0, "skipped-claimed", replica="r2"),
        record(0, "enqueued"),
        record(0, "completed", after=0.2, replica="w1", duration=120.0),
        record(1, "enqueued"),
        record(1, "failed", after=0.3, replica="w1", duration=5.0),
        record(1, "completed", attempt=2, after=2.0, replica="w1", duration=7.0),
        record(2, "enqueued"),
        record(2, "failed", after=0.1, replica="w1"),
        record(3, "enqueued"),
        record(4, "missed"),
        record(5, "skipped-paused"),
        record(6, "skipped-overlap"),
        record(7, "skipped-claimed", replica="r2"),
        record(8, "completed", replica="w1"),
        record(8, "skipped-completed", after=9.0),
    ]
    found = marks(reversed(records))  # the store answers newest first
    assert [m.state for m in found] == [
        "completed",
        "completed",
        "failed",
        "queued",
        "missed",
        "paused",
        "skipped-overlap",
        "claimed",
        "completed",
    ]
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


def test_the_latest_occurrences_are_read_back_from_the_end_not_walked_from_the_start() -> None:
    """A job every second that stopped two days ago: its last 50 occurrences; a daily one:
    its last 50 days; neither before ``start``, and nothing when none is due."""
    end = T0 + timedelta(days=2)
    assert latest_occurrences(Every("1s"), T0, end, 50) == [
        end - timedelta(seconds=49 - i) for i in range(50)
    ]
    daily = latest_occurrences(Cron("0 3 * * *"), T0 - timedelta(days=400), end, 50)
    assert len(daily) == 50 and daily[-1] == datetime(2026, 6, 3, 3, 0, tzinfo=UTC)
    assert daily[0] == daily[-1] - timedelta(days=49)
    assert latest_occurrences(Cron("0 3 * * *"), T0, end, 50) == [
        datetime(2026, 6, 2, 3, 0, tzinfo=UTC),
        datetime(2026, 6, 3, 3, 0, tzinfo=UTC),
    ]
    assert latest_occurrences(Every("1h"), T0, T0 + timedelta(minutes=59), 50) == []


def test_occurrences_no_record_names_are_drawn_from_their_claims() -> None:
    """Between and after the recorded occurrences: one a replica claimed and wrote nothing for
    is ``claimed`` with that replica, one nobody claimed is ``unrecorded`` once its grace has
    passed, and one still inside its grace is not drawn yet."""
    records = [record(n, "completed") for n in range(10) if n not in (3, 6)]
    found = marks(reversed(records))
    now = T0 + timedelta(seconds=12)
    missing = unrecorded(found, records, Every("1s"), "sync", now)
    assert [o.scheduled_at for o in missing] == [
        T0 + timedelta(seconds=n) for n in (3, 6, 10, 11, 12)
    ]
    owners = ["r2", None, None, None, "r3"]
    drawn = unrecorded_marks(missing, owners, now, timedelta(seconds=1))
    assert [(m.scheduled_at.second, m.state, m.replica) for m in drawn] == [
        (3, "claimed", "r2"),
        (6, "unrecorded", None),
        (10, "unrecorded", None),
        (12, "claimed", "r3"),
    ]
    assert "nobody claimed it" in drawn[1].title()
    # Jittered: fired up to a minute after its scheduled time, its grace counts from then.
    later = unrecorded_marks(
        missing, owners, now, timedelta(seconds=1), lambda at: at + timedelta(seconds=30)
    )
    assert [(m.scheduled_at.second, m.state) for m in later] == [(3, "claimed"), (12, "claimed")]
    assert unrecorded([], [], Every("1s"), "sync", now) == [], "no first occurrence to start at"
    # The overview asks only for those after the newest mark: none while the next is not due.
    tail = unrecorded(found, records, Every("1s"), "sync", now, after_newest=True)
    assert [o.scheduled_at.second for o in tail] == [10, 11, 12]
    early = T0 + timedelta(seconds=9, milliseconds=500)
    assert unrecorded(found, records, Every("1s"), "sync", early, after_newest=True) == []


def test_an_occurrence_older_than_its_claims_lifetime_says_its_claim_may_have_expired() -> None:
    daily = Cron("0 3 * * *")
    day = [datetime(2026, 6, d, 3, 0, tzinfo=UTC) for d in range(1, 7)]
    records = [completed("nightly", at) for at in (day[0], day[1], day[3])]
    now = day[5] + timedelta(minutes=1)
    missing = unrecorded(marks(records), records, daily, "nightly", now)
    assert [o.scheduled_at for o in missing] == [day[2], day[4], day[5]]
    drawn = unrecorded_marks(missing, [None, None, None], now, timedelta(seconds=30))
    assert [m.note for m in drawn] == [
        "no record; its claim, if any, expired after 48 h",
        "nobody claimed it: no replica was up when it was due, or the store was down",
        "nobody claimed it: no replica was up when it was due, or the store was down",
    ]


def test_the_dashboard_strip_shows_a_winner_that_died_before_writing_anything(
    tmp_path: Path,
) -> None:
    """On a real SQLite store: a replica claimed an occurrence and died before it enqueued
    (a claim, no record); another occurrence nobody claimed. The strip draws both, with one
    read of the claims, the owner bounded and escaped (it is store data); the overview draws
    neither (they are not after the newest mark); an instance-scope job (nothing is claimed)
    draws neither."""
    store = SQLiteStore(f"{tmp_path}/store.db")
    job = declare("sync", every="1s", target="inline", handler=lambda ctx: None, misfire_grace="2s")
    now = datetime.now(UTC).replace(microsecond=0)
    times = [now - timedelta(seconds=10 - n) for n in range(10)]
    kept = [n for n in range(10) if n not in (4, 7)]
    store.record_many([completed("sync", times[n], after_ms=5) for n in kept])
    hostile = "beat-died<script>x</script>" + "y" * 500  # a claim's owner is store data
    assert store.claim(Occurrence(job="sync", scheduled_at=times[4]), hostile)
    before = store.stats.round_trips
    _, found = marks_of(store, "sync", job, now)
    assert store.stats.round_trips - before == 3, "history, lock holder, claims"
    states = {m.scheduled_at: (m.state, m.replica) for m in found}
    assert states[times[4]] == ("claimed", hostile[:200])
    drawn = strip(found, label="sync")
    assert "<script>" not in drawn and "beat-died&lt;script&gt;" in drawn
    assert states[times[7]] == ("unrecorded", None)
    assert [states[times[n]][0] for n in kept] == ["completed"] * 8
    overview = {
        m.scheduled_at: m.state for m in marks_of(store, "sync", job, now, after_newest=True)[1]
    }
    assert times[4] not in overview and times[7] not in overview, "the overview: after the newest"
    local = declare("sync", every="1s", target="inline", handler=lambda ctx: None, scope="instance")
    assert {m.state for m in marks_of(store, "sync", local, now)[1]} == {"completed"}


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
    jobs = [
        declare(f"job{i}", every="1m", target="inline", handler=lambda ctx: None) for i in range(3)
    ]
    assert catalog.publish(store, jobs) == 3
    assert catalog.publish(store, jobs) == 0, "nothing changed"
    changed = [
        declare(
            "job0",
            cron="*/5 * * * *",
            tz="Europe/Warsaw",
            target="inline",
            handler=lambda ctx: None,
        ),
        *jobs[1:],
    ]
    assert catalog.publish(store, changed) == 1
    later = T0 + timedelta(days=400)
    assert catalog.publish(store, changed, now=later) == 3, "refreshed once a day"
    store.put_control(catalog.GROUP, "bad name!", json.dumps({"schedule": "x"}))
    store.put_control(catalog.GROUP, "job9", "not json")
    store.put_control(
        catalog.GROUP,
        "job8",
        json.dumps(
            {
                "schedule": "x" * 5000,
                "tz": "UTC",
                "scope": "cluster",
                "target": "inline",
                "seen": "2026-01-01",
            }
        ),
    )
    read = catalog.read(store)
    assert sorted(read) == ["job0", "job1", "job2"]
    assert (read["job0"].schedule, read["job0"].tz) == ("*/5 * * * *", "Europe/Warsaw")
