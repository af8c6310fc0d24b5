"""The app ``cron-bridge demo`` runs: Celery on kombu's filesystem transport, nothing to install.

The folder comes from ``CRON_BRIDGE_DEMO_DIR`` (the demo sets it for every process it starts).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from celery import Celery

from cron_bridge import Backoff, JobContext, cluster_task

_DEFAULT = Path(tempfile.gettempdir(), "cron-bridge-demo")
FOLDER = Path(os.environ.get("CRON_BRIDGE_DEMO_DIR") or _DEFAULT)
(FOLDER / "broker").mkdir(parents=True, exist_ok=True)
(FOLDER / "processed").mkdir(parents=True, exist_ok=True)

app = Celery("cron_bridge_demo", broker="filesystem://")
app.conf.update(
    broker_transport_options={
        "data_folder_in": str(FOLDER / "broker"),
        "data_folder_out": str(FOLDER / "broker"),
        "processed_folder": str(FOLDER / "processed"),
        "store_processed": False,
    },
    task_serializer="json",
    accept_content=["json"],
    task_default_queue="demo",
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@cluster_task(every="2s", name="demo.heartbeat")
@app.task(name="demo.heartbeat")  # type: ignore[untyped-decorator]
def heartbeat(ctx: JobContext) -> None:
    """Every 2 s: a quick job."""
    ctx.logger.info("heartbeat %s", ctx.occurrence_id)


@cluster_task(every="5s", name="demo.report", attempts=2, backoff=Backoff.fixed(1))
@app.task(name="demo.report")  # type: ignore[untyped-decorator]
def report(ctx: JobContext) -> None:
    """Every 5 s: a job that takes a moment and stops early when asked to."""
    ctx.signal.wait(0.3)
    ctx.signal.raise_if_aborted()
