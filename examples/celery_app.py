"""Celery: ``celery -A examples.celery_app worker`` runs the jobs the beat enqueues.

The broker is ``$CELERY_BROKER_URL``; workers and beats read the store from
``$CRON_BRIDGE_STORE``.
"""

from __future__ import annotations

import os

from celery import Celery

from cron_bridge import Backoff, JobContext, cluster_task

app = Celery("examples", broker=os.environ.get("CELERY_BROKER_URL", "redis://localhost:6379/0"))
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    # A worker that dies mid-run gets its message back (see docs/guarantee.md).
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
)


@cluster_task(cron="0 3 * * *", tz="Europe/Warsaw", attempts=5, backoff=Backoff.exponential(2))
@app.task(name="billing.close_day")
def close_day(ctx: JobContext) -> str:
    """Every night at 03:00 Warsaw time, once across the cluster, retried up to 5 times."""
    for account in ("acme", "globex", "initech"):
        ctx.signal.raise_if_aborted()  # stop between accounts on shutdown or lock loss
        ctx.logger.info("closing %s with idempotency key %s", account, ctx.occurrence_id)
    return "closed"


@cluster_task(every="5s")
@app.task(name="celery.heartbeat")
def heartbeat(ctx: JobContext) -> str:
    """Every 5 seconds, anchored to the epoch so every replica agrees on the times."""
    ctx.logger.info("alive at %s", ctx.scheduled_at)
    return "ok"


@cluster_task(every="10s", attempts=3, backoff=Backoff.fixed(1))
@app.task(name="celery.sync_rates")
def sync_rates(ctx: JobContext) -> str:
    """Fails its first attempt on purpose: Celery retries it 1 s later (``ctx.attempt`` 2)."""
    if ctx.attempt == 1:
        raise ConnectionError("the rates service timed out")
    return "rates synced"


@cluster_task(every="5s", overlap="skip", lock_ttl="3s")
@app.task(name="celery.rebuild_search")
def rebuild_search(ctx: JobContext) -> str:
    """Takes 7 s, due every 5 s: the occurrence that comes while it runs is skipped-overlap."""
    if ctx.signal.wait(7):  # returns early when the run is aborted
        ctx.signal.raise_if_aborted()
    return "rebuilt"


@cluster_task(cron="0 1 1 * *", on_demand=True)
@app.task(name="reports.monthly_export")
def monthly_export(ctx: JobContext) -> str:
    """Not armed by the beat: a CronJob runs ``cron-bridge run reports.monthly_export``."""
    return f"exported {ctx.scheduled_at:%Y-%m}"
