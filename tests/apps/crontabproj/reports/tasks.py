"""The project's actors, scheduled with dramatiq-crontab's decorators; the broker (Redis, the
namespace from CB_TEST_NAMESPACE) is set up before them, as django_dramatiq would."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq_crontab import cron, interval

dramatiq.set_broker(
    RedisBroker(
        url=os.environ.get("CB_TEST_BROKER", "redis://127.0.0.1:6379/0"),
        namespace=os.environ.get("CB_TEST_NAMESPACE", "crontab"),
    )
)


@cron("* * * * *")
@dramatiq.actor
def every_minute() -> None:
    pass


@cron("* * * * mon,tue,wed,thu,fri,sat,sun")
@dramatiq.actor(queue_name="reports", priority=5)
def weekdays_and_weekends() -> None:
    pass


@cron("0 3 * * *")
@dramatiq.actor
def nightly() -> None:
    pass


@interval(seconds=5)
@dramatiq.actor(queue_name="fast")
def pulse() -> None:
    pass
