"""A one-off inline job at CB_TEST_AT, and a job every second within CB_TEST_START..END."""

from __future__ import annotations

import os

from cron_bridge import JobContext, cluster_task
from tests.apps import journal


def ran(ctx: JobContext) -> None:
    journal.write("ran", ctx)


cluster_task(
    at=os.environ.get("CB_TEST_AT", "2026-01-01T00:00:00Z"), name="once.report", target="inline"
)(ran)
cluster_task(
    every="1s",
    start=os.environ.get("CB_TEST_START", "2026-01-01T00:00:00Z"),
    end=os.environ.get("CB_TEST_END", "2026-01-01T00:00:10Z"),
    name="once.window",
    target="inline",
)(ran)
