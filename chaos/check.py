"""Reads what the handlers wrote and what the store kept; finds duplicates, overlaps and
losses, and sorts each loss into what the guarantee allows or not."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from cron_bridge.audit import explain
from cron_bridge.jobs import Occurrence
from cron_bridge.schedules import Every
from cron_bridge.stores import Store

LOCK_TTL = 3.0  # the jobs' lock_ttl (chaos/app.py)

# Losses the guarantee allows, by the start of what the audit says of them.
ALLOWED = (
    "missed",  # late beyond misfire_grace, or coalesced on purpose
    "aborted",  # lock-lost (a frozen runner), shutdown
    "skipped-overlap",  # behind a run still holding the lock (one that died or froze in it)
    "claimed by",  # claimed by a replica that died or froze before it ran it
    "failed on",  # the store was down past misfire_grace when the lock was asked for
)


Run = tuple[float, float, str]  # start, end (inf: died in it), occurrence id


def allowed(why: str, disrupted: set[str], runs: dict[str, Run], at: float | None) -> bool:
    """Whether the guarantee allows this loss: a claim lost only with a replica that died or
    froze; a failure only for the store; a skip only behind a run the handlers saw going at
    that moment, or one on a replica that died or froze in it; the rest as the audit names
    them."""
    if why.startswith("claimed by "):
        return why.removeprefix("claimed by ").split(",")[0] in disrupted
    if why.startswith("failed on "):
        return "StoreUnavailable" in why
    if why.startswith("skipped-overlap") and " held by " in why:
        skipper = why.removeprefix("skipped-overlap on ").split(":")[0]
        holder, _, replica = why.split(" held by ")[1].partition(" on ")
        run = runs.get(holder)
        going = run is not None and at is not None and run[0] - 0.5 <= at <= run[1] + 0.5
        # Behind a run that was going, or late because the skipper (or the holder) froze.
        return going or replica in disrupted or skipper in disrupted
    return why.startswith(ALLOWED)


@dataclass
class Findings:
    occurrences: int = 0
    ran_once: int = 0
    duplicates: dict[str, int] = field(default_factory=dict)
    overlaps: list[tuple[str, str]] = field(default_factory=list)
    allowed: dict[str, str] = field(default_factory=dict)
    not_allowed: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.duplicates and not self.overlaps and not self.not_allowed


def check(
    journal: Path, store: Store, jobs: list[str], start: float, end: float, *,
    disrupted: set[str], killed: dict[str, float],
) -> Findings:  # fmt: skip
    """Judge every occurrence of ``jobs`` due in ``(start, end]`` (epoch seconds);
    ``disrupted`` are the replicas that were killed or frozen, ``killed`` when each of the
    killed ones died (a run it died in ended then)."""
    lines = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    starts: dict[str, list[dict[str, object]]] = defaultdict(list)
    by_job: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    ends = {(line["occurrence_id"], line["replica"]): line for line in lines
            if line["event"] == "end"}  # fmt: skip
    for line in lines:
        if line["event"] != "start":
            continue
        starts[str(line["occurrence_id"])].append(line)
        finished = ends.get((line["occurrence_id"], line["replica"]))
        died = killed.get(str(line["replica"]), float("inf"))
        stop = float(finished["at"]) if finished else died  # died in the handler
        if finished and finished.get("reason") == "lock-lost":
            # It saw the abort at its first look after its lease ran out (frozen, it did
            # nothing meanwhile) and stopped: its work ended with the lease at the latest.
            stop = min(stop, float(line["at"]) + LOCK_TTL)
        by_job[str(line["job"])].append((float(line["at"]), stop, str(line["occurrence_id"])))
    found = Findings()
    by_occurrence = {run[2]: run for runs in by_job.values() for run in runs}
    for runs in by_job.values():
        runs.sort()
        for (_, first_end, first), (second_start, _, second) in itertools.pairwise(runs):
            if second_start < first_end and first != second:
                found.overlaps.append((first, second))
    window = (datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC))
    for job in jobs:
        records = store.history(job, store.history_limit)
        kept = defaultdict(list)
        for record in records:
            kept[record.occurrence_id].append(record)
        for at in Every("1s").occurrences(*window):
            occurrence = Occurrence(job=job, scheduled_at=at)
            found.occurrences += 1
            count = len(starts.get(occurrence.id, []))
            if count == 1:
                found.ran_once += 1
            elif count > 1:
                found.duplicates[occurrence.id] = count
            else:
                records = kept.get(occurrence.id, [])
                why = explain(store, occurrence, records)
                tried = max((r.started_at.timestamp() for r in records), default=None)
                ok = allowed(why, disrupted, by_occurrence, tried)
                target = found.allowed if ok else found.not_allowed
                target[occurrence.id] = why
    return found
