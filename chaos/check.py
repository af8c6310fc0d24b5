"""Reads what the handlers wrote and what the store kept; finds duplicates, overlaps and
losses, and sorts each loss into what the guarantee allows or not."""

from __future__ import annotations

import itertools
import json
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from cron_bridge.control.audit import explain
from cron_bridge.jobs import Occurrence
from cron_bridge.run.lease import MARGIN_MAX
from cron_bridge.schedules import Every
from cron_bridge.stores import RunRecord, Store

LOCK_TTL = 3.0  # the jobs' lock_ttl (chaos/app.py)
MISFIRE_GRACE = 10.0  # the jobs' misfire_grace (chaos/app.py)
# What a send fails with when the broker is down, paused or just back: redis-py's and kombu's
# connection errors and timeouts, Redis loading its AOF.
BROKER_ERROR = re.compile(
    r"^failed on [\w.-]+: \w*(Connection\w*|Timeout|Operational|Loading)"
    r"Error: "
)
# How soon after the store answers again a finished run's release that it did not take is sent
# (the releaser's retries, at most a second apart), with a margin for a loaded machine.
RELEASED_WITHIN = 1.5
# The runner's lease: the TTL less its margin, counted from before the acquire request (so
# before the handler wrote its start line).
LEASE = LOCK_TTL - min(LOCK_TTL / 10, MARGIN_MAX)

# Losses the guarantee allows, by the start of what the audit says of them.
ALLOWED = (
    "missed",  # late beyond misfire_grace, or coalesced on purpose
    "aborted",  # lock-lost (a frozen runner), shutdown
    "skipped-overlap",  # behind a run still holding the lock (one that died or froze in it)
    # "claimed by": only with a ``began`` line, see ``allowed``
    "failed on",  # the store (or the broker) was down past misfire_grace
)


# An attempt's start (its lock asked for), its handler's end (inf: died in it), occurrence id;
# monotonic.
Run = tuple[float, float, str]


def touched(replica: str, disrupted: set[str]) -> bool:
    """Whether a beat replica (``beat0-1``) or a worker's guard (``worker0-1-<pid>-<hex>``,
    from its start's host name) is one that was killed or frozen."""
    return replica in disrupted or any(replica.startswith(f"{name}-") for name in disrupted)


def allowed(
    why: str,
    disrupted: set[str],
    runs: dict[str, Run],
    at: float | None,
    killed: dict[str, float],
    faults: list[float] | None = None,
    broker_faults: list[float] | None = None,
    fetches_cut: list[float] | None = None,
    began: set[str] | None = None,
) -> bool:
    """Whether the guarantee allows this loss: a claim lost only with a replica that died or
    froze after it settled the claim for its inline run (``began``: the replicas that said
    so), since one that died before is taken over; a message only with a worker killed after
    it was enqueued, or the broker crashed then (``fetches_cut``: when; what becomes of a
    fetch it cut is in chaos/brokers.py); a failure only for the store, or for the broker's
    connection error while it was down or paused (its retries within ``misfire_grace`` from
    then); a skip only behind a run holding its lock at that moment (``runs``: from when its
    attempt began, the lock asked for, until its guard settled it, see ``holding``), one on a
    replica or worker that died or froze in it, or one that had ended when the store failed,
    within ``RELEASED_WITHIN`` of the store's last fault before the skip (the release is sent
    when the store answers again: a lock never outlives its run by more than the outage);
    the rest as the audit names them. ``at`` (monotonic) is when the store last recorded
    something of the occurrence; ``faults`` and ``broker_faults`` when the store's and the
    broker's own faults began and ended (monotonic, in pairs)."""
    if why.startswith("claimed by "):
        claimer = why.removeprefix("claimed by ").split(",")[0]
        return touched(claimer, disrupted) and claimer in (began or set())
    if why.startswith("enqueued by "):  # RQ does not redeliver the job of a killed worker
        return at is not None and (
            any(
                name.startswith("worker") and at - 1 <= died <= at + 30
                for name, died in killed.items()
            )
            or any(at - 1 <= crashed <= at + 30 for crashed in fetches_cut or ())
        )
    if why.startswith("failed on "):
        if "StoreUnavailable" in why:
            return True
        times = broker_faults or []
        windows = zip(times[::2], times[1::2], strict=True)
        return (
            bool(BROKER_ERROR.match(why))
            and at is not None
            and any(began - 1 <= at <= ended + MISFIRE_GRACE + 2 for began, ended in windows)
        )
    if why.startswith("skipped-overlap") and " held by " in why:
        skipper = why.removeprefix("skipped-overlap on ").split(":")[0]
        holder, _, replica = why.split(" held by ")[1].partition(" on ")
        run = runs.get(holder)
        going = run is not None and at is not None and run[0] - 0.5 <= at <= run[1] + 0.5
        # Behind a lock its run could not release: the store failed around the run's end,
        # and the skip came before the lock expired.
        around = [f for f in faults or () if run is not None and run[1] - LOCK_TTL <= f]
        held_up = (
            run is not None
            and at is not None
            and run[1] <= at <= run[1] + LOCK_TTL + 0.5
            and any(f <= at for f in around)
            and at <= max(f for f in around if f <= at) + RELEASED_WITHIN
        )
        # Behind a run that was going, or late because the skipper (or the holder) froze.
        return going or held_up or touched(replica, disrupted) or touched(skipper, disrupted)
    return why.startswith(ALLOWED)


