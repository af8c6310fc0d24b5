"""The handlers the queue-library test apps declare, chosen by CB_TEST_SCENARIO.

- ``every``: a job every second that writes down each run.
- ``fail``: an on-demand job, attempts=3 (or CB_TEST_ATTEMPTS), that always fails (backoff from
  CB_TEST_BACKOFF: ``fixed`` for 1 s, ``exponential`` for 1 s doubling).
- ``overlap``: a job every second that takes 2.5 s.
- ``long``: an on-demand job that runs until aborted (lock-lost and worker-kill tests).
- ``async``: ``every``, with an ``async def`` task that awaits (``handle_async``).
- ``retry``: a job every 6 s, attempts=3, whose first attempt takes 3 s and fails, so that
  its retry (CB_TEST_RETRY_AFTER seconds later, 4.5 by default) comes back while the next
  occurrence holds the lock.
- ``pause``: an hourly job whose first run (of this process tree: a marker file beside the
  journal) pauses writes on the Redis at CB_TEST_PAUSE_REDIS for CB_TEST_PAUSE_MS as it
  ends, so the store refuses the run's own record write.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import redis

from cron_bridge import Backoff, JobContext, Ping
from tests.apps import journal, otel_setup

otel_setup.install()  # spans to CB_TEST_SPANS, when the test asks for them

if os.environ.get("CB_TEST_SENTRY_DSN"):  # check-ins to a loopback server (test_monitors.py)
    import sentry_sdk

    sentry_sdk.init(
        dsn=os.environ["CB_TEST_SENTRY_DSN"], default_integrations=False, environment="monitors"
    )

SCENARIO = os.environ.get("CB_TEST_SCENARIO", "every")
QUEUE = os.environ.get("CB_TEST_QUEUE", "cron-bridge-test")
JOB = os.environ.get("CB_TEST_JOB", "cb.job")  # the job name: RQ job ids (global per Redis) use it


def options() -> dict[str, Any]:
    """The @cluster_task options of this scenario's job (with ``monitor=`` from
    CB_TEST_MONITOR: ``sentry``, or ``ping:URL`` for a ``Ping(URL)``)."""
    chosen = _options()
    monitor = os.environ.get("CB_TEST_MONITOR", "")
    if monitor == "sentry":
        chosen["monitor"] = "sentry"
    elif monitor.startswith("ping:"):
        chosen["monitor"] = Ping(monitor.removeprefix("ping:"))
    return chosen


def _options() -> dict[str, Any]:
    if SCENARIO in ("every", "async"):
        return {"every": "1s", "misfire_grace": os.environ.get("CB_TEST_GRACE", "30s")}
    if SCENARIO == "fail":
        kind = os.environ.get("CB_TEST_BACKOFF", "fixed")
        backoff = Backoff.fixed(1) if kind == "fixed" else Backoff.exponential(1)
        attempts = int(os.environ.get("CB_TEST_ATTEMPTS", "3"))
        return {"every": "1h", "on_demand": True, "attempts": attempts, "backoff": backoff}
    if SCENARIO == "overlap":
        return {"every": "1s", "lock_ttl": "3s"}
    if SCENARIO == "retry":
        after = float(os.environ.get("CB_TEST_RETRY_AFTER", "4.5"))
        return {"every": "6s", "attempts": 3, "backoff": Backoff.fixed(after)}
    if SCENARIO == "pause":
        return {"every": "1h", "misfire_grace": "30s"}
    if SCENARIO == "long":
        return {"every": "1h", "on_demand": True, "lock_ttl": "3s"}
    raise ValueError(f"unknown CB_TEST_SCENARIO {SCENARIO!r}")


def handle(ctx: JobContext, **kwargs: Any) -> str:
    """The body every library's task runs."""
    if SCENARIO == "every":
        journal.write("ran", ctx, kwargs=kwargs)
    elif SCENARIO == "fail":
        journal.write("attempt", ctx, attempts=ctx.attempts)
        raise RuntimeError(f"attempt {ctx.attempt} fails")
    elif SCENARIO == "retry":
        journal.write("attempt", ctx)
        if ctx.attempt == 1:
            ctx.signal.wait(3)
            journal.write("failed", ctx)
            raise RuntimeError("the first attempt fails")
    elif SCENARIO == "pause":
        journal.write("ran", ctx)
        _pause_store_writes_once(ctx)
    elif SCENARIO == "overlap":
        journal.write("start", ctx)
        ctx.signal.wait(2.5)
        journal.write("end", ctx)
    else:
        journal.write("start", ctx)
        if ctx.signal.wait(60):
            journal.write("aborted", ctx, reason=ctx.signal.reason)
            ctx.signal.raise_if_aborted()
        journal.write("end", ctx)
    return "done"


def _pause_store_writes_once(ctx: JobContext) -> None:
    marker = os.environ["CB_TEST_JOURNAL"] + ".paused"
    try:
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        return
    with redis.Redis.from_url(os.environ["CB_TEST_PAUSE_REDIS"]) as client:
        client.execute_command("CLIENT", "PAUSE", os.environ["CB_TEST_PAUSE_MS"], "WRITE")
    journal.write("paused", ctx)


async def handle_async(ctx: JobContext, **kwargs: Any) -> str:
    """The ``async`` scenario's body: awaited on cron-bridge's loop, under the guard."""
    await asyncio.sleep(0.01)
    aborted = await ctx.signal.wait_async(0)
    journal.write(
        "ran",
        ctx,
        kwargs=kwargs,
        awaited=True,
        aborted=aborted,
        thread=threading.current_thread().name,
    )
    return "done"
