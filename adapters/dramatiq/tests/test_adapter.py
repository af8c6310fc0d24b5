"""The Dramatiq adapter on the seam: actors named and sent."""

from __future__ import annotations

from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker
from redis import Redis

from cron_bridge import Registry, cluster_task
from cron_bridge.queues.installed import get_adapter
from tests.batches import a_batch, report

pytestmark = pytest.mark.extras  # the adapter and its queue library


def test_a_dramatiq_actor_becomes_a_queue_job() -> None:
    """``@cluster_task`` over an actor takes the actor name and queue name."""
    registry = Registry()

    def sync(ctx: Any) -> None:
        pass

    actor = dramatiq.actor(sync, broker=StubBroker(), actor_name="sync_accounts", queue_name="ops")
    cluster_task(every="5m", registry=registry)(actor)
    job = registry.get("sync_accounts")
    assert job is not None
    assert (job.adapter, job.task, job.queue) == ("dramatiq", "sync_accounts", "ops")


def test_dramatiq_sends_a_large_batch_from_two_threads_answers_in_order(
    redis_server: Any,
) -> None:
    """A large batch goes to Dramatiq from ``THREADS`` threads (one waits on the broker's
    answer while another sends); every message lands once, and each answer stays with its
    dispatch: the sends to a broker that is down fail, in their places, and only those."""
    import json
    import uuid

    from dramatiq.brokers.redis import RedisBroker

    up = RedisBroker(url=redis_server.url, namespace=f"dq-{uuid.uuid4().hex[:6]}")
    down = RedisBroker(url="redis://127.0.0.1:9/0", socket_timeout=0.2)  # discard port: refused
    registry = Registry()
    good = dramatiq.actor(report, broker=up, actor_name="good_actor", queue_name="good")
    bad = dramatiq.actor(report, broker=down, actor_name="bad_actor", queue_name="bad")
    cluster_task(every="1m", registry=registry)(good)
    cluster_task(every="1m", registry=registry)(bad)
    jobs = {job.name: job for job in registry.jobs()}
    dispatches, failing = a_batch(jobs, "good_actor", "bad_actor", every=7)
    answers = get_adapter("dramatiq").enqueue_many(dispatches)
    assert [n for n, answer in enumerate(answers) if answer is not None] == sorted(failing)
    sent = Redis.from_url(redis_server.url).hvals(f"{up.namespace}:good.msgs")
    ids = [json.loads(raw)["options"]["cron_bridge"]["occurrence_id"] for raw in sent]
    assert sorted(ids) == sorted(
        d.occurrence.id for n, d in enumerate(dispatches) if n not in failing
    )
    assert len(ids) == len(set(ids)) == len(dispatches) - len(failing)
