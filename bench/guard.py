"""Guard overhead: time per task of a guarded task against the same bare task, on a warm
worker of each library (one at a time: Celery solo, RQ's SimpleWorker, Dramatiq 1 thread)."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import redis

from bench.harness import BIN, TREE, Proc, env
from bench.run import log_dir


def guard_overhead(library: str, broker: str, store: str, count: int = 300) -> dict[str, object]:
    queue = f"guard-{uuid.uuid4().hex[:6]}"
    values = {
        "BENCH_LIB": library,
        "BENCH_QUEUE": queue,
        "BENCH_BROKER": broker,
        "CRON_BRIDGE_STORE": store,
        "RQ_REDIS_URL": broker,
    }
    argv = {
        "celery": [
            str(BIN / "celery"),
            "-A",
            "bench.guard_apps",
            "worker",
            "-P",
            "solo",
            "-Q",
            queue,
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "WARNING",
        ],
        "rq": [
            str(BIN / "rq"),
            "worker",
            queue,
            "--url",
            broker,
            "-w",
            "rq.worker.SimpleWorker",
            "--serializer",
            "rq.serializers.JSONSerializer",
            "-q",
        ],
        "dramatiq": [
            str(BIN / "dramatiq"),
            "bench.guard_apps",
            "--processes",
            "1",
            "--threads",
            "1",
            "--queues",
            queue,
        ],
    }[library]
    worker = Proc(f"{library}-worker", argv, env(**values), log_dir() / "worker.log").start()
    done = redis.Redis.from_url(broker)
    per_task = {}
    try:
        # The first three warm up. "sent": the guarded task as the beat sends it (the
        # occurrence in the message: the completion mark read, and marked when it ends).
        for kind in ("bare", "guarded", "sent") * 2:
            key = f"{queue}:{kind}"
            done.delete(key)
            _send(kind, count, values)
            deadline = time.monotonic() + 300
            while done.llen(key) < count and time.monotonic() < deadline:
                time.sleep(0.05)
            times = [float(t) for t in done.lrange(key, 0, -1)]
            per_task[kind] = (max(times) - min(times)) / (len(times) - 1)
    finally:
        worker.stop()
    return {
        "library": library,
        "bare_ms": round(per_task["bare"] * 1000, 3),
        "guarded_ms": round(per_task["guarded"] * 1000, 3),
        "overhead_ms": round((per_task["guarded"] - per_task["bare"]) * 1000, 3),
        "sent_ms": round(per_task["sent"] * 1000, 3),
        "sent_overhead_ms": round((per_task["sent"] - per_task["bare"]) * 1000, 3),
    }


SEND = """
import sys
import redis
import bench.guard_apps as apps
kind, count = sys.argv[1], int(sys.argv[2])
if kind == "sent":
    import time
    from datetime import UTC, datetime, timedelta
    from cron_bridge.jobs import Occurrence
    from cron_bridge.queues.adapter import Dispatch
    from cron_bridge.queues.installed import get_adapter
    from cron_bridge.registry import default_registry
    (job,) = default_registry.jobs()
    start = datetime.fromtimestamp(int(time.time()), UTC)
    dispatches = [
        Dispatch(
            job=job,
            occurrence=Occurrence(job=job.name, scheduled_at=start + timedelta(milliseconds=i)),
            trigger="schedule",
            replica="bench",
        )
        for i in range(count)
    ]
    errors = get_adapter(job.adapter).enqueue_many(dispatches)
    assert not any(errors), errors
elif apps.LIB == "celery":
    for _ in range(count):
        getattr(apps, kind).delay()
elif apps.LIB == "dramatiq":
    for _ in range(count):
        getattr(apps, kind).send()
else:
    from rq import Queue
    from rq.serializers import JSONSerializer
    connection = redis.Redis.from_url(apps.BROKER)
    queue = Queue(apps.QUEUE, connection=connection, serializer=JSONSerializer)
    for _ in range(count):
        queue.enqueue(f"bench.guard_apps.{kind}")
"""


def _send(kind: str, count: int, values: dict[str, str]) -> None:
    """Enqueue ``count`` calls of the bare or guarded task, as the app's own code would."""
    subprocess.run(
        [sys.executable, "-c", SEND, kind, str(count)], env=env(**values), check=True, cwd=TREE
    )
