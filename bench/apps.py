"""The apps the benchmarks run, configured by environment variables.

- ``BENCH_LIB``: celery, rq or dramatiq; ``BENCH_N`` jobs; ``BENCH_QUEUE`` the queue;
  ``BENCH_BROKER`` the broker's Redis URL.
- ``BENCH_AT``: a Unix time; every job is due then (an hourly interval with that offset), so
  the beats see one burst of ``BENCH_N`` occurrences.
- ``BENCH_EVERY``: instead of a burst, every job runs at this interval (failover, idle).
- ``BENCH_SPREAD=1``: instead of a burst, the jobs are hourly, spread evenly over the hour
  (scale).
- ``BENCH_PEER=1``: declare nothing for cron-bridge, only the Celery ``beat_schedule`` that
  celery beat and RedBeat read (a crontab at ``BENCH_AT``'s minute, or ``BENCH_EVERY``).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any

LIB = os.environ.get("BENCH_LIB", "celery")
N = int(os.environ.get("BENCH_N", "100"))
QUEUE = os.environ.get("BENCH_QUEUE", "bench")
BROKER = os.environ.get("BENCH_BROKER", "redis://127.0.0.1:6379/0")
AT = float(os.environ.get("BENCH_AT", "0"))
EVERY = os.environ.get("BENCH_EVERY")
PEER = os.environ.get("BENCH_PEER") == "1"
SPREAD = os.environ.get("BENCH_SPREAD") == "1"


def schedule_options(n: int = 0) -> dict[str, Any]:
    if EVERY:
        return {"every": EVERY}
    if SPREAD:  # hourly, the N jobs spread evenly over the hour from BENCH_AT
        return {"every": "1h", "offset": f"{int(AT + n * 3600 / N) % 3600}s"}
    return {"every": "1h", "offset": f"{int(AT) % 3600}s"}


def task_body(*args: Any, **kwargs: Any) -> None:
    """What every benchmark task does: nothing."""


if LIB == "celery":
    from celery import Celery
    from celery.schedules import crontab

    app = Celery("bench", broker=BROKER)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        task_default_queue=QUEUE,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        redbeat_redis_url=BROKER,
        redbeat_key_prefix=f"redbeat-{QUEUE}",
    )
    if os.environ.get("BENCH_REDBEAT_LOCK"):  # RedBeat tuned for failover
        app.conf.redbeat_lock_timeout = int(os.environ["BENCH_REDBEAT_LOCK"])
        # Standby replicas ask for the lock every max_interval (300 s by default).
        app.conf.beat_max_loop_interval = 1

    @app.task(name="bench.noop")
    def noop(*args: Any, **kwargs: Any) -> None:
        return None

    if PEER:
        when: Any
        if EVERY:
            when = timedelta(seconds=float(EVERY.removesuffix("s")))
        else:
            due = datetime.fromtimestamp(AT, UTC)
            when = crontab(minute=due.minute, hour=due.hour)
        app.conf.timezone = "UTC"
        app.conf.beat_schedule = {
            f"bench.job{n:05d}": {"task": "bench.noop", "schedule": when} for n in range(N)
        }
    else:
        from cron_bridge import cluster_task

        for n in range(N):  # a task per job, as in a real app
            task = app.task(name=f"bench.job{n:05d}")(task_body)
            cluster_task(**schedule_options(n))(task)

elif LIB == "rq":
    from cron_bridge import cluster_task

    for n in range(N):
        cluster_task(name=f"bench.job{n:05d}", queue=QUEUE, **schedule_options(n))(task_body)

elif LIB == "dramatiq":
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    from cron_bridge import cluster_task

    dramatiq.set_broker(RedisBroker(url=BROKER))

    for n in range(N):  # an actor per job, as in a real app
        actor = dramatiq.actor(actor_name=f"bench.job{n:05d}", queue_name=QUEUE)(task_body)
        cluster_task(**schedule_options(n))(actor)
