"""Tasks of each library defined here, undecorated, for a test that decorates them from
another module (the way an ``rq cron`` config imports its functions): that must be refused."""

from __future__ import annotations

import dramatiq
from celery import Celery
from dramatiq.brokers.stub import StubBroker

app = Celery("imported", set_as_current=False)


def send_report(ctx: object) -> None:
    """A plain function, as RQ enqueues it."""


@app.task(name="imported.celery_report")
def celery_report(ctx: object) -> None:
    pass


@dramatiq.actor(actor_name="imported.dramatiq_report", broker=StubBroker())
def dramatiq_report(ctx: object) -> None:
    pass
