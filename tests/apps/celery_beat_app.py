"""An unmodified Celery project with a beat_schedule: crontab, timedelta and a number."""

from __future__ import annotations

import os
from datetime import timedelta

from celery import Celery
from celery.schedules import crontab

from tests.apps import journal

app = Celery("proj", broker=os.environ.get("CB_TEST_BROKER", "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    task_default_queue=os.environ.get("CB_TEST_QUEUE", "celery"),
    broker_connection_retry_on_startup=True,
    timezone="Europe/Warsaw",
    beat_schedule={
        "every minute": {"task": "proj.tick", "schedule": crontab(), "args": ("minute",)},
        "every second": {
            "task": "proj.tick",
            "schedule": timedelta(seconds=1),
            "args": ("second",),
        },
        "every two seconds": {
            "task": "proj.tick",
            "schedule": 2.0,
            "args": ("two",),
            "kwargs": {"n": 2},
            "options": {"priority": 5},
        },
    },
)


@app.task(name="proj.tick", bind=True)
def tick(self, label: str, n: int = 0) -> None:
    """A plain task: it writes down the occurrence cron-bridge put in the message."""
    meta = (self.request.headers or {}).get("cron_bridge") or {}
    path = os.environ.get("CB_TEST_JOURNAL")
    if path:
        line = {
            "event": "sent",
            "label": label,
            "n": n,
            "job": meta.get("job"),
            "occurrence_id": meta.get("occurrence_id"),
            "replica": meta.get("replica"),
        }
        journal.append(path, line)
