"""A replica killed in the middle of its share of a burst loses nothing: real beats, a real
Celery worker and a real store. What it claimed and had not sent is pending its send; the
live replicas take it over once its lease runs out and send it, marked as possibly sent
before, and the worker refuses the copies of what the dead one did send."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from cron_bridge.jobs import Occurrence
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


def test_a_replica_killed_mid_send_of_a_ten_thousand_job_burst_loses_nothing(
    request: pytest.FixtureRequest, tmp_path: Path, redis_server: RedisServer
) -> None:
    """Three beats, 10,000 Celery jobs due at one second; one beat publishes slowly and is
    SIGKILLed a second into the burst, with thousands claimed and not sent: every one of the
    10,000 occurrences runs exactly once, those it left taken over by the others."""
    kit = make_kit("redis", request, tmp_path)
    notes = tmp_path / "journal.jsonl"
    queue = f"burst-{tmp_path.name[-12:]}"
    broker = f"redis://127.0.0.1:{redis_server.port}/1"
    due = float(int(time.time()) + 25)  # the beats import 10,000 tasks first
    env = command_env(
        notes,
        CB_BURST_N=str(N),
        CB_BURST_AT=str(due),
        CB_TEST_BROKER=broker,
        CB_TEST_QUEUE=queue,
        CRON_BRIDGE_STORE=kit.url,
    )
    app = "tests.apps.burst"
    slow = BeatProcess(
        "beat0", tmp_path, {**env, "CB_SLOW_SEND": "0.002"}, app=app, store_url=kit.url
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
    try:
        for service in services:
            service.start()
        wait_for(lambda: len(store.replicas()) >= 3, 60, "three live replicas")
        assert time.time() < due - 1, "the beats took too long to start"
        wait_for(lambda: time.time() >= due + 1.0, 30, "a second into the burst", every=0.01)
        slow.kill()
        killed = Counter(
            store.claimed_by_many(
                [
                    Occurrence(job=f"burst.{n:05d}", scheduled_at=datetime.fromtimestamp(due, UTC))
                    for n in range(N)
                ]
            )
        )
        wait_for(lambda: len(journal.read(notes)) >= N, 240, "every occurrence run", every=1.0)
        # The copies of what the dead one sent, and the taken over sends, all delivered:
        # each refused by the worker's guard, none run (counted below).
        wait_for(lambda: drained(broker, queue), 120, "the queue drained", every=0.5)
    finally:
        stop_together(services, lambda service: 30)
    runs = Counter(line["occurrence_id"] for line in journal.read(notes))
    expected = {
        Occurrence(job=f"burst.{n:05d}", scheduled_at=datetime.fromtimestamp(due, UTC)).id
        for n in range(N)
    }
    assert set(runs) == expected
    assert max(runs.values()) == 1, runs.most_common(3)
    records = [r for n in range(N) for r in store.history(f"burst.{n:05d}", 5)]
    taken = [r for r in records if r.reason == "taken over from beat0-1"]
    refused = Counter(r.outcome for r in records if r.outcome.startswith("skipped-"))
    request.node.user_properties.append(("claimed by the killed replica", killed["beat0-1"]))
    request.node.user_properties.append(("taken over", len(taken)))
    request.node.user_properties.append(("copies refused on the worker", dict(refused)))
    assert killed["beat0-1"] > 0, killed
    assert len(taken) > 0
    store.close()
