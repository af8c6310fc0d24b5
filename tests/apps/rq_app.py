"""An RQ app for the end-to-end tests: a queue by name, its Redis from RQ_REDIS_URL."""

from __future__ import annotations

from typing import Any

from cron_bridge import JobContext, cluster_task
from tests.apps import scenarios


@cluster_task(
    name=scenarios.JOB, queue=scenarios.QUEUE, kwargs={"source": "beat"}, **scenarios.options()
)
def job(ctx: JobContext, **kwargs: Any) -> str:
    return scenarios.handle(ctx, **kwargs)