@dataclass
class Findings:
    occurrences: int = 0
    ran_once: int = 0
    duplicates: dict[str, int] = field(default_factory=dict)
    overlaps: list[tuple[str, str]] = field(default_factory=list)
    allowed: dict[str, str] = field(default_factory=dict)
    not_allowed: dict[str, str] = field(default_factory=dict)
    # Run again after the worker running it died in it: the queue's redelivery, at least once
    # on the worker side (docs/guarantee.md, "When a worker dies mid-run"); by who died.
    rerun: dict[str, str] = field(default_factory=dict)
    # Sent or run by a replica that took the claim over from one that died or froze first.
    taken_over: int = 0

    @property
    def ok(self) -> bool:
        return not self.duplicates and not self.overlaps and not self.not_allowed


def check(
    journal: Path,
    store: Store,
    jobs: list[str],
    start: float,
    end: float,
    *,
    disrupted: set[str],
    killed: dict[str, float],
    faults: list[float] | None = None,
    broker_faults: list[float] | None = None,
    fetches_cut: list[float] | None = None,
) -> Findings:
    """Judge every occurrence of ``jobs`` due in ``(start, end]`` (epoch seconds);
    ``disrupted`` are the replicas and workers that were killed or frozen, ``killed`` when
    each of the killed ones died (monotonic; a run it died in ended then), ``faults`` when
    the store failed (monotonic: a restart's start and end, a connection cut), and
    ``broker_faults`` the broker, ``fetches_cut`` when it crashed (a worker's fetch cut)."""
    to_monotonic = time.monotonic() - time.time()
    lines = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    starts: dict[str, list[dict[str, object]]] = defaultdict(list)
    by_job: dict[str, list[Run]] = defaultdict(list)
    held: list[tuple[dict[str, object], Run]] = []
    ends = {
        (line["occurrence_id"], line["replica"]): line for line in lines if line["event"] == "end"
    }
    to_run: dict[str, set[str]] = defaultdict(set)  # the replicas that settled it to run it
    for line in lines:
        if line["event"] == "began":
            to_run[str(line["occurrence_id"])].add(str(line["replica"]))
    for line in lines:
        if line["event"] != "start":
            continue
        starts[str(line["occurrence_id"])].append(line)
        finished = ends.get((line["occurrence_id"], line["replica"]))
        runner = str(line["replica"])
        died = min(
            (at for name, at in killed.items() if touched(runner, {name})), default=float("inf")
        )
        began = _mono(line)
        stop = _mono(finished) if finished else died  # died in the handler
        if finished and finished.get("reason") == "lock-lost":
            # It saw the abort at its first look after its lease ran out (frozen, it did
            # nothing meanwhile) and stopped: its work ended with the lease at the latest.
            stop = min(stop, began + LEASE)
        run = (began, stop, str(line["occurrence_id"]))
        by_job[str(line["job"])].append(run)
        held.append((line, run))
    found = Findings()
    for runs in by_job.values():
        runs.sort()
        for (_, first_end, first), (second_start, _, second) in itertools.pairwise(runs):
            if second_start < first_end and first != second:
                found.overlaps.append((first, second))
    kept: dict[str, list[RunRecord]] = defaultdict(list)
    for job in jobs:
        for record in store.history(job, store.history_limit):
            kept[record.occurrence_id].append(record)
            found.taken_over += (record.reason or "").startswith("taken over from ")
    # A run holds its lock from some moment after its attempt began (the acquire's request
    # goes out then, and a slow store answers it late) until its guard released it: a skip
    # behind it is judged against that, not against its handler's lines only.
    by_occurrence = {
        occurrence: (min([run[0], *_asked(kept.get(occurrence, []), to_monotonic)]), *run[1:])
        for occurrence, run in holding(lines, held).items()
    }
    window = (datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC))
    for job in jobs:
        for at in Every("1s").occurrences(*window):
            occurrence = Occurrence(job=job, scheduled_at=at)
            found.occurrences += 1
            count = len(starts.get(occurrence.id, []))
            if count == 1:
                found.ran_once += 1
            elif count > 1:
                died = died_in(starts[occurrence.id], ends, killed)
                if died is None:
                    found.duplicates[occurrence.id] = count
                else:
                    found.rerun[occurrence.id] = died
            else:
                records = kept.get(occurrence.id, [])
                why = explain(store, occurrence, records)
                tried = max(
                    (r.started_at.timestamp() + to_monotonic for r in records), default=None
                )
                if allowed(
                    why,
                    disrupted,
                    by_occurrence,
                    tried,
                    killed,
                    faults,
                    broker_faults,
                    fetches_cut,
                    to_run.get(occurrence.id),
                ):
                    found.allowed[occurrence.id] = why
                else:
                    found.not_allowed[occurrence.id] = why + _timing(why, tried, by_occurrence)
    return found


