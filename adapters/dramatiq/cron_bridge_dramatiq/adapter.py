"""Recognises Dramatiq actors for ``@cluster_task`` and names them for the beat."""

from __future__ import annotations

from typing import Any

import dramatiq

from cron_bridge.adapters import TaskRef
from cron_bridge.jobs import Job

__all__ = ["DramatiqAdapter"]


class DramatiqAdapter:
    """Dramatiq actors (``@dramatiq.actor``)."""

    name = "dramatiq"

    def accepts(self, obj: object, queue: object | None) -> bool:
        return isinstance(obj, dramatiq.Actor)

    def describe(self, obj: object, queue: object | None) -> TaskRef:
        actor: Any = obj
        name = actor.actor_name
        return TaskRef(
            task=name, name=name, queue=queue if isinstance(queue, str) else actor.queue_name
        )

    def wrap(self, obj: Any, job: Job) -> Any:
        # The worker-side guard around the actor comes with the queue-target work; until then
        # the actor is returned as it is.
        return obj
