"""The Dramatiq adapter: ``@cluster_task`` over ``@dramatiq.actor``.

The beat enqueues a ``Message`` by actor name with the occurrence in its options, together
with ``max_retries``, ``min_backoff`` and ``max_backoff`` (ms) from the job: message options,
which Dramatiq's ``Retries`` reads before the actor's, so the actor's own options stay as
declared for every other sender. On the worker the actor runs under the guard; the attempt
comes from ``CurrentMessage``, which the adapter adds to the broker, and a failure of a
message the beat sent goes back to ``Retries`` with the job's own backoff as the delay.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import dramatiq
from dramatiq.middleware import CurrentMessage

from cron_bridge.adapters import (
    HANDLER_ATTR,
    META_KEY,
    Adapter,
    Dispatch,
    Job,
    SendThreads,
    TaskRef,
    override,
    run_delivery,
)

__all__ = ["DramatiqAdapter"]


def retry_options(job: Job) -> dict[str, int]:
    """Dramatiq's retry options for the job's attempts and backoff, in milliseconds."""
    retries = job.attempts - 1
    delays = job.backoff.delays(max(retries, 1))
    return {
        "max_retries": retries,
        "min_backoff": max(1, round(min(delays) * 1000)),
        "max_backoff": max(1, round(max(delays) * 1000)),
    }


class DramatiqAdapter(Adapter, name="dramatiq", stored_task="cron_bridge_stored"):
    """Dramatiq actors (``@dramatiq.actor``). Stored schedules are enqueued to the actor
    ``cron_bridge_stored`` (``cron_bridge_dramatiq.stored``)."""

    def __init__(self) -> None:
        self._send_threads = SendThreads()

    @override
    def accepts(self, obj: object, queue: object | None) -> bool:
        return isinstance(obj, dramatiq.Actor)

    @override
    def describe(self, obj: object, queue: object | None) -> TaskRef:
        actor: Any = obj
        name = actor.actor_name
        fn = inspect.unwrap(actor.fn)  # an async def actor's function is wrapped by Dramatiq
        home = (fn.__module__, fn.__name__) if "<" not in fn.__qualname__ else None
        return TaskRef(
            task=name,
            name=name,
            queue=queue if isinstance(queue, str) else actor.queue_name,
            home=home,
        )

    @override
    def declared_in(self, modules: Sequence[ModuleType]) -> list[Job]:
        """periodiq's ``periodic=`` actors of the imported modules and dramatiq-crontab's
        ``@cron``/``@interval`` registrations, as ``cron-bridge periodiq`` and ``cron-bridge
        dramatiq-crontab`` would run them."""
        from cron_bridge_dramatiq import crontab, periodiq

        return periodiq.declared(modules) + crontab.declared()

    @property
    @override
    def declared_as(self) -> str:
        """What ``declared_in``'s jobs are called, for listings."""
        return " and ".join(name for name, _ in self._sources()) or "periodiq"

    @property
    @override
    def runs_with(self) -> str:
        """The commands that run ``declared_in``'s jobs."""
        return "` and `".join(command for _, command in self._sources())

    def _sources(self) -> list[tuple[str, str]]:
        from cron_bridge_dramatiq import crontab, periodiq

        found = []
        if periodiq.declared_actors():
            found.append(("periodiq", "cron-bridge periodiq {modules}"))
        if crontab.registrations():
            found.append(("dramatiq-crontab", "cron-bridge dramatiq-crontab"))
        return found

    @override
    def wrap(self, obj: Any, job: Job) -> Any:
        actor: dramatiq.Actor[Any, Any] = obj
        broker = actor.broker
        if not any(isinstance(m, CurrentMessage) for m in broker.middleware):
            broker.add_middleware(CurrentMessage())
        original = _awaitable_or_sync(actor.fn)

        def run(*args: Any, **kwargs: Any) -> Any:
            message = CurrentMessage.get_current_message()
            options = message.options if message is not None else {}
            retries = options.get("retries", 0)
            # A count that is not a whole number is refused by run_delivery (attempt 0).
            valid = isinstance(retries, int) and not isinstance(retries, bool)
            delivery = run_delivery(
                job,
                options.get(META_KEY),
                attempt=retries + 1 if valid else 0,
                call=lambda ctx: original(ctx, *args, **kwargs),
            )
            if delivery.retry_in is not None:
                delay = max(1, round(delivery.retry_in * 1000))
                raise dramatiq.Retry(str(delivery.error), delay=delay) from delivery.error
            delivery.raise_if_failed()
            return delivery.value

        setattr(run, HANDLER_ATTR, original)  # what a stored schedule naming it calls
        actor.fn = run
        return actor

    @override
    def enqueue_many(self, dispatches: Sequence[Dispatch]) -> list[Exception | None]:
        """``broker.enqueue`` per message (Dramatiq has no batch send); a large batch from
        two threads, so that one waits for the broker's answer while the other sends."""
        results: list[Exception | None] = [None] * len(dispatches)

        def send(indexes: Sequence[int]) -> None:
            for index in indexes:
                results[index] = _send(dispatches[index])

        self._send_threads.run(send, len(dispatches))
        return results


def _send(dispatch: Dispatch) -> Exception | None:
    job = dispatch.job
    actor: Any = job.handler  # None for a stored schedule: its actor is found by name
    broker = actor.broker if actor is not None else dramatiq.get_broker()
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name=job.queue or (actor.queue_name if actor is not None else "default"),
        actor_name=job.task or job.name,
        args=(),
        kwargs=dict(job.kwargs),
        options={META_KEY: dispatch.meta(), **retry_options(job)},
    )
    try:
        broker.enqueue(message)
    except Exception as exc:  # noqa: BLE001 - the broker's error is the outcome
        return exc
    return None


def _awaitable_or_sync(fn: Callable[..., Any]) -> Callable[..., Any]:
    """An ``async def`` actor's function: Dramatiq wraps it to run on the event loop of its
    AsyncIO middleware. With that middleware, that is where it runs; without it, the
    coroutine is awaited on cron-bridge's own loop (as for Celery and RQ) instead of failing
    with Dramatiq's "Global event loop thread not set"."""
    inner = getattr(fn, "__wrapped__", None)
    if inner is None or not inspect.iscoroutinefunction(inner):
        return fn
    from dramatiq.asyncio import get_event_loop_thread

    def call(*args: Any, **kwargs: Any) -> Any:
        return (
            fn(*args, **kwargs) if get_event_loop_thread() is not None else inner(*args, **kwargs)
        )

    return call
