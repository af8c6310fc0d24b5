"""The chaos run's judge on the losses it allows: a skip behind a lock its finished run could
not release only when the store failed around the run's end, and only until the store answers
again; a claim lost with its claimer only once it settled it to run it inline;
a skip behind a run that was still releasing its lock; a send failed only for the broker's
connection error while it was down; a message lost only with a worker killed or the broker
crashed after it was sent; a second run only as a redelivery after its worker died in the
first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from chaos.check import (
    LOCK_TTL,
    MISFIRE_GRACE,
    RELEASED_WITHIN,
    allowed,
    check,
    died_in,
    holding,
)
from cron_bridge.jobs import Occurrence
from cron_bridge.stores import MemoryStore, RunRecord

WHY = (
    "skipped-overlap on worker0-1-1-a: held by chaos.queued01@2026-12-01T23:03:12.000Z "
    "on worker1-1-2-b"
)
RUNS = {"chaos.queued01@2026-12-01T23:03:12.000Z": (100.0, 101.0, "chaos.queued01@...")}


def test_a_skip_behind_a_finished_run_is_allowed_only_when_the_store_failed_as_it_ended() -> None:
    assert allowed(WHY, set(), RUNS, 101.8, {}, faults=[100.9])  # cut as the run ended
    assert allowed(WHY, set(), RUNS, 101.8, {}, faults=[99.0, 101.5])  # a restart around it
    assert not allowed(WHY, set(), RUNS, 101.8, {}, faults=[])  # nothing failed: a bug
    assert not allowed(WHY, set(), RUNS, 101.8, {}, faults=[90.0])  # long before
    assert not allowed(WHY, set(), RUNS, 101.8, {}, faults=[102.0])  # after the skip
    late = 101.0 + LOCK_TTL + 1.0  # the lock had expired by then whatever the store did
    assert not allowed(WHY, set(), RUNS, late, {}, faults=[100.9])


def test_a_skip_behind_a_finished_run_is_allowed_only_until_the_store_answers_again() -> None:
    """A lock never outlives its run by more than the store's outage: once the store is back
    (its last fault before the skip), the release is sent within RELEASED_WITHIN; a skip
    later than that is behind a lock nobody holds, a loss the guarantee does not allow."""
    assert allowed(WHY, set(), RUNS, 101.8, {}, faults=[100.5, 100.9])
    assert allowed(WHY, set(), RUNS, 100.9 + RELEASED_WITHIN, {}, faults=[100.5, 100.9])
    assert not allowed(WHY, set(), RUNS, 101.0 + RELEASED_WITHIN, {}, faults=[99.0, 99.4])


CLAIMED = "claimed by beat0-1, which did not record it"


def test_a_claim_lost_with_its_claimer_is_allowed_only_once_it_settled_it_to_run() -> None:
    """A claimer that dies before it sends (or starts) what it claimed leaves it to be taken
    over: its loss is not allowed. Only one that settled an inline claim (``began``) and died
    before the handler's start loses it as the guarantee allows."""
    assert allowed(CLAIMED, {"beat0-1"}, {}, None, {"beat0-1": 100.0}, began={"beat0-1"})
    assert not allowed(CLAIMED, {"beat0-1"}, {}, None, {"beat0-1": 100.0}, began=set())
    assert not allowed(CLAIMED, {"beat0-1"}, {}, None, {"beat0-1": 100.0}, began={"beat1-1"})
    assert not allowed(CLAIMED, set(), {}, None, {}, began={"beat0-1"})  # alive: a bug


def test_a_skip_behind_a_run_still_going_is_allowed_as_before() -> None:
    assert allowed(WHY, set(), RUNS, 100.5, {})
    assert allowed(WHY, {"worker1-1"}, RUNS, 150.0, {})  # its holder was killed or frozen


