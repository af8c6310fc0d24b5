"""The Dramatiq actor of stored schedules, ``cron_bridge_stored``: the beat enqueues it with
the schedule's name; the worker reads the schedule from the store and runs the named actor's
function under the guard, with Dramatiq's ``Retries`` for failures, as a decorated actor's
wrapper does.

The worker must import this module (``dramatiq proj cron_bridge_dramatiq.stored``); it
declares the actor on the global broker, so import it after the app has set its broker.
"""

from __future__ import annotations

from typing import Any

import dramatiq
from dramatiq.middleware import CurrentMessage

from cron_bridge.errors import InvalidMessage
from cron_bridge.stored import Schedules
from cron_bridge.worker import META_KEY, run_delivery, worker_store

__all__ = ["ACTOR_NAME", "run_stored"]

ACTOR_NAME = "cron_bridge_stored"


def _run_stored(schedule: str) -> Any:
    if not isinstance(schedule, str):
        raise InvalidMessage("cron_bridge_stored: the schedule name is not text")
    spec = Schedules(worker_store()).get(schedule)
    if spec is None or spec.library != "dramatiq":
        raise InvalidMessage(f"{schedule!r:.200}: no stored Dramatiq schedule of this name")
    broker = dramatiq.get_broker()
    try:
        target = broker.get_actor(spec.task)
    except dramatiq.errors.ActorNotFound:
        raise InvalidMessage(
            f"{schedule!r:.200}: this worker has no actor {spec.task!r:.200}"
        ) from None
    job = spec.job(worker=True)
    message = CurrentMessage.get_current_message()
    options = message.options if message is not None else {}
    retries = options.get("retries", 0)
    valid = isinstance(retries, int) and not isinstance(retries, bool)
    delivery = run_delivery(job, options.get(META_KEY), attempt=retries + 1 if valid else 0,
                            call=lambda ctx: target.fn(*spec.args, **spec.kwargs))  # fmt: skip
    if delivery.retry_in is not None:
        delay = max(1, round(delivery.retry_in * 1000))
        raise dramatiq.Retry(str(delivery.error), delay=delay) from delivery.error
    delivery.raise_if_failed()
    return delivery.value


broker = dramatiq.get_broker()
if not any(isinstance(m, CurrentMessage) for m in broker.middleware):
    broker.add_middleware(CurrentMessage())
run_stored = dramatiq.actor(actor_name=ACTOR_NAME)(_run_stored)
