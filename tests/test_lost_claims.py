"""The ledger of the claims a replica lost (cron_bridge.aside): one write per span, not per
occurrence, and still, per occurrence, who stood aside."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cron_bridge import Beat
from cron_bridge.control import lost_claims
from cron_bridge.control.audit import audit, occurrence_report
from cron_bridge.jobs import Occurrence
from cron_bridge.schedules import Every
from cron_bridge.stores import MemoryStore, RunRecord
from cron_bridge.testing import FakeClock
from tests.test_beat import beats, clock, inline
from tests.waiting import wait_for

__all__ = ["beats", "clock"]  # fixtures

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def second(n: int) -> datetime:
    return T0 + timedelta(seconds=n)


class CountingStore(MemoryStore):
    """A memory store that counts the control records written, by group."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.puts: dict[str, int] = {}

    def put_control(self, group: str, key: str, value: str | None) -> None:
        self.puts[group] = self.puts.get(group, 0) + 1
        super().put_control(group, key, value)


def enqueued(job: str, at: datetime, replica: str) -> RunRecord:
    return RunRecord(
        job=job,
        occurrence_id=Occurrence(job=job, scheduled_at=at).id,
        outcome="enqueued",
        trigger="schedule",
        replica=replica,
        started_at=at + timedelta(milliseconds=3),
    )


def ledger(
    replica: str, names: list[str], store: MemoryStore, *, start: int = 0
) -> lost_claims.Ledger:
    kept = lost_claims.Ledger(replica, lambda: names, lambda: second(100))
    kept.resume(second(start))
    return kept


def test_a_lost_occurrence_is_shown_stood_aside_from_the_ledger(clock: FakeClock) -> None:
    """Two replicas that lost every claim of a minute: history shows each of them
    skipped-claimed beside the winner's record, though the store holds only the winner's."""
    store = MemoryStore(clock=clock)
    for name in ("beat-b", "beat-c"):
        kept = ledger(name, ["tick"], store)
        for n in range(1, 61):
            kept.asked([second(n)], lost=1)
        kept.interrupt()  # stopped: the span ends at the last occurrence asked for
        kept.flush(store)
    store.record_many([enqueued("tick", second(n), "beat-a") for n in range(1, 61)])
    shown = lost_claims.history(store, "tick", 1000)
    by_occurrence: dict[str, list[tuple[str, str]]] = {}
    for record in shown:
        by_occurrence.setdefault(record.occurrence_id, []).append((record.outcome, record.replica))
    assert len(by_occurrence) == 60
    for found in by_occurrence.values():
        assert sorted(found) == [
            ("enqueued", "beat-a"),
            ("skipped-claimed", "beat-b"),
            ("skipped-claimed", "beat-c"),
        ]
    assert {r.reason for r in shown if r.outcome == "skipped-claimed"} == {lost_claims.REASON}
    assert len(store.history("tick", 1000)) == 60
    assert len(lost_claims.history(store, "tick", 10)) == 10  # n counts what is shown


def test_the_ledger_covers_only_its_span_and_its_jobs(clock: FakeClock) -> None:
    """Not before the replica started, not after it stopped, not a job it does not have."""
    store = MemoryStore(clock=clock)
    kept = ledger("beat-b", ["tick"], store, start=10)
    kept.asked([second(5), second(10), second(11)], lost=3)  # 5: caught up, before its start
    kept.asked([second(20)], lost=1)
    kept.interrupt()
    kept.flush(store)
    reader = lost_claims.LostClaims(store)
    assert reader.who(Occurrence(job="tick", scheduled_at=second(5))) == []
    assert reader.who(Occurrence(job="tick", scheduled_at=second(10))) == ["beat-b"]
    assert reader.who(Occurrence(job="tick", scheduled_at=second(15))) == ["beat-b"]
    assert reader.who(Occurrence(job="tick", scheduled_at=second(21))) == []
    assert reader.who(Occurrence(job="other", scheduled_at=second(15))) == []