# A guard whose release takes a while, as on a loaded machine: the chaos app's handler runs
# under it, and the app journals when the guard said the run settled.
SLOW_RELEASE = """
import logging
import time
from datetime import UTC, datetime

import chaos.app
from cron_bridge import declare
from cron_bridge.jobs import Occurrence
from cron_bridge.run.guard import Guard
from cron_bridge.stores import MemoryStore

class SlowRelease(MemoryStore):
    def release(self, key, owner):
        time.sleep(0.6)
        super().release(key, owner)

logging.getLogger("cron_bridge").setLevel(logging.INFO)
job = declare("chaos.slow", every="1s", target="inline", handler=chaos.app.handler, lock_ttl="3s")
at = datetime(2026, 12, 6, 20, 11, 19, tzinfo=UTC)
occurrence = Occurrence(job=job.name, scheduled_at=at)
Guard(SlowRelease(), "beat2-2").run(job, occurrence, trigger="schedule")
"""


def test_a_skip_behind_a_run_still_releasing_its_lock_is_allowed(tmp_path: Path) -> None:
    """The run's hold on its lock lasts until its guard settled it (released the lock, then
    logged its outcome), read from the journal the chaos app writes; a skip after that is
    not allowed."""
    journal = tmp_path / "journal.jsonl"
    env = {**os.environ, "CHAOS_JOURNAL": str(journal), "CHAOS_JOBS": "0"}
    subprocess.run([sys.executable, "-c", SLOW_RELEASE], env=env, check=True, timeout=60)
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    assert [line["event"] for line in lines] == ["start", "end", "settled"]
    start, end, settled = lines
    assert settled["replica"] == "beat2-2" and settled["occurrence_id"] == start["occurrence_id"]
    assert settled["mono"] >= end["mono"] + 0.6
    occurrence = str(start["occurrence_id"])
    run = (start["mono"], end["mono"], occurrence)
    held = holding(lines, [(start, run)])
    assert held == {occurrence: (start["mono"], settled["mono"], occurrence)}
    why = f"skipped-overlap on beat0-1: held by {occurrence} on beat2-2"
    assert allowed(why, set(), held, end["mono"] + 0.55, {})  # still releasing
    assert not allowed(why, set(), {occurrence: run}, end["mono"] + 0.55, {})  # unknown: a bug
    assert not allowed(why, set(), held, settled["mono"] + 1.0, {})  # released by then


FAILED = (
    "failed on beat1-1: ConnectionError: Error 111 connecting to 127.0.0.1:40001. "
    "Connection refused."
)


def test_a_failed_send_is_allowed_only_for_a_broker_connection_error_while_it_was_down() -> None:
    """The broker down from 200 to 205: a send that failed of its connection error by the end
    of its retries (misfire_grace after it came back) is allowed; before, after, or failed
    with another error, it is not."""
    down = [200.0, 205.0]
    assert allowed(FAILED, set(), {}, 203.0, {}, broker_faults=down)
    assert allowed(FAILED, set(), {}, 205.0 + MISFIRE_GRACE, {}, broker_faults=down)
    assert allowed(
        FAILED.replace("ConnectionError", "TimeoutError"), set(), {}, 210.0, {}, broker_faults=down
    )
    assert not allowed(FAILED, set(), {}, 150.0, {}, broker_faults=down)
    assert not allowed(FAILED, set(), {}, 205.0 + MISFIRE_GRACE + 5, {}, broker_faults=down)
    assert not allowed(FAILED, set(), {}, 203.0, {}, broker_faults=[])
    typo = "failed on beat1-1: TypeError: enqueue_many() got an unexpected keyword argument"
    assert not allowed(typo, set(), {}, 203.0, {}, broker_faults=down)
    # A store failure is allowed as before, whatever the broker did.
    assert allowed("failed on beat1-1: StoreUnavailable: down", set(), {}, 150.0, {})


def test_a_message_lost_is_allowed_only_with_a_worker_killed_or_the_broker_crashed_after() -> None:
    why = "enqueued by beat0-1, no worker recorded a run (still queued, or lost with its message)"
    assert allowed(why, set(), {}, 300.0, {}, fetches_cut=[300.2])
    assert allowed(why, set(), {}, 300.0, {"worker0-1": 301.0})
    assert not allowed(why, set(), {}, 300.0, {}, fetches_cut=[250.0])  # long before
    assert not allowed(why, set(), {}, 300.0, {}, fetches_cut=[])
    assert not allowed(why, set(), {}, 300.0, {"beat1-1": 301.0})  # a beat, not a worker


