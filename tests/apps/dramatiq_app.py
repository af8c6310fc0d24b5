"""A Dramatiq app for the end-to-end tests, on Redis or RabbitMQ by CB_TEST_BROKER."""

from __future__ import annotations

import os
from typing import Any

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.brokers.redis import RedisBroker

from cron_bridge import JobContext, cluster_task, storable
from tests.apps import direct, scenarios

_url = os.environ.get("CB_TEST_BROKER", "redis://127.0.0.1:6379/0")
broker = (
    RabbitmqBroker(url=_url)
    if _url.startswith("amqp")
    # A dead worker's messages are requeued once its heartbeat is 5 s old (default: 60 s);
    # maintenance on every fetch so the tests see it promptly.
    else RedisBroker(
        url=_url,
        namespace=f"dramatiq-{scenarios.QUEUE}",
        heartbeat_timeout=5000,
        maintenance_chance=1_000_000,
    )
)
if os.environ.get("CB_TEST_DRAMATIQ_ASYNCIO"):  # async actors on Dramatiq's own loop
    from dramatiq.middleware.asyncio import AsyncIO

    broker.add_middleware(AsyncIO())
if os.environ.get("CB_TEST_DRAMATIQ_BEAT"):  # the beat in the dramatiq process tree
    from cron_bridge_dramatiq import BeatMiddleware

    broker.add_middleware(BeatMiddleware())
dramatiq.set_broker(broker)


if scenarios.SCENARIO == "async":

    @cluster_task(name=scenarios.JOB, kwargs={"source": "beat"}, **scenarios.options())
    @dramatiq.actor(actor_name="cb.job", queue_name=scenarios.QUEUE)
    async def job(ctx: JobContext, **kwargs: Any) -> str:
        return await scenarios.handle_async(ctx, **kwargs)

else:

    @cluster_task(name=scenarios.JOB, kwargs={"source": "beat"}, **scenarios.options())
    @dramatiq.actor(actor_name="cb.job", queue_name=scenarios.QUEUE)
    def job(ctx: JobContext, **kwargs: Any) -> str:
        return scenarios.handle(ctx, **kwargs)


# Stored schedules: the actor cron-bridge enqueues them to, and a plain actor for them to run.
import cron_bridge_dramatiq.stored  # noqa: E402, F401


@storable
@dramatiq.actor(actor_name="cb.stored_report", queue_name=scenarios.QUEUE)
def stored_report(*args: Any, **kwargs: Any) -> str:
    from dramatiq.middleware import CurrentMessage

    from tests.apps.stored_tasks import write

    message = CurrentMessage.get_current_message()
    return write(message.options.get("cron_bridge") if message else None, args, kwargs)


# An actor with a schedule of its own (yearly, never armed here) that stored schedules also
# run, per tenant: called with ctx under the stored schedule's own guard.
@cluster_task(name=f"{scenarios.JOB}.yearly", cron="0 0 1 1 *", on_demand=True)
@dramatiq.actor(actor_name="cb.decorated_report", queue_name=scenarios.QUEUE)
def decorated_report(ctx: JobContext, **kwargs: Any) -> str:
    from tests.apps import journal

    journal.write("ran", ctx, kwargs=kwargs, decorated=True)
    return "done"


@dramatiq.actor(actor_name="cb.unmarked", queue_name=scenarios.QUEUE)
def unmarked(*args: Any, **kwargs: Any) -> str:
    """An actor of the app that nobody agreed stored schedules may run."""
    from tests.apps.stored_tasks import write

    write({"occurrence_id": "unmarked"}, args, kwargs)
    return "ran"


# Twins sent directly (.send()), with Dramatiq's own retry options: decorating one must
# change nothing for such callers.
_TWIN: dict[str, Any] = {
    "queue_name": scenarios.QUEUE,
    "max_retries": direct.RETRIES,
    "min_backoff": direct.DELAY_S * 1000,
    "max_backoff": direct.DELAY_S * 1000,
}


@dramatiq.actor(actor_name="cb.twin_plain", **_TWIN)
def twin_plain(label: str) -> None:
    direct.fail("plain", label)


@cluster_task(name=f"{scenarios.JOB}.twin", every="1h", on_demand=True)
@dramatiq.actor(actor_name="cb.twin_decorated", **_TWIN)
def twin_decorated(ctx: JobContext, label: str) -> None:
    direct.fail("decorated", label)