def test_an_open_span_reaches_as_far_as_its_replica_wrote_down(clock: FakeClock) -> None:
    """An open span covers up to the latest occurrence its replica wrote down that it asked
    for, alive or not: a replica killed a moment ago (its heartbeat still fresh) is never shown
    standing aside after its death; a live one is, once its heartbeat writes where it got."""
    store = MemoryStore(clock=clock)
    clock.set(second(0))
    store.heartbeat("beat-b", timedelta(seconds=15))
    kept = ledger("beat-b", ["tick"], store)
    kept.asked([second(1)], lost=1)
    kept.flush(store)
    later = Occurrence(job="tick", scheduled_at=second(8))
    assert (
        lost_claims.LostClaims(store).who(later) == []
    )  # alive, but nothing says it asked for 12:00:08
    assert lost_claims.LostClaims(store).who(Occurrence(job="tick", scheduled_at=second(1))) == [
        "beat-b"
    ]
    kept.asked([second(8)], lost=1)
    kept.flush(store)  # within FLUSH_INTERVAL of the last write: not written yet
    assert lost_claims.LostClaims(store).who(later) == []
    kept.flush(store, moved=True)  # the heartbeat writes where the span reached
    assert lost_claims.LostClaims(store).who(later) == ["beat-b"]
    assert lost_claims.LostClaims(store).who(Occurrence(job="tick", scheduled_at=second(9))) == []


def test_a_span_is_written_when_it_opens_then_at_most_every_flush_interval(
    clock: FakeClock,
) -> None:
    """A replica losing an occurrence a second writes its ledger once, not once a second."""
    store = CountingStore(clock=clock)
    names = ["tick"]
    kept = ledger("beat-b", names, store)
    for n in range(1, 301):
        kept.asked([second(n)], lost=1)
        kept.flush(store)
    assert store.puts == {lost_claims.GROUP: 1, lost_claims.JOBS_GROUP: 1}
    names.append("tock")
    kept.jobs_changed(second(301))  # a new job set: a new span, written at its first claim
    kept.asked([second(302)], lost=1)
    kept.flush(store)
    assert store.puts == {lost_claims.GROUP: 2, lost_claims.JOBS_GROUP: 2}
    value = json.loads(store.control(lost_claims.GROUP, "beat-b") or "")
    assert [s[:3] for s in value["spans"]] == [[ms(1), ms(300), 300], [ms(302), None, 1]]


def ms(n: int) -> int:
    return int(second(n).timestamp() * 1000)


