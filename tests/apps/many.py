"""CB_TEST_JOBS inline jobs (20 by default), each every second, that write down each run."""

from __future__ import annotations

import os

from cron_bridge import JobContext, cluster_task
from tests.apps import journal


def tick(ctx: JobContext) -> None:
    journal.write("ran", ctx)


for number in range(int(os.environ.get("CB_TEST_JOBS", "20"))):
    cluster_task(every="1s", name=f"tick.{number:02d}", target="inline")(tick)
