"""Each job's newest run, kept beside its history by every store's ``record_many``, so a page
of ten thousand jobs can count the failing and the late ones from two small groups instead of
reading every job's history.

Two control groups, one entry per job (the key is the job's name):

- ``latest-run``: the newest occurrence that has a record, and what its best record says
  (``enqueued``, a skip, ``missed``, ``failed``, ``aborted`` or ``completed``);
- ``latest-end``: the newest occurrence that ended (``completed``, ``failed`` or
  ``aborted``): whether the job is failing.

A value is ``<scheduled, epoch ms: 15 digits> <rank: 1 digit> <attempt: 5 digits>
<outcome>``, ordered by occurrence, then outcome, then attempt (``order``): a completion of
an occurrence outranks every failure of it, as the dashboard draws it, and of two failures the
later attempt wins. A store writes a value only where the key is absent
or holds an earlier one (``Store.raise_controls``): records written out of order by a beat
and a worker leave the newest. A value scheduled past ``ceiling`` (more than a day ahead of
the writer's clock: forged, or a clock gone wrong) or of another shape is overwritten, so a
bad entry never freezes a job's summary. ``skipped-claimed`` (a replica that stood aside, or
a copy another began) says nothing of the run and is left out.

Read as untrusted input: ``parse`` takes only what ``value`` writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cron_bridge.jobs import Occurrence
from cron_bridge.plumbing import inbound
from cron_bridge.stores.records import RunRecord

__all__ = [
    "ENDED",
    "GROUPS",
    "LATEST",
    "OUTCOMES",
    "VALUE_MAX",
    "Summary",
    "ceiling",
    "keep_greatest",
    "order",
    "parse",
    "raised",
    "summaries",
    "value",
]

LATEST = "latest-run"
ENDED = "latest-end"
GROUPS = (LATEST, ENDED)

_RANK = {
    "enqueued": 1,
    "skipped-overlap": 2,
    "skipped-completed": 2,
    "skipped-paused": 2,
    "missed": 2,
    "failed": 3,
    "aborted": 3,
    "completed": 4,
}
OUTCOMES = tuple(_RANK)  # what an entry may name after its place
_ENDS = frozenset({"failed", "aborted", "completed"})
_MS_DIGITS = 15
_ATTEMPT_MAX = 99_999
_AHEAD = timedelta(days=1)
_PREFIX = _MS_DIGITS + 1 + 1 + 1 + 5 + 1  # scheduled, rank, attempt, each with its space
VALUE_MAX = _PREFIX + max(len(outcome) for outcome in _RANK)


@dataclass(frozen=True, slots=True)
class Summary:
    """What ``latest-run`` or ``latest-end`` says of one job."""

    scheduled_ms: int
    attempt: int
    outcome: str

    @property
    def scheduled_at(self) -> datetime:
        return datetime.fromtimestamp(self.scheduled_ms / 1000, UTC)


def value(scheduled_ms: int, attempt: int, outcome: str) -> str:
    """The entry for a record of ``outcome``: its text order is the runs' order."""
    attempt = min(max(attempt, 1), _ATTEMPT_MAX)
    return f"{scheduled_ms:0{_MS_DIGITS}d} {_RANK[outcome]} {attempt:05d} {outcome}"


def ceiling(now: datetime) -> int:
    """An entry scheduled after this (epoch ms) is a day or more ahead of ``now``: a writer
    replaces it."""
    return int((now + _AHEAD).timestamp() * 1000)


def parse(text: str) -> Summary | None:
    """An entry as ``value`` writes it, or None: not an entry (``order``), or scheduled past
    what a date can say (forged: read, it would stop whoever reads it)."""
    place = order(text)
    if place is None or place[0] > inbound.MAX_EPOCH_MS:
        return None
    return Summary(place[0], place[2], text[_PREFIX:])


def summaries(records: Iterable[RunRecord]) -> dict[str, dict[str, str]]:
    """The entries ``records`` raise, the greatest of the batch per job and group, in the
    order of the jobs' names (writers lock rows in one order: no deadlock between them)."""
    found: dict[str, dict[str, str]] = {LATEST: {}, ENDED: {}}
    for record in records:
        if record.outcome not in _RANK:
            continue
        try:
            scheduled = Occurrence.parse(record.occurrence_id).scheduled_at
        except ValueError:
            continue
        ms = int(scheduled.timestamp() * 1000)
        if not 0 <= ms < 10**_MS_DIGITS:
            continue
        entry = value(ms, record.attempt, record.outcome)
        groups = (LATEST, ENDED) if record.outcome in _ENDS else (LATEST,)
        for group in groups:
            if raised(found[group].get(record.job), entry, 10**_MS_DIGITS):
                found[group][record.job] = entry
    return {group: dict(sorted(entries.items())) for group, entries in found.items() if entries}


def order(text: str) -> tuple[int, int, int] | None:
    """An entry's place among a job's runs (scheduled, rank, attempt), or None when ``text``
    is not an entry: of another shape (the digits and spaces before the outcome), longer
    than ``VALUE_MAX``, or naming no outcome an entry names. Every store keeps this order,
    on the server where it can."""
    head = text[:_PREFIX]
    if not (
        _PREFIX < len(text) <= VALUE_MAX
        and head.isascii()
        and head[:_MS_DIGITS].isdigit()
        and head[16] in "1234"
        and head[18:23].isdigit()
        and head[_MS_DIGITS] == head[17] == head[23] == " "
        and text[_PREFIX:] in _RANK
    ):
        return None
    return int(head[:_MS_DIGITS]), int(head[16]), int(head[18:23])


def raised(current: str | None, new: str, ceiling_ms: int) -> bool:
    """Whether ``new`` replaces ``current``: absent, of another shape, before it, or
    scheduled after ``ceiling_ms`` (what every store's ``raise_controls`` decides). Entries
    in the same place (a failure and an abort of one attempt) keep the first."""
    here, there = order(new), None if current is None else order(current)
    return here is not None and (there is None or there < here or there[0] > ceiling_ms)


def keep_greatest(
    entries: Mapping[str, str], current: Mapping[str, str], ceiling_ms: int
) -> dict[str, str]:
    """Of ``entries``, those that replace what ``current`` holds."""
    return {k: v for k, v in entries.items() if raised(current.get(k), v, ceiling_ms)}
