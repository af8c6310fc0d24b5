"""Jobs for the dashboard's strips: one that fails exactly once, one that runs long."""

from __future__ import annotations

import os
from pathlib import Path

from cron_bridge import JobContext, cluster_task
from tests.apps import journal


@cluster_task(every="1s", name="flaky.sync", target="inline")
def flaky(ctx: JobContext) -> None:
    """Fails on its first run in the cluster (a flag file taken atomically), then completes."""
    flag = Path(os.environ["CB_TEST_JOURNAL"]).with_suffix(".failed-once")
    try:
        os.close(os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        journal.write("ran", ctx)
        return
    raise RuntimeError("the upstream answered 502")


@cluster_task(every="2s", name="slow.export", target="inline", lock_ttl="3s")
def slow(ctx: JobContext) -> None:
    """Runs until the beat stops: in flight while the test looks; later occurrences skip."""
    journal.write("started", ctx)
    ctx.signal.wait(120)
