"""An RQ app for the end-to-end tests: a queue by name, its Redis from RQ_REDIS_URL."""

from __future__ import annotations

from typing import Any

from cron_bridge import JobContext, cluster_task
from tests.apps import scenarios

if scenarios.SCENARIO == "async":

    @cluster_task(
        name=scenarios.JOB, queue=scenarios.QUEUE, kwargs={"source": "beat"}, **scenarios.options()
    )
    async def job(ctx: JobContext, **kwargs: Any) -> str:
        return await scenarios.handle_async(ctx, **kwargs)

else:

    @cluster_task(
        name=scenarios.JOB, queue=scenarios.QUEUE, kwargs={"source": "beat"}, **scenarios.options()
    )
    def job(ctx: JobContext, **kwargs: Any) -> str:
        return scenarios.handle(ctx, **kwargs)
