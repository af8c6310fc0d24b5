"""Real ``cron-bridge beat`` processes against real stores: every occurrence runs once."""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from cron_bridge.control import lost_claims
from cron_bridge.control.audit import audit, occurrence_report
from cron_bridge.jobs import Occurrence
from cron_bridge.schedules import Every
from cron_bridge.stores import Store, store_from_url
from tests.apps import journal
from tests.conftest import make_kit
from tests.e2e.processes import BeatProcess, command_env, outcomes_by_occurrence, records_of
from tests.servers import RedisServer
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

JOBS = [f"tick.{n:02d}" for n in range(20)]


def seconds_between(start: float, end: float) -> list[datetime]:
    """Whole-second occurrence times t with start <= t <= end."""
    return [datetime.fromtimestamp(s, UTC) for s in range(math.ceil(start), math.floor(end) + 1)]


def start_beats(
    app: str,
    url: str,
    folder: Path,
    env: dict[str, str],
    count: int = 3,
    extra: list[str] | None = None,
) -> list[BeatProcess]:
    return [
        BeatProcess(f"beat{i}", folder, env, app=app, store_url=url, extra=extra or []).start()
        for i in range(count)
    ]


@contextlib.contextmanager
def live_beats(
    app: str, url: str, folder: Path, env: dict[str, str]
) -> Iterator[list[BeatProcess]]:
    """Three beats, started and live in the store; stopped (killed if need be) on the way out."""
    beats = start_beats(app, url, folder, env)
    try:
        wait_until_live(url, len(beats))
        yield beats
    finally:
        for beat in beats:
            beat.ensure_stopped()


def late_overlaps(store: Store, ran: list[dict[str, Any]]) -> set[str]:
    """The occurrences skipped behind a run of the same job's occurrence a second before,
    which began at or after this one was due: on a loaded machine an every-second run can
    start late, and its overlap lock then makes the next occurrence skip (overlap="skip",
    as the job asks). Each is proven from the skip's record (the holder it names) and the
    journal (when the holder began); any other skip is not in it."""
    began = {line["occurrence_id"]: line["at"] for line in ran}
    found = set()
    for job in JOBS:
        for record in store.history(job, 1000):
            if record.outcome != "skipped-overlap":
                continue
            this = Occurrence.parse(record.occurrence_id)
            before = Occurrence(job=job, scheduled_at=this.scheduled_at - timedelta(seconds=1))
            held = (record.reason or "").startswith(f"held by {before.id} on ")
            if held and began.get(before.id, 0) >= this.scheduled_at.timestamp():
                found.add(this.id)
    return found


def started_at(beat: BeatProcess, said: str) -> datetime:
    """When the beat's log says ``said`` (its first line saying it), from the line's stamp."""
    line = next(line for line in beat.output().splitlines() if said in line)
    stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    return stamp.astimezone(UTC)  # the log's stamps are local times


