"""A Celery app of ``CB_BURST_N`` jobs (10,000 by default), every one due at ``CB_BURST_AT``:
one burst, each run written down by its task. ``CB_SLOW_SEND`` (seconds) holds up each
message this process publishes, so that a replica killed a second into the burst has claimed
thousands it has not sent; ``CB_BURST_OVERLAP`` is the jobs' ``overlap``."""

from __future__ import annotations

import os
import time
from typing import Any

from celery import Celery
from celery.signals import before_task_publish

from cron_bridge import JobContext, cluster_task
from tests.apps import journal

N = int(os.environ.get("CB_BURST_N", "10000"))
AT = float(os.environ.get("CB_BURST_AT", "0"))
SLOW = float(os.environ.get("CB_SLOW_SEND", "0"))
OVERLAP = os.environ.get("CB_BURST_OVERLAP", "skip")

app = Celery("cbburst", broker=os.environ.get("CB_TEST_BROKER", "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    task_default_queue=os.environ.get("CB_TEST_QUEUE", "burst"),
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)

if SLOW:

    @before_task_publish.connect(weak=False)
    def slowly(**kwargs: Any) -> None:
        time.sleep(SLOW)


def ran(ctx: JobContext) -> None:
    journal.write("run", ctx)


for number in range(N):
    cluster_task(
        name=f"burst.{number:05d}",
        every="1h",
        offset=f"{int(AT) % 3600}s",
        misfire_grace="2m",
        overlap=OVERLAP,
    )(app.task(name=f"burst.{number:05d}")(ran))