def _start(replica: str, mono: float) -> dict[str, object]:
    return {"event": "start", "occurrence_id": "o", "replica": replica, "mono": mono}


def test_a_second_run_is_a_redelivery_only_after_its_worker_died_in_the_first() -> None:
    """Run twice: allowed (the queue's redelivery, at least once on the worker side) only when
    the first run's worker was killed while in it, before its end line (or a second after:
    before its completion mark), and the second began after that death; else a duplicate."""
    first, second = _start("worker0-1-10-a", 10.0), _start("worker1-1-11-b", 30.0)
    ends = {("o", "worker1-1-11-b"): {"event": "end", "mono": 30.4}}
    assert died_in([first, second], ends, {"worker0-1": 10.2}) == "worker0-1"
    assert died_in([second, first], ends, {"worker0-1": 10.2}) == "worker0-1"  # any order
    assert died_in([first, second], ends, {}) is None  # nobody died: a duplicate
    assert died_in([first, second], ends, {"worker0-1": 35.0}) is None  # died after the rerun
    assert died_in([first, second], ends, {"worker0-1": 5.0}) is None  # died before it ran
    done = {**ends, ("o", "worker0-1-10-a"): {"event": "end", "mono": 10.4}}
    assert died_in([first, second], done, {"worker0-1": 11.0}) == "worker0-1"  # before its mark
    assert died_in([first, second], done, {"worker0-1": 12.0}) is None  # completed and marked
    beat = _start("beat0-1", 10.0)  # an inline run is never redelivered
    assert died_in([beat, second], ends, {"beat0-1": 10.2}) is None


def _judged_skip(skipped_at: float) -> tuple[dict[str, str], dict[str, str]]:
    """One job, two occurrences: the first skipped (its record stamped ``skipped_at`` seconds
    after the first came due) behind the second, whose attempt began as it came due and
    whose handler, on a starved replica, wrote its start 1.5 s later; what the judge allows
    and what it does not."""
    job = "chaos.job03"
    base = float(int(time.time()) - 100)
    first = Occurrence(job=job, scheduled_at=datetime.fromtimestamp(base + 1, UTC))
    second = Occurrence(job=job, scheduled_at=datetime.fromtimestamp(base + 2, UTC))
    to_mono = time.monotonic() - time.time()
    store = MemoryStore()
    store.record_many(
        [
            RunRecord(
                job=job,
                occurrence_id=first.id,
                outcome="skipped-overlap",
                trigger="schedule",
                replica="beat1-2",
                started_at=datetime.fromtimestamp(base + 1 + skipped_at, UTC),
                reason=f"held by {second.id} on beat0-1",
            ),
            RunRecord(
                job=job,
                occurrence_id=second.id,
                outcome="completed",
                trigger="schedule",
                replica="beat0-1",
                started_at=datetime.fromtimestamp(base + 2, UTC),
                duration_ms=300.0,
            ),
        ]
    )
    lines = [
        {"event": "start", "mono": base + 3.5 + to_mono},
        {"event": "end", "mono": base + 3.8 + to_mono, "aborted": False, "reason": None},
    ]
    with tempfile.TemporaryDirectory() as folder:
        journal = Path(folder) / "journal.jsonl"
        journal.write_text(
            "".join(
                json.dumps({**line, "job": job, "occurrence_id": second.id, "replica": "beat0-1"})
                + "\n"
                for line in lines
            )
        )
        found = check(journal, store, [job], base + 0.5, base + 2.5, disrupted=set(), killed={})
    assert found.ran_once == 1 and not found.duplicates and not found.overlaps
    return found.allowed, found.not_allowed


def test_a_skip_is_judged_against_when_its_holder_asked_for_the_lock_not_its_first_line() -> None:
    """The holder asked for the lock as its attempt began: a skip decided after that is behind
    a run holding the lock, however late the holder's handler wrote its start; a skip decided
    before the holder had even begun is a loss the guarantee does not allow."""
    allowed_, not_allowed = _judged_skip(1.6)
    assert len(allowed_) == 1 and not not_allowed
    allowed_, not_allowed = _judged_skip(0.2)
    assert not allowed_ and len(not_allowed) == 1