def wait_until_live(url: str, count: int) -> None:
    store = store_from_url(url)
    try:
        wait_for(lambda: len(store.replicas()) >= count, 30, f"{count} live replicas")
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["redis", "valkey", "postgres", "sqlite", "nats"])
def test_three_replicas_run_every_occurrence_exactly_once(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """20 jobs every second for 20 s on 3 beats: one completed and two skipped-claimed each,
    the skips from the losers' ledgers: the store holds no record per lost claim. On a loaded
    machine a run can start more than a second late and hold the overlap lock when the next
    occurrence comes due, which then skips as overlap="skip" says: only where its record names
    that late run (``late_overlaps``)."""
    kit = make_kit(kind, request, tmp_path)
    notes = tmp_path / "journal.jsonl"
    with live_beats("tests.apps.many", kit.url, tmp_path, command_env(notes)) as beats:
        began = time.time()
        time.sleep(20)
        ended = time.time()
        assert all(b.process and b.process.poll() is None for b in beats), "a beat died"
        for beat in beats:
            beat.terminate()
    store = kit.open()
    outcomes = outcomes_by_occurrence(store, JOBS)
    window = seconds_between(began + 1, ended - 1)
    assert len(window) >= 17
    overlapped = late_overlaps(store, journal.read(notes))
    request.node.user_properties.append(
        ("skipped behind a late run of the second before", len(overlapped))
    )
    for job in JOBS:
        for at in window:
            occurrence = Occurrence(job=job, scheduled_at=at).id
            ran = "skipped-overlap" if occurrence in overlapped else "completed"
            assert outcomes.get(occurrence) == Counter({ran: 1, "skipped-claimed": 2}), (
                occurrence,
                outcomes.get(occurrence),
            )
    assert all(c["completed"] <= 1 for c in outcomes.values())
    stored = Counter(r.outcome for job in JOBS for r in store.history(job, 1000))
    assert set(stored) <= {"completed", "skipped-overlap"}, stored
    for job in JOBS:  # the audit still proves one run per occurrence
        found = audit(store, job, window[0] - timedelta(seconds=1), window[-1], Every("1s"))
        skipped = {o for o in overlapped if o.startswith(f"{job}@")}
        assert not found.more and found.once == len(window) - len(skipped), found.to_json()
        assert {o for ids in found.never.values() for o in ids} <= skipped, found.to_json()
    report = occurrence_report(store, Occurrence(job=JOBS[0], scheduled_at=window[0]))
    assert Counter(r.outcome for r in report.records) == Counter(
        completed=1, **{"skipped-claimed": 2}
    ), report.to_json()
    assert len({r.replica for r in report.records}) == 3
    ran = Counter(line["occurrence_id"] for line in journal.read(notes))
    assert ran and max(ran.values()) == 1, ran.most_common(3)
    assert sum(ran.values()) == sum(c["completed"] for c in outcomes.values())


@pytest.mark.parametrize("kind", ["redis", "postgres", "sqlite", "nats"])
def test_a_replica_killed_halfway_doubles_nothing(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """SIGKILL one of 3 beats after 10 s and restart it: no occurrence runs twice, and the only
    occurrences without a run are ones the killed replica had begun when it died (what it
    claimed and had not begun is taken over by the others, and runs), a tick's worth at most
    of those it had settled and was about to begin, and ones skipped for overlap while the
    overlap lock of a run it died in was still held."""
    kit = make_kit(kind, request, tmp_path)
    notes = tmp_path / "journal.jsonl"
    with live_beats("tests.apps.many", kit.url, tmp_path, command_env(notes)) as beats:
        began = time.time()
        time.sleep(10)
        beats[0].kill()
        killed_at = time.time()
        beats[0].start()
        time.sleep(10)
        ended = time.time()
        for beat in beats:
            beat.terminate()
    store = kit.open()
    outcomes = outcomes_by_occurrence(store, JOBS)
    assert all(c["completed"] <= 1 for c in outcomes.values())
    shown: dict[str, dict[str, str]] = {}  # occurrence -> replica -> outcome, as history shows
    for job in JOBS:
        for record in lost_claims.history(store, job, 1000):
            shown.setdefault(record.occurrence_id, {})[record.replica] = record.outcome
    ran = Counter(line["occurrence_id"] for line in journal.read(notes))
    assert max(ran.values()) == 1, ran.most_common(3)
    lost: list[Occurrence] = []
    unbegun: list[Occurrence] = []  # settled, and killed before the handler's first line
    blocked: list[Occurrence] = []
    for job in JOBS:
        died_in: Occurrence | None = None
        for at in seconds_between(began + 1, ended - 1):
            occurrence = Occurrence(job=job, scheduled_at=at)
            found = outcomes.get(occurrence.id, Counter())
            if found["completed"] == 1:
                continue
            if store.claimed_by(occurrence) == "beat0-1":
                # Claimed by the killed process, in the moment it died, and begun (its pending
                # send settled): nobody else may run it.
                assert abs(at.timestamp() - killed_at) < 3, occurrence.id
                lost.append(occurrence)
                if not ran[occurrence.id]:
                    unbegun.append(occurrence)
                died_in = occurrence
            else:
                # The killed process died inside a run: its overlap lock lives on for lock_ttl
                # (30 s), and the replica that claims each next occurrence says so. The others
                # stood aside: the replicas never killed, and the restarted one once it was
                # claiming; never the killed process, after its death.
                by = shown.get(occurrence.id, {})
                (winner,) = [r for r, outcome in by.items() if outcome == "skipped-overlap"]
                aside_of = {r for r, outcome in by.items() if outcome == "skipped-claimed"}
                assert +found == Counter(
                    {"skipped-overlap": 1, "skipped-claimed": len(aside_of)}
                ), (occurrence.id, by)
                assert {"beat1-1", "beat2-1"} - {winner} <= aside_of, (occurrence.id, by)
                assert aside_of <= {"beat1-1", "beat2-1", "beat0-2"} - {winner}, (occurrence.id, by)
                assert died_in is not None, occurrence.id
                assert at - died_in.scheduled_at <= timedelta(seconds=30), occurrence.id
                blocked.append(occurrence)
    request.node.user_properties.append(("lost in flight on the killed replica", len(lost)))
    request.node.user_properties.append(("of those, not yet begun", len(unbegun)))
    request.node.user_properties.append(("skipped for the dead run's overlap lock", len(blocked)))
    assert len(lost) <= len(JOBS)
    assert len(unbegun) <= len(JOBS)


def test_catch_up_after_every_replica_was_down(tmp_path: Path, redis_server: RedisServer) -> None:
    """All beats stopped across several occurrences, three restarted together: the run-once job
    runs its latest missed occurrence once (trigger misfire), the skip job records them missed,
    and a job the store has never seen is not caught up on."""
    url = f"{redis_server.url}?prefix=catchup{time.time_ns()}:"
    notes = tmp_path / "journal.jsonl"
    beats = start_beats("tests.apps.catchup", url, tmp_path, command_env(notes))
    store = store_from_url(url)
    try:
        wait_for(
            lambda: len(store.last_claimed(["catchup.once", "catchup.skip"])) == 2,
            30,
            "both jobs to have run",
        )
        for beat in beats:
            beat.terminate()
        stopped = time.time()
        last_before = store.last_claimed(["catchup.once"])["catchup.once"]
        time.sleep(7)
        restarted = time.time()
        beats = start_beats(
            "tests.apps.catchup", url, tmp_path, command_env(notes, CB_TEST_NEW_JOB="1")
        )
        # Not wait_until_live: the stopped replicas' heartbeats (same ids) are live for a while
        # yet, and on a loaded machine the new processes take seconds to start.
        wait_for(
            lambda: all(beat.output().count("started with 3 jobs") for beat in beats),
            60,
            "the three replicas restarted",
        )
        time.sleep(3)
        for beat in beats:
            beat.terminate()
    finally:
        for beat in beats:
            beat.ensure_stopped()
    once = records_of(store, ["catchup.once"])
    misfires = [r for r in once if r.trigger == "misfire" and r.outcome == "completed"]
    seen = [(r.occurrence_id, r.outcome, r.trigger) for r in once]
    if misfires:
        assert len(misfires) == 1, seen
        rerun = Occurrence.parse(misfires[0].occurrence_id).scheduled_at
    else:
        # The replicas came back within misfire_grace (500 ms) of an occurrence, which one in
        # four restarts does: that occurrence runs on time and stands in for the misfire run
        # (run-once runs the latest missed occurrence unless an on-time one runs anyway).
        ran = [r for r in once if r.trigger == "schedule" and r.outcome == "completed"]
        times = sorted(Occurrence.parse(r.occurrence_id).scheduled_at for r in ran)
        on_time = [t for t in times if t > last_before]
        assert on_time, seen
        rerun = on_time[0]
        assert rerun > datetime.fromtimestamp(restarted - 1, UTC), seen
    # The catch-up is what the first replica back found missed (or, back within the grace, the
    # next occurrence): within one period of its start, however long the start took.
    first_up = min(started_at(beat, "started with 3 jobs") for beat in beats)
    assert last_before < rerun <= first_up + timedelta(seconds=2.5), (seen, first_up)
    missed_before = [r for r in once if r.outcome == "missed"]
    assert missed_before, "the earlier missed occurrences are recorded missed"
    assert all(Occurrence.parse(r.occurrence_id).scheduled_at < rerun for r in missed_before)
    assert len({r.occurrence_id for r in missed_before}) == len(missed_before)  # once each
    skipped = records_of(store, ["catchup.skip"])
    missed = Counter(r.occurrence_id for r in skipped if r.outcome == "missed")
    assert len(missed) >= 2 and max(missed.values()) == 1, missed
    # Missed: due while every replica was down, from the stop until the first was back
    # (however long its start took on a loaded machine).
    gap = [datetime.fromtimestamp(stopped, UTC), first_up + timedelta(seconds=2.5)]
    for occurrence_id in missed:
        assert gap[0] - timedelta(seconds=2) < Occurrence.parse(occurrence_id).scheduled_at
        assert Occurrence.parse(occurrence_id).scheduled_at <= gap[1], (occurrence_id, gap)
    assert not [r for r in skipped if r.trigger == "misfire"]
    new = records_of(store, ["catchup.new"])
    assert new, "the new job runs from its next occurrence"
    assert all(r.trigger == "schedule" and r.outcome != "missed" for r in new)
    assert all(Occurrence.parse(r.occurrence_id).scheduled_at.timestamp() > restarted for r in new)
    store.close()


def test_overlapping_runs_are_skipped_across_replicas(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """A 2.5 s job every second on 3 beats: no two runs overlap; the rest are skipped-overlap."""
    url = f"{redis_server.url}?prefix=overlap{time.time_ns()}:"
    notes = tmp_path / "journal.jsonl"
    with live_beats("tests.apps.overlap", url, tmp_path, command_env(notes)) as beats:
        time.sleep(10)
        for beat in beats:
            beat.terminate()
    lines = journal.read(notes)
    starts = {line["occurrence_id"]: line["at"] for line in lines if line["event"] == "start"}
    ends = {line["occurrence_id"]: line["at"] for line in lines if line["event"] == "end"}
    runs = sorted((starts[o], ends.get(o, math.inf)) for o in starts)
    assert len(runs) >= 3
    for (_, previous_end), (next_start, _) in itertools.pairwise(runs):
        assert next_start >= previous_end, runs
    store = store_from_url(url)
    outcomes = Counter(r.outcome for r in store.history("slow.overlap", 1000))
    assert outcomes["skipped-overlap"] >= 2 * outcomes["completed"] - 2, outcomes
    per_occurrence = outcomes_by_occurrence(store, ["slow.overlap"])
    for counts in per_occurrence.values():
        assert counts["completed"] + counts["skipped-overlap"] + counts["aborted"] <= 1, counts
    store.close()


def test_a_deleted_lock_aborts_the_run_with_lock_lost(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """Deleting the overlap lock in the store during a run aborts ctx.signal within lock_ttl."""
    prefix = f"lost{time.time_ns()}:"
    url = f"{redis_server.url}?prefix={prefix}"
    notes = tmp_path / "journal.jsonl"
    (beat,) = start_beats("tests.apps.long", url, tmp_path, command_env(notes), count=1)
    client = redis.Redis(port=redis_server.port)
    try:
        wait_for(lambda: any(x["event"] == "start" for x in journal.read(notes)), 30, "a run")
        assert client.delete(f"{prefix}active:long.run") == 1
        deleted = time.time()
        wait_for(lambda: any(x["event"] == "aborted" for x in journal.read(notes)), 10, "abort")
        beat.terminate()
    finally:
        beat.ensure_stopped()
        client.close()
    (aborted,) = [x for x in journal.read(notes) if x["event"] == "aborted"]
    assert aborted["reason"] == "lock-lost"
    assert aborted["at"] - deleted <= 3 + 1  # lock_ttl is 3 s; heartbeats every second
    store = store_from_url(url)
    records = [
        r for r in store.history("long.run", 100) if r.occurrence_id == aborted["occurrence_id"]
    ]
    assert [(r.outcome, r.reason) for r in records] == [("aborted", "lock-lost")]
    store.close()


def test_sigterm_aborts_a_long_run_with_shutdown_and_keeps_the_claim(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """SIGTERM mid-run: the handler sees ``shutdown``, the beat exits within shutdown_timeout
    + 2 s, the overlap lock is gone and the claim stays."""
    prefix = f"term{time.time_ns()}:"
    url = f"{redis_server.url}?prefix={prefix}"
    notes = tmp_path / "journal.jsonl"
    (beat,) = start_beats(
        "tests.apps.long",
        url,
        tmp_path,
        command_env(notes),
        count=1,
        extra=["--shutdown-timeout", "3s"],
    )
    client = redis.Redis(port=redis_server.port, decode_responses=True)
    try:
        wait_for(lambda: any(x["event"] == "start" for x in journal.read(notes)), 30, "a run")
        took = beat.terminate()
    finally:
        beat.ensure_stopped()
    assert beat.process is not None and beat.process.returncode == 0, beat.output()
    assert took <= 3 + 2, took
    (aborted,) = [x for x in journal.read(notes) if x["event"] == "aborted"]
    assert aborted["reason"] == "shutdown"
    assert client.exists(f"{prefix}active:long.run") == 0
    occurrence = Occurrence.parse(aborted["occurrence_id"])
    assert client.get(f"{prefix}{occurrence.claim_key}") == aborted["replica"]
    client.close()


def test_a_redis_outage_pauses_cluster_jobs_and_doubles_nothing(tmp_path: Path) -> None:
    """Redis stopped for 5 s under 3 beats: nothing runs unclaimed, nothing runs twice after it
    returns, the beats keep running and each logs the outage once."""
    server = RedisServer(persist=True)
    try:
        server.start()
    except Exception as exc:
        pytest.skip(f"redis-server could not be started: {exc}")
    url = f"{server.url}?prefix=outage:&connect_timeout=1"
    notes = tmp_path / "journal.jsonl"
    env = command_env(notes, CB_TEST_JOBS="5")
    beats = start_beats("tests.apps.many", url, tmp_path, env)
    jobs = JOBS[:5]
    try:
        wait_until_live(url, 3)
        began = time.time()
        time.sleep(4)
        server.stop()
        down = time.time()
        time.sleep(5)
        server.start()
        back = time.time()
        time.sleep(6)
        ended = time.time()
        assert all(b.process and b.process.poll() is None for b in beats), "a beat died"
        for beat in beats:
            beat.terminate()
        store = store_from_url(url)
        lines = [x for x in journal.read(notes) if x["event"] == "ran"]
        ran = Counter(x["occurrence_id"] for x in lines)
        assert max(ran.values()) == 1, ran.most_common(3)
        for line in lines:
            owner = store.claimed_by(Occurrence.parse(line["occurrence_id"]))
            assert owner == line["replica"], line
        after = [x for x in lines if x["at"] > back + 1]
        assert after, "jobs run again once the store is back"
        outcomes = outcomes_by_occurrence(store, jobs)
        assert all(c["completed"] <= 1 for c in outcomes.values())
        # The gap is claimed once the store is back: each occurrence gets one outcome from its
        # claimer (the backlog of one job runs once, the rest skipped-overlap). Only
        # occurrences claimed in the instant it went down (whose run could not take its lock)
        # stay without one.
        decided = ("completed", "skipped-overlap", "failed", "missed")
        for job in jobs:
            for at in seconds_between(began + 1, ended - 1):
                occurrence = Occurrence(job=job, scheduled_at=at)
                counts = outcomes.get(occurrence.id, Counter())
                assert sum(counts[o] for o in decided) <= 1, (occurrence.id, counts)
                if sum(counts[o] for o in decided) == 0:
                    assert store.claimed_by(occurrence) is not None, occurrence.id
                    assert abs(at.timestamp() - down) < 2, occurrence.id
        store.close()
    finally:
        for beat in beats:
            beat.ensure_stopped()
        server.remove()
    for beat in beats:
        output = beat.output()
        assert output.count("store unavailable") == 1, output[-3000:]
        assert output.count("store reachable again") == 1, output[-3000:]
