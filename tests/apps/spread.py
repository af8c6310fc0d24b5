"""CB_TEST_JOBS inline jobs (1,000 by default), all every 10 s with 8 s of jitter."""

from __future__ import annotations

import os

from cron_bridge import JobContext, cluster_task
from tests.apps import journal


def ran(ctx: JobContext) -> None:
    journal.write("ran", ctx)


for number in range(int(os.environ.get("CB_TEST_JOBS", "1000"))):
    cluster_task(every="10s", jitter="8s", name=f"spread.{number:04d}", target="inline")(ran)