def test_a_job_set_too_large_to_list_counts_as_every_job(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    names = [f"job.{n:05d}" for n in range(lost_claims.MAX_NAMES + 1)]
    kept = ledger("beat-b", names, store)
    kept.asked([second(1)], lost=1)
    kept.interrupt()
    kept.flush(store)
    assert lost_claims.LostClaims(store).who(
        Occurrence(job="not.listed", scheduled_at=second(1))
    ) == ["beat-b"]


@pytest.mark.parametrize(
    "value",
    [
        "not json",
        "[]",
        '{"v": 2, "spans": []}',
        '{"v": 1, "spans": "x"}',
        '{"v": 1, "spans": [[1, 2, 3]]}',
        '{"v": 1, "spans": [["1", 2, 3, "0123456789abcdef"]]}',
        '{"v": 1, "spans": [[5, 2, 0, "0123456789abcdef"]]}',
        '{"v": 1, "spans": [[1, 2, 0, "../../etc"]]}',
        '{"v": 1, "spans": [' + ",".join(['[1,2,0,"0123456789abcdef"]'] * 5000) + "]}",
    ],
)
def test_hostile_ledgers_are_ignored(clock: FakeClock, value: str) -> None:
    """What another process wrote is validated: a malformed ledger names no one, and the
    history is read all the same."""
    store = MemoryStore(clock=clock)
    store.put_control(lost_claims.GROUP, "evil", value)
    store.put_control(lost_claims.JOBS_GROUP, "0123456789abcdef", '{"names": [1, "../x", "tick"]}')
    store.record(enqueued("tick", second(0), "beat-a"))
    at_1_ms = Occurrence(job="tick", scheduled_at=datetime(1970, 1, 1, 0, 0, 0, 1000, UTC))
    assert lost_claims.LostClaims(store).who(at_1_ms) == []
    assert [r.outcome for r in lost_claims.history(store, "tick")] == ["enqueued"]
    store.put_control(
        lost_claims.GROUP, "fine", '{"v": 1, "spans": [[1, 2, 0, "0123456789abcdef"]]}'
    )
    assert lost_claims.LostClaims(store).who(at_1_ms) == ["fine"]  # the same span, well formed


def test_prune_deletes_the_ledgers_of_replicas_long_gone_and_their_job_sets(
    clock: FakeClock,
) -> None:
    store = MemoryStore(clock=clock)
    clock.set(second(0))
    for name, names in (("gone", ["old.job"]), ("alive", ["tick"])):
        kept = ledger(name, names, store)
        kept.asked([second(1)], lost=1)
        kept.interrupt()
        kept.flush(store)
    store.heartbeat("alive", timedelta(days=30))
    lost_claims.prune(store, second(0) + lost_claims.KEPT + timedelta(minutes=1), keep="me")
    assert set(store.controls(lost_claims.GROUP)) == {"alive"}
    assert set(store.controls(lost_claims.JOBS_GROUP)) == {lost_claims.digest(["tick"])}


def test_the_occurrence_report_and_the_audit_read_the_ledgers(clock: FakeClock) -> None:
    """``history --occurrence`` lists who stood aside; an occurrence whose winner wrote nothing
    (it died) is explained by who was there, once its claim has expired."""
    store = MemoryStore(clock=clock)
    for name in ("beat-b", "beat-c"):
        kept = ledger(name, ["tick"], store)
        kept.asked([second(1), second(2)], lost=2)
        kept.interrupt()
        kept.flush(store)
    store.record(enqueued("tick", second(1), "beat-a"))
    report = occurrence_report(store, Occurrence(job="tick", scheduled_at=second(1)))
    assert [(r.outcome, r.replica) for r in report.records] == [
        ("skipped-claimed", "beat-b"),
        ("skipped-claimed", "beat-c"),
        ("enqueued", "beat-a"),
    ]
    found = audit(store, "tick", second(0), second(2), Every(timedelta(seconds=1)))
    silent = Occurrence(job="tick", scheduled_at=second(2)).id
    assert "beat-b, beat-c asked for it" in found.why[silent]


def test_three_beats_write_one_record_per_occurrence_and_few_ledgers(
    clock: FakeClock, beats: list[Beat]
) -> None:
    """Real beats on one store, 20 occurrences: 20 records, and each replica's ledger written
    when its span opened, at its heartbeats (every 5 s) and when it stopped, not per
    occurrence."""
    store = CountingStore(clock=clock)
    job, _ = inline("tick")
    beats += [Beat(store, [job], clock=clock, replica_id=f"r{i}") for i in range(3)]
    for beat in beats:
        beat.start()
    for step in range(1, 21):
        clock.advance(1)
        # the record, not the handler: the run's overlap lock is released before it
        wait_for(
            lambda n=step: len(store.history("tick", 100)) == n,
            30,
            f"occurrence {step}",
            every=0.01,
        )
    # Per replica: opened, then at most once per heartbeat (20 s: 4 of them, and one more at
    # the start); 60 if it were written per occurrence.
    assert store.puts.get(lost_claims.GROUP, 0) <= 3 * (1 + 20 // 5 + 1)
    for beat in beats:
        beat.stop()
    counts: dict[str, set[str]] = {}
    for record in lost_claims.history(store, "tick", 100):
        counts.setdefault(record.occurrence_id, set()).add(f"{record.outcome}:{record.replica}")
    assert len(counts) == 20
    for found in counts.values():
        assert len(found) == 3 and sum(x.startswith("completed") for x in found) == 1, found


def test_a_fresh_manual_occurrence_shows_no_replica_standing_aside(
    clock: FakeClock, beats: list[Beat]
) -> None:
    """``trigger --force`` runs an occurrence at the current millisecond that no other replica
    ever asked for: history must not show them standing aside for it, while the scheduled
    occurrences around it still do."""
    store = MemoryStore(clock=clock)
    job, _ = inline("tick", every="10s")
    beats += [Beat(store, [job], clock=clock, replica_id=f"r{i}") for i in range(3)]
    for beat in beats:
        beat.start()
    clock.advance(10)
    wait_for(lambda: len(store.history("tick", 100)) == 1, 30, "the scheduled run", every=0.01)
    clock.advance(2.5)
    forced = beats[0].trigger("tick", force=True)
    assert forced.outcome == "completed"
    shown: dict[str, list[str]] = {}
    for record in lost_claims.history(store, "tick", 100):
        shown.setdefault(record.occurrence_id, []).append(record.outcome)
    assert sorted(shown[forced.occurrence_id]) == ["completed"]
    scheduled = [o for o in shown if o != forced.occurrence_id]
    assert [sorted(shown[o]) for o in scheduled] == [
        ["completed", "skipped-claimed", "skipped-claimed"]
    ]
    report = occurrence_report(store, Occurrence.parse(forced.occurrence_id))
    assert [r.outcome for r in report.records] == ["completed"]
