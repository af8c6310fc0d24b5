"""Recognises Celery tasks for ``@cluster_task`` and names them for the beat."""

from __future__ import annotations

from typing import Any

from celery.app.task import Task
from celery.local import Proxy

from cron_bridge.adapters import TaskRef
from cron_bridge.jobs import Job

__all__ = ["CeleryAdapter"]


class CeleryAdapter:
    """Celery tasks: ``@app.task``, ``@shared_task`` and the lazy proxy of an unfinalized app."""

    name = "celery"

    def accepts(self, obj: object, queue: object | None) -> bool:
        return isinstance(obj, Task | Proxy) and hasattr(obj, "name")

    def describe(self, obj: object, queue: object | None) -> TaskRef:
        # Without queue= the app's own routing (task_routes) picks the queue when it is sent.
        task: Any = obj
        return TaskRef(task=task.name, name=task.name, queue=_queue_name(queue))

    def wrap(self, obj: Any, job: Job) -> Any:
        # The worker-side guard around the task body comes with the queue-target work; until
        # then the task is returned as it is.
        return obj


def _queue_name(queue: object | None) -> str | None:
    return queue if isinstance(queue, str) else None
