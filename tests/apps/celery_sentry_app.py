"""A Celery project that reports to Sentry with its cron monitoring on, as such teams write it:
``sentry_sdk.init(..., integrations=[CeleryIntegration(monitor_beat_tasks=True)])`` in the
module the beat and the worker import, and two crontab entries, one of whose task fails.

Its DSN (``CB_TEST_SENTRY_DSN``) points at a loopback server that records the envelopes
(tests/e2e/test_sentry_beat.py), its broker at ``CB_TEST_BROKER``.
"""

from __future__ import annotations

import os

import sentry_sdk
from celery import Celery
from celery.schedules import crontab
from sentry_sdk.integrations.celery import CeleryIntegration

sentry_sdk.init(
    dsn=os.environ["CB_TEST_SENTRY_DSN"],
    integrations=[CeleryIntegration(monitor_beat_tasks=True)],
    default_integrations=False,
    environment="twin",
)

app = Celery("sentried", broker=os.environ.get("CB_TEST_BROKER", "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    timezone="America/New_York",  # Sentry's monitor timezone comes from the app's
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    beat_schedule={
        "send-invoices": {"task": "sentried.send_invoices", "schedule": crontab()},
        "sync-ledger": {"task": "sentried.sync_ledger", "schedule": crontab(minute="*/1")},
    },
)


@app.task(name="sentried.send_invoices")
def send_invoices() -> str:
    return "sent"


@app.task(name="sentried.sync_ledger")
def sync_ledger() -> None:
    raise RuntimeError("the ledger is locked")
