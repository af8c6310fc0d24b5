"""A replica killed in the middle of its share of a burst loses nothing: real beats, a real
Celery worker and a real store. What it claimed and had not sent is pending its send; the
live replicas take it over once its lease runs out and send it, marked as possibly sent
before, and the worker refuses the copies of what the dead one did send."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from cron_bridge.jobs import Occurrence
from cron_bridge.stores import RunRecord
from tests.apps import journal
from tests.conftest import make_kit
from tests.e2e.processes import BeatProcess, Worker, command_env, stop_together
from tests.servers import RedisServer
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

N = 10_000


def drained(broker: str, queue: str) -> bool:
    """Whether the Celery queue holds nothing, queued or delivered and not acknowledged."""
    client = redis.Redis.from_url(broker)
    try:
        return client.llen(queue) == 0 and client.hlen("unacked") == 0
    finally:
        client.close()


@dataclass
class Burst:
    """What a burst left: each occurrence's runs, the records the store kept, who claimed
    what when the slow beat was killed."""

    expected: set[str]
    runs: Counter[str]
    records: list[RunRecord]
    claimed: Counter[str | None]
    claimed_by_killed: set[str]


def burst(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    redis_server: RedisServer,
    n: int,
    slow: float = 0.002,
    **env: str,
) -> Burst:
    """Three beats, ``n`` Celery jobs due at one second; one beat publishes slowly (``slow``
    seconds a message) and is SIGKILLed a second into the burst, with many claimed and not
    sent: its share takes several seconds to send."""
    kit = make_kit("redis", request, tmp_path)
    notes = tmp_path / "journal.jsonl"
    queue = f"burst-{tmp_path.name[-12:]}"
    broker = f"redis://127.0.0.1:{redis_server.port}/1"
    due = float(int(time.time()) + 25)  # the beats import thousands of tasks first
    env = command_env(
        notes,
        CB_BURST_N=str(n),
        CB_BURST_AT=str(due),
        CB_TEST_BROKER=broker,
        CB_TEST_QUEUE=queue,
        CRON_BRIDGE_STORE=kit.url,
        **env,
    )
    app = "tests.apps.burst"
    slow = BeatProcess(
        "beat0", tmp_path, {**env, "CB_SLOW_SEND": str(slow)}, app=app, store_url=kit.url
    )
    beats = [slow] + [
        BeatProcess(f"beat{i}", tmp_path, env, app=app, store_url=kit.url) for i in (1, 2)
    ]
    worker = Worker(
        "worker0",
        tmp_path,
        env,
        library="celery",
        queue=queue,
        broker=broker,
        app=app,
        concurrency=2,
    )
    services = [worker, *beats]
    store = kit.open()
    occurrences = [
        Occurrence(job=f"burst.{i:05d}", scheduled_at=datetime.fromtimestamp(due, UTC))
        for i in range(n)
    ]
    try:
        for service in services:
            service.start()
        wait_for(lambda: len(store.replicas()) >= 3, 60, "three live replicas")
        assert time.time() < due - 1, "the beats took too long to start"
        wait_for(lambda: time.time() >= due + 1.0, 30, "a second into the burst", every=0.01)
        slow.kill()
        owners = store.claimed_by_many(occurrences)
        wait_for(lambda: len(journal.read(notes)) >= n, 240, "every occurrence run", every=1.0)
        # The copies of what the dead one sent, and the taken over sends, all delivered.
        wait_for(lambda: drained(broker, queue), 120, "the queue drained", every=0.5)
    finally:
        stop_together(services, lambda service: 30)
    found = Burst(
        expected={o.id for o in occurrences},
        runs=Counter(line["occurrence_id"] for line in journal.read(notes)),
        records=[r for i in range(n) for r in store.history(f"burst.{i:05d}", 5)],
        claimed=Counter(owners),
        claimed_by_killed={
            o.id for o, owner in zip(occurrences, owners, strict=True) if owner == "beat0-1"
        },
    )
    store.close()
    return found


def test_a_replica_killed_mid_send_of_a_ten_thousand_job_burst_loses_nothing(
    request: pytest.FixtureRequest, tmp_path: Path, redis_server: RedisServer
) -> None:
    """10,000 jobs: every one of the occurrences runs exactly once, those the killed beat
    left taken over by the others, the copies of what it did send refused by the worker."""
    found = burst(request, tmp_path, redis_server, N)
    assert set(found.runs) == found.expected
    assert max(found.runs.values()) == 1, found.runs.most_common(3)
    taken = [r for r in found.records if r.reason == "taken over from beat0-1"]
    refused = Counter(r.outcome for r in found.records if r.outcome.startswith("skipped-"))
    request.node.user_properties.append(("claimed by the killed replica", found.claimed["beat0-1"]))
    request.node.user_properties.append(("taken over", len(taken)))
    request.node.user_properties.append(("copies refused on the worker", dict(refused)))
    assert found.claimed["beat0-1"] > 0, found.claimed
    assert len(taken) > 0


def test_opted_in_a_burst_of_unguarded_jobs_loses_nothing_and_doubles_only_the_dead_ones(
    request: pytest.FixtureRequest, tmp_path: Path, redis_server: RedisServer
) -> None:
    """``CRON_BRIDGE_TAKE_OVER=all`` with jobs nothing on the worker refuses a copy of
    (``overlap="allow"``): every occurrence runs, those the killed beat left taken over; one
    runs twice only where the killed beat had claimed it (a send it made before it died,
    sent again by the replica that took it over), never elsewhere."""
    # 2,000 jobs, about 670 the slow beat's: 10 ms a message, so that it dies with hundreds
    # unsent whatever the machine's load (at 2 ms it could send them all within the second).
    found = burst(
        request,
        tmp_path,
        redis_server,
        2000,
        slow=0.01,
        CB_BURST_OVERLAP="allow",
        CRON_BRIDGE_TAKE_OVER="all",
    )
    assert set(found.runs) == found.expected
    twice = {occurrence for occurrence, count in found.runs.items() if count > 1}
    assert twice <= found.claimed_by_killed, sorted(twice - found.claimed_by_killed)[:3]
    assert max(found.runs.values()) <= 2, found.runs.most_common(3)
    taken = [r for r in found.records if r.reason == "taken over from beat0-1"]
    request.node.user_properties.append(("claimed by the killed replica", found.claimed["beat0-1"]))
    request.node.user_properties.append(("taken over", len(taken)))
    request.node.user_properties.append(("run twice", len(twice)))
    assert found.claimed["beat0-1"] > 0 and len(taken) > 0


def test_a_replica_killed_in_a_retryable_inline_run_leaves_its_next_attempt_to_another(
    request: pytest.FixtureRequest, tmp_path: Path, redis_server: RedisServer
) -> None:
    """An inline job with attempts=2: the beat running its first attempt is SIGKILLed in it.
    The other beat takes the claim over once its lease runs out, counts the attempt the dead
    one made (its lock, not yet expired, names the occurrence), waits for that lock to expire
    (lock_ttl 10 s, past the job's 5 s misfire_grace), and makes attempt 2; nothing else runs
    it."""
    kit = make_kit("redis", request, tmp_path)
    notes = tmp_path / "journal.jsonl"
    due = float(int(time.time()) + 12)
    env = command_env(notes, CB_RETRIED_AT=str(due), CRON_BRIDGE_STORE=kit.url)
    beats = [
        BeatProcess(f"beat{i}", tmp_path, env, app="tests.apps.retried", store_url=kit.url)
        for i in range(2)
    ]
    store = kit.open()
    try:
        for beat in beats:
            beat.start()
        wait_for(lambda: len(store.replicas()) >= 2, 60, "two live replicas")
        wait_for(lambda: journal.read(notes), 60, "the first attempt", every=0.05)
        (first,) = journal.read(notes)
        runner = next(b for b in beats if first["replica"] == f"{b.name}-1")
        runner.kill()
        wait_for(lambda: len(journal.read(notes)) >= 3, 60, "the next attempt", every=0.1)
        time.sleep(1)  # anything more it would have written
    finally:
        stop_together(beats, lambda service: 30)
    lines = [(line["event"], line["attempt"], line["replica"]) for line in journal.read(notes)]
    other = next(b for b in beats if b is not runner)
    assert lines == [
        ("start", 1, first["replica"]),
        ("start", 2, f"{other.name}-1"),
        ("end", 2, f"{other.name}-1"),
    ]
    (record,) = [r for r in store.history("retried.run") if r.attempt == 2]
    assert (record.outcome, record.replica) == ("completed", f"{other.name}-1")
    store.close()
