"""Jobs every 2 s with a short grace, for catch-up: one run-once, one skip, one optional new."""

from __future__ import annotations

import os

from cron_bridge import JobContext, cluster_task
from tests.apps import journal


def ran(ctx: JobContext) -> None:
    journal.write("ran", ctx)


cluster_task(
    every="2s", name="catchup.once", misfire="run-once", misfire_grace="500ms", target="inline"
)(ran)
cluster_task(every="2s", name="catchup.skip", misfire_grace="500ms", target="inline")(ran)
if os.environ.get("CB_TEST_NEW_JOB"):
    cluster_task(
        every="2s", name="catchup.new", misfire="run-once", misfire_grace="500ms", target="inline"
    )(ran)
