"""RQ: ``rq worker examples --with-scheduler --serializer rq.serializers.JSONSerializer``.

The queue's Redis is ``$RQ_REDIS_URL``; workers and beats read the store from
``$CRON_BRIDGE_STORE``. Retries wait in RQ's scheduled registry, so start the worker
``--with-scheduler``.
"""

from __future__ import annotations

from cron_bridge import Backoff, JobContext, cluster_task

QUEUE = "examples"


@cluster_task(cron="30 6 * * mon-fri", tz="America/New_York", queue=QUEUE, name="rq.morning_digest")
def morning_digest(ctx: JobContext) -> str:
    """Weekdays at 06:30 New York time."""
    ctx.logger.info("sending the digest for %s", ctx.scheduled_at.date())
    return "sent"


@cluster_task(every="5s", queue=QUEUE, name="rq.heartbeat")
def heartbeat(ctx: JobContext) -> str:
    """Every 5 seconds."""
    return "ok"


@cluster_task(every="10s", queue=QUEUE, attempts=3, backoff=Backoff.fixed(1), name="rq.sync_stock")
def sync_stock(ctx: JobContext) -> str:
    """Fails its first attempt on purpose: RQ retries it (whole seconds, so about 2 s later)."""
    if ctx.attempt == 1:
        raise ConnectionError("the warehouse API timed out")
    return "synced"


@cluster_task(every="5s", queue=QUEUE, lock_ttl="3s", name="rq.compact")
def compact(ctx: JobContext) -> str:
    """Takes 7 s, due every 5 s: the occurrence that comes while it runs is skipped-overlap."""
    if ctx.signal.wait(7):
        ctx.signal.raise_if_aborted()
    return "compacted"
