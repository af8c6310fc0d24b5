"""The Dramatiq actor of stored schedules, ``cron_bridge_stored``: the beat enqueues it with
the schedule's name; the worker reads the schedule from the store and, when stored schedules
may name its actor (``cron_bridge.storable``), runs the actor's function under the guard,
with Dramatiq's ``Retries`` for failures, as a decorated actor's wrapper does.

The worker must import this module (``dramatiq proj cron_bridge_dramatiq.stored``); it
declares the actor on the global broker, so import it after the app has set its broker.
"""

from __future__ import annotations

from typing import Any

import dramatiq
from dramatiq.middleware import CurrentMessage

from cron_bridge.adapters import META_KEY, InvalidMessage, run_stored_schedule

__all__ = ["ACTOR_NAME", "run_stored"]

ACTOR_NAME = "cron_bridge_stored"


def _run_stored(schedule: str) -> Any:
    message = CurrentMessage.get_current_message()
    options = message.options if message is not None else {}
    retries = options.get("retries", 0)
    valid = isinstance(retries, int) and not isinstance(retries, bool)

    def resolve(name: str) -> Any:
        try:
            return dramatiq.get_broker().get_actor(name).fn
        except dramatiq.errors.ActorNotFound:
            raise LookupError(f"this worker has no actor {name!r:.200}") from None

    def unloaded(name: str) -> str | None:
        try:
            dramatiq.get_broker().get_actor(name)
        except dramatiq.errors.ActorNotFound:
            return (
                f"this worker has no actor {name!r:.200}: give the module that declares it to "
                "the worker (`dramatiq MODULE cron_bridge_dramatiq.stored`)"
            )
        return None

    _, delivery = run_stored_schedule(
        "dramatiq",
        schedule,
        options.get(META_KEY),
        attempt=lambda job: retries + 1 if valid else 0,
        resolve=resolve,
        unloaded=unloaded,
    )
    if delivery.retry_in is not None:
        delay = max(1, round(delivery.retry_in * 1000))
        raise dramatiq.Retry(str(delivery.error), delay=delay) from delivery.error
    delivery.raise_if_failed()
    return delivery.value


broker = dramatiq.get_broker()
if not any(isinstance(m, CurrentMessage) for m in broker.middleware):
    broker.add_middleware(CurrentMessage())
# A malformed or refused delivery is final: Dramatiq's Retries must not bring it back.
run_stored = dramatiq.actor(actor_name=ACTOR_NAME, throws=(InvalidMessage,))(_run_stored)
