"""Actors as periodiq users write them (``periodic=cron(...)``, the middleware with its
``skip_delay``), on a Redis broker whose namespace comes from CB_TEST_NAMESPACE so that stock
periodiq and cron-bridge each send into their own (tests/e2e/test_periodiq.py)."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from periodiq import PeriodiqMiddleware, cron

broker = RedisBroker(
    url=os.environ.get("CB_TEST_BROKER", "redis://127.0.0.1:6379/0"),
    namespace=os.environ.get("CB_TEST_NAMESPACE", "periodiq"),
)
broker.add_middleware(PeriodiqMiddleware(skip_delay=45))
dramatiq.set_broker(broker)


@dramatiq.actor(periodic=cron("* * * * *"))
def every_minute() -> None:
    pass


@dramatiq.actor(queue_name="reports", priority=10, max_retries=3, periodic=cron("* * * * sun-sat"))
def report() -> None:
    pass


@dramatiq.actor(periodic=cron("0-59/2 * * * *"))
def even_minutes() -> None:
    pass


@dramatiq.actor(periodic=cron("@hourly"))
def hourly() -> None:
    pass


@dramatiq.actor
def not_periodic() -> None:
    pass
