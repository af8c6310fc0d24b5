"""CB_TEST_JOBS inline jobs (10 by default), each every second, that write down each run.

Every claimed occurrence runs, late ones too (``overlap="allow"``, ``coalesce=False``): a
claim won twice shows up as a run twice in the journal.
"""

from __future__ import annotations

import os

from cron_bridge import JobContext, cluster_task
from tests.apps import journal


def tick(ctx: JobContext) -> None:
    journal.write("ran", ctx)


for number in range(int(os.environ.get("CB_TEST_JOBS", "10"))):
    cluster_task(
        every="1s", name=f"failover.{number:02d}", target="inline", overlap="allow", coalesce=False
    )(tick)
