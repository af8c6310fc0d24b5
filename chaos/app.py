"""The jobs of the chaos run: every second, each run written down by its handler.

``CHAOS_JOBS`` inline jobs (default 12) and ``CHAOS_QUEUED`` jobs (default 0, at most 4) on
the queue ``chaos`` of ``CHAOS_QUEUE`` (``rq``, the default, ``celery`` or ``dramatiq``; its
Redis broker from ``CHAOS_BROKER``, for RQ also ``RQ_REDIS_URL``), each run taking a few
hundred milliseconds (seeded from the occurrence), so overlap locks are held while replicas
and workers die and freeze around them. Each line carries the monotonic time too: the
replicas whose wall clock is set off (libfaketime) share it with the checker. Besides the
handlers' ``start`` and ``end`` lines, the journal gets the guard's ``settled`` (a run's
lock released: ``Settled``) and the beat's ``began`` (an inline claim settled right before
its run: ``Began``), read from their log lines.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from cron_bridge import JobContext, cluster_task

JOURNAL = os.environ.get("CHAOS_JOURNAL", "chaos-journal.jsonl")
COUNT = int(os.environ.get("CHAOS_JOBS", "12"))
QUEUED = int(os.environ.get("CHAOS_QUEUED", "0"))
LIBRARY = os.environ.get("CHAOS_QUEUE", "rq")
BROKER = os.environ.get("CHAOS_BROKER", "redis://127.0.0.1:6379/0")
QUEUE = "chaos"


def write(event: str, ctx: JobContext, **extra: object) -> None:
    line = {
        "event": event,
        "job": ctx.name,
        "occurrence_id": ctx.occurrence_id,
        "replica": ctx.replica,
        "at": time.time(),
        "mono": time.monotonic(),
        **extra,
    }
    journal(line)


def journal(line: dict[str, object]) -> None:
    fd = os.open(JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


class Settled(logging.Handler):
    """Writes when the guard logged the outcome of a run that ran (``completed X on R``,
    ``failed X on R, ...``, ``aborted X on R (...)``): it logs that after it released the
    run's lock (or marked the occurrence completed, which releases it), so the line bounds
    how long the run held its lock; on a loaded machine that can be well after the handler's
    own last line. A run whose store did not answer is judged by the store's faults instead."""

    def emit(self, record: logging.LogRecord) -> None:
        words = record.getMessage().split(" ", 4)
        if len(words) < 4 or words[0] not in ("completed", "failed", "aborted"):
            return
        line = {
            "event": "settled",
            "occurrence_id": words[1],
            "replica": words[3].rstrip(","),
            "mono": time.monotonic(),
        }
        journal(line)


logging.getLogger("cron_bridge.run.guard").addHandler(Settled(logging.INFO))


class Began(logging.Handler):
    """Writes when a beat settled an inline occurrence's pending claim, right before its
    run (``X settled on R: its run begins``): from then on no replica takes it over, so a
    claimer killed between this line and the handler's start loses it as the guarantee
    allows; without this line, a loss to a killed claimer is one the takeover should have
    prevented."""

    def emit(self, record: logging.LogRecord) -> None:
        words = record.getMessage().split(" ")
        if len(words) < 4 or words[1:3] != ["settled", "on"]:
            return
        journal(
            {
                "event": "began",
                "occurrence_id": words[0],
                "replica": words[3].rstrip(":"),
                "mono": time.monotonic(),
            }
        )


_inline = logging.getLogger("cron_bridge.beat.inline")
_inline.addHandler(Began(logging.DEBUG))
_inline.setLevel(logging.DEBUG)


def handler(ctx: JobContext) -> None:
    """Looks at the signal before its first unit of work, as a handler with side effects
    should: a freeze between the guard's last look and this line is seen here. Each line
    carries the time of the look that let the work start and of the end of the work, taken
    before the look that follows it, so a freeze after either moves no line."""
    looked = time.monotonic()
    ctx.signal.raise_if_aborted()
    write("start", ctx, mono=looked)
    digest = hashlib.sha1(ctx.occurrence_id.encode(), usedforsecurity=False).digest()
    ctx.signal.wait(0.05 + digest[0] / 255 * 0.4)
    done = time.monotonic()
    aborted = ctx.signal.aborted
    write("end", ctx, mono=done, aborted=aborted, reason=ctx.signal.reason)


for number in range(COUNT):
    cluster_task(
        every="1s",
        name=f"chaos.job{number:02d}",
        target="inline",
        lock_ttl="3s",
        misfire_grace="10s",
    )(handler)


# One module-level function per queued job: RQ runs a job by its function's dotted path, and
# Celery and Dramatiq name their tasks and actors after it.
def queued00(ctx: JobContext) -> None:
    handler(ctx)


def queued01(ctx: JobContext) -> None:
    handler(ctx)


def queued02(ctx: JobContext) -> None:
    handler(ctx)


def queued03(ctx: JobContext) -> None:
    handler(ctx)


def _on_library(name: str, function: Callable[..., None]) -> Any:
    """The queued job's function as its library (``CHAOS_QUEUE``) takes it."""
    if LIBRARY == "celery":
        return app.task(name=f"chaos.{name}")(function)
    if LIBRARY == "dramatiq":
        return dramatiq.actor(actor_name=f"chaos.{name}", queue_name=QUEUE, max_retries=0)(function)
    return function


if LIBRARY == "celery":
    from celery import Celery

    # As a project that cares about its runs configures Celery: acks late, a message of a
    # worker lost mid-run given back; unacknowledged messages come back after 10 s, not 1 h.
    app = Celery("chaos", broker=BROKER)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        task_default_queue=QUEUE,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        broker_transport_options={"visibility_timeout": 10, "unacked_restore_interval": 2},
    )
elif LIBRARY == "dramatiq":
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    # A dead worker's messages come back once its heartbeat is 5 s old (default 60 s), looked
    # for on every fetch (default: one in a thousand), so they come back within the run.
    dramatiq.set_broker(
        RedisBroker(
            url=BROKER,
            namespace="dramatiq-chaos",
            heartbeat_timeout=5000,
            maintenance_chance=1_000_000,
        )
    )

QUEUED_MAX = 4
for number in range(min(QUEUED, QUEUED_MAX)):
    name = f"queued{number:02d}"
    declare = cluster_task(
        every="1s", name=f"chaos.{name}", queue=QUEUE, lock_ttl="3s", misfire_grace="10s"
    )
    globals()[name] = declare(_on_library(name, globals()[name]))
