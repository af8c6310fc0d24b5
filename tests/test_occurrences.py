"""A job's page lists occurrences, not records: grouping, state filters, paging, the replicas
that stood aside counted once, and what "Run now" says."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from cron_bridge.http import occurrences
from cron_bridge.http.charts import marks
from cron_bridge.http.dashboard import run_now_words
from cron_bridge.jobs import Occurrence
from cron_bridge.stores import RunRecord

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def record(minute: int, outcome: Any, replica: str, attempt: int = 1, **extra: Any) -> RunRecord:
    """A record of the occurrence due ``minute`` minutes after T0, written ``attempt`` seconds
    after it was due (an enqueue: right when it was due)."""
    due = T0 + timedelta(minutes=minute)
    started = due + timedelta(seconds=0 if outcome == "enqueued" else attempt)
    return RunRecord(
        job="j",
        occurrence_id=Occurrence(job="j", scheduled_at=due).id,
        outcome=outcome,
        trigger="schedule",
        replica=replica,
        started_at=started,
        attempt=attempt,
        **extra,
    )


class Ledgers:
    """Stands in for ``control.lost_claims.LostClaims``: who a ledger says stood aside."""

    def __init__(self, who: list[str]) -> None:
        self.who = who

    def records(self, occurrence: Occurrence, written: Any) -> list[RunRecord]:
        besides = {r.replica for r in written}
        return [
            RunRecord(
                job="j",
                occurrence_id=occurrence.id,
                outcome="skipped-claimed",
                trigger="schedule",
                replica=r,
                started_at=occurrence.scheduled_at,
            )
            for r in self.who
            if r not in besides
        ]


def test_an_occurrence_is_one_row_with_its_attempts_and_who_stood_aside() -> None:
    records = [
        record(0, "skipped-claimed", "beat-b"),
        record(0, "failed", "worker-1", 1, error="E: one", traceback="Traceback ...\nE: one"),
        record(0, "completed", "worker-2", 2),
        record(0, "enqueued", "beat-a", 1),
        record(1, "failed", "worker-1", 1, error="E: two"),
    ]
    found = occurrences.rows(marks(records), records)
    assert [row.mark.state for row in found] == ["failed", "completed"]  # newest first
    first = found[1]
    assert [(r.outcome, r.replica) for r in first.attempts] == [
        ("enqueued", "beat-a"),
        ("failed", "worker-1"),
        ("completed", "worker-2"),
    ]
    assert first.stood_aside == {"beat-b"} and first.ran_by == "worker-2"
    counted = occurrences.with_stood_aside(found, Ledgers(["beat-a", "beat-b", "beat-c"]))  # type: ignore[arg-type]
    # beat-a wrote the enqueue, beat-b its own skipped-claimed: only beat-c is added.
    assert counted[1].stood_aside == {"beat-b", "beat-c"}
    assert counted[0].stood_aside == {"beat-a", "beat-b", "beat-c"}


def test_state_filters_and_pages() -> None:
    records = [record(i, "failed" if i % 5 == 0 else "completed", "r") for i in range(60)]
    found = occurrences.rows(marks(records, limit=100), records)
    assert len(occurrences.filtered(found, "failed")) == 12
    assert len(occurrences.filtered(found, "completed")) == 48
    assert occurrences.filtered(found, "no-such-filter") == found
    first, pages = occurrences.paged(found, 1)
    assert pages == 3 and len(first) == occurrences.PER_PAGE
    last, _ = occurrences.paged(found, 99)  # past the end: the last page
    assert len(last) == 60 - 2 * occurrences.PER_PAGE and last[-1] is found[-1]
    assert occurrences.paged([], 1) == ([], 1)


def test_run_now_says_in_words_what_it_did() -> None:
    occurrence = "j@2026-12-01T08:00:00.000Z"
    ran = run_now_words("completed", occurrence, "beat-a", None, 12.0)
    assert ran == "Ran the occurrence due 2026-12-01T08:00:00.000Z on beat-a: completed in 12 ms."
    claimed = run_now_words("skipped-claimed", occurrence, "beat-a", None, None)
    assert claimed.startswith("Not run again: ") and "runs once" in claimed
    failed = run_now_words("failed", occurrence, "beat-a", "RuntimeError: " + "x" * 900, 3.0)
    assert failed.startswith("Ran the occurrence due ") and "it failed in 3 ms: Runtime" in failed
    assert len(failed) < 700  # the error is cut: the words travel in the page's URL
    assert run_now_words("enqueued", occurrence, "beat-a", None, None).startswith("Sent ")