def holding(
    lines: list[dict[str, object]], held: list[tuple[dict[str, object], Run]]
) -> dict[str, Run]:
    """Each run's hold on its job's lock, by occurrence: from its start (``held``: its
    journal line and its run) until its guard said it settled, after it released the lock,
    which on a loaded machine can be well after the handler's end; until the handler's end
    where the guard's line is not in the journal."""
    settled = {
        (line["occurrence_id"], line["replica"]): _mono(line)
        for line in lines
        if line["event"] == "settled"
    }
    return {
        run[2]: (
            run[0],
            max(run[1], settled.get((line["occurrence_id"], line["replica"]), run[1])),
            run[2],
        )
        for line, run in held
    }


def _asked(records: list[RunRecord], to_monotonic: float) -> list[float]:
    """When the attempts that ran a handler began (monotonic), each before its lock was
    asked for; a refused attempt's record is stamped when it was refused."""
    ran = ("completed", "failed", "aborted")
    return [r.started_at.timestamp() + to_monotonic for r in records if r.outcome in ran]


def died_in(
    runs: list[dict[str, object]],
    ends: dict[tuple[object, object], dict[str, object]],
    killed: dict[str, float],
) -> str | None:
    """Who died in each run of an occurrence but its last (``worker0-1, ...``), when each of
    those runs' workers was killed while in it, before it wrote its end (or within a second
    after: before its completion mark), and the next run started after that death; else None,
    a duplicate."""
    runs = sorted(runs, key=_mono)
    dead: list[str] = []
    for run, following in itertools.pairwise(runs):
        replica = str(run["replica"])
        if not replica.startswith("worker"):
            return None  # only a queue redelivers
        finished = ends.get((run["occurrence_id"], run["replica"]))
        until = _mono(finished) + 1.0 if finished else float("inf")
        deaths = [
            (name, at)
            for name, at in killed.items()
            if touched(replica, {name}) and _mono(run) <= at <= until and at <= _mono(following)
        ]
        if not deaths:
            return None
        dead.append(deaths[0][0])
    return ", ".join(dead)


def _mono(line: dict[str, object]) -> float:
    """When a journal line was written, on the monotonic clock every process shares (wall
    clocks may be set off); lines written before it was recorded have only ``at``."""
    value = line.get("mono")
    if value is None:
        return float(line["at"]) + time.monotonic() - time.time()  # type: ignore[arg-type]
    return float(value)  # type: ignore[arg-type]


def _timing(why: str, at: float | None, runs: dict[str, Run]) -> str:
    """For a loss that is not allowed: when the store recorded it and when the run it names
    ran (monotonic seconds), to read against the replicas' logs."""
    shown = f" [recorded at {at:.2f}" if at is not None else " [nothing recorded"
    holder = why.split(" held by ")[1].split(" on ")[0] if " held by " in why else None
    run = runs.get(holder) if holder else None
    if run is not None:
        shown += f"; {holder} held its lock {run[0]:.2f} to {run[1]:.2f}"
    return shown + "]"
