"""A bare task and the same task under the guard, per library, for the guard overhead.

Both bodies append their finishing time to a Redis list, so the difference between the two is
what the guard costs: the overlap lock (acquire, heartbeat thread, release), the context and
the run record; and, for the guarded task sent as the beat sends it (``ctx.trigger ==
"queue"``, its own list ``sent``), the completion mark read and written.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis

from cron_bridge import cluster_task

LIB = os.environ.get("BENCH_LIB", "celery")
QUEUE = os.environ.get("BENCH_QUEUE", "guard")
BROKER = os.environ.get("BENCH_BROKER", "redis://127.0.0.1:6379/0")
_done = redis.Redis.from_url(BROKER)


def finished(kind: str) -> None:
    _done.rpush(f"{QUEUE}:{kind}", time.time())


def finished_guarded(ctx: Any) -> None:
    finished("sent" if ctx.trigger == "queue" else "guarded")


if LIB == "celery":
    from celery import Celery

    app = Celery("guard", broker=BROKER)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        task_default_queue=QUEUE,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )

    @app.task(name="guard.bare")
    def bare() -> None:
        finished("bare")

    @cluster_task(every="1h", on_demand=True)
    @app.task(name="guard.guarded")
    def guarded(ctx: Any) -> None:
        finished_guarded(ctx)

elif LIB == "dramatiq":
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    dramatiq.set_broker(RedisBroker(url=BROKER))

    @dramatiq.actor(actor_name="guard.bare", queue_name=QUEUE)
    def bare() -> None:
        finished("bare")

    @cluster_task(every="1h", on_demand=True)
    @dramatiq.actor(actor_name="guard.guarded", queue_name=QUEUE)
    def guarded(ctx: Any) -> None:
        finished_guarded(ctx)

else:

    def bare() -> None:
        finished("bare")

    @cluster_task(every="1h", on_demand=True, queue=QUEUE)
    def guarded(ctx: Any) -> None:
        finished_guarded(ctx)
