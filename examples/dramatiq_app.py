"""Dramatiq: ``dramatiq examples.dramatiq_app`` runs the jobs the beat enqueues.

The broker is ``$DRAMATIQ_REDIS_URL``; workers and beats read the store from
``$CRON_BRIDGE_STORE``.
"""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from cron_bridge import Backoff, JobContext, cluster_task

broker = RedisBroker(url=os.environ.get("DRAMATIQ_REDIS_URL", "redis://localhost:6379/0"))
dramatiq.set_broker(broker)


@cluster_task(cron="0 */6 * * *", tz="Asia/Tokyo")
@dramatiq.actor(actor_name="dramatiq.rotate_keys")
def rotate_keys(ctx: JobContext) -> None:
    """Every 6 hours on Tokyo's clock."""
    ctx.logger.info("rotating keys for %s", ctx.occurrence_id)


@cluster_task(every="5s")
@dramatiq.actor(actor_name="dramatiq.heartbeat")
def heartbeat(ctx: JobContext) -> None:
    """Every 5 seconds."""


@cluster_task(every="10s", attempts=3, backoff=Backoff.fixed(1))
@dramatiq.actor(actor_name="dramatiq.sync_users")
def sync_users(ctx: JobContext) -> None:
    """Fails its first attempt on purpose: Dramatiq retries it 1 s later."""
    if ctx.attempt == 1:
        raise ConnectionError("the directory service timed out")


@cluster_task(every="5s", lock_ttl="3s")
@dramatiq.actor(actor_name="dramatiq.reindex")
def reindex(ctx: JobContext) -> None:
    """Takes 7 s, due every 5 s: the occurrence that comes while it runs is skipped-overlap."""
    if ctx.signal.wait(7):
        ctx.signal.raise_if_aborted()
