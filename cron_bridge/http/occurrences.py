"""A job's history as the dashboard lists it: one row per occurrence, not per record.

Every replica that stood aside for an occurrence, and every attempt of it, would be a row of
its own; with ten replicas nine rows in ten would say ``skipped-claimed``. A row here is the
occurrence (its state as the strip draws it), its attempts oldest first (the runs and the
beat's enqueue), and how many replicas stood aside, folded into one number.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cron_bridge.control.lost_claims import LostClaims
from cron_bridge.http.charts import Mark
from cron_bridge.jobs import Occurrence
from cron_bridge.stores.records import RunRecord

__all__ = ["FILTERS", "PER_PAGE", "Row", "filtered", "paged", "rows", "with_stood_aside"]

PER_PAGE = 25

# The state filters of a job's page: the drawn states each one shows.
FILTERS: dict[str, frozenset[str]] = {
    "all": frozenset(),
    "failed": frozenset({"failed", "aborted", "unrecorded"}),
    "completed": frozenset({"completed"}),
    "running": frozenset({"running", "queued", "claimed"}),
    "skipped": frozenset({"skipped-overlap", "paused", "missed"}),
}


@dataclass(frozen=True, slots=True)
class Row:
    """One occurrence: as drawn, its attempts oldest first, and the replicas that stood
    aside for it."""

    mark: Mark
    attempts: tuple[RunRecord, ...]
    stood_aside: frozenset[str] = frozenset()

    @property
    def ran_by(self) -> str | None:
        """The replica or worker that ran it last, or that holds it now."""
        return self.mark.replica


def rows(marks: Iterable[Mark], records: Iterable[RunRecord]) -> list[Row]:
    """The occurrences drawn as ``marks``, newest first, each with its records but the
    ``skipped-claimed`` ones (a replica that lost the claim: counted, not listed)."""
    by_occurrence: dict[str, list[RunRecord]] = {}
    for record in records:
        by_occurrence.setdefault(record.occurrence_id, []).append(record)
    found = []
    for mark in sorted(marks, key=lambda m: m.scheduled_at, reverse=True):
        group = by_occurrence.get(mark.occurrence_id, [])
        attempts = sorted(
            (r for r in group if r.outcome != "skipped-claimed"),
            key=lambda r: (r.started_at, r.attempt),
        )
        aside = frozenset(r.replica for r in group if r.outcome == "skipped-claimed")
        found.append(Row(mark, tuple(attempts), aside))
    return found


def filtered(found: Sequence[Row], state: str) -> list[Row]:
    """The rows the state filter ``state`` shows (every row for ``all`` or an unknown one)."""
    states = FILTERS.get(state) or frozenset()
    return [row for row in found if not states or row.mark.state in states]


def paged(found: Sequence[Row], page: int) -> tuple[list[Row], int]:
    """Page ``page`` (from 1; one past the end is the last) of ``found``, and how many pages."""
    pages = max(1, -(-len(found) // PER_PAGE))
    page = min(max(1, page), pages)
    return list(found[(page - 1) * PER_PAGE : page * PER_PAGE]), pages


def with_stood_aside(found: Sequence[Row], aside: LostClaims) -> list[Row]:
    """``found`` with the replicas that stood aside counted from their ledgers (those that
    wrote no record of an occurrence the schedule brought); a manual run has none."""
    counted = []
    for row in found:
        try:
            occurrence = Occurrence.parse(row.mark.occurrence_id)
        except ValueError:
            counted.append(row)
            continue
        written = [*row.attempts, *(_lost(occurrence, replica) for replica in row.stood_aside)]
        extra = frozenset(r.replica for r in aside.records(occurrence, written))
        counted.append(Row(row.mark, row.attempts, row.stood_aside | extra))
    return counted


def _lost(occurrence: Occurrence, replica: str) -> RunRecord:
    """The record a replica wrote when it lost the claim (its ledger adds nothing then)."""
    return RunRecord(
        job=occurrence.job,
        occurrence_id=occurrence.id,
        outcome="skipped-claimed",
        trigger="schedule",
        replica=replica,
        started_at=occurrence.scheduled_at,
    )
