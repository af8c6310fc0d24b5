"""Recognises plain functions with an RQ ``queue=`` for ``@cluster_task``."""

from __future__ import annotations

import types
from typing import Any

from rq import Queue

from cron_bridge.adapters import TaskRef
from cron_bridge.errors import ConfigError
from cron_bridge.jobs import Job

__all__ = ["RQAdapter"]


class RQAdapter:
    """Plain functions enqueued by dotted path to an ``rq.Queue`` (or a queue name)."""

    name = "rq"

    def accepts(self, obj: object, queue: object | None) -> bool:
        return isinstance(obj, types.FunctionType) and isinstance(queue, Queue | str)

    def describe(self, obj: object, queue: object | None) -> TaskRef:
        func: Any = obj
        path = f"{func.__module__}.{func.__qualname__}"
        if func.__module__ == "__main__" or "<locals>" in func.__qualname__:
            raise ConfigError(
                "RQ enqueues by dotted path, and a worker cannot import this function; define "
                "it at the top level of an importable module",
                job=path,
                option="queue",
                value=queue,
            )
        queue_name = queue.name if isinstance(queue, Queue) else str(queue)
        return TaskRef(task=path, name=path, queue=queue_name)

    def wrap(self, obj: Any, job: Job) -> Any:
        # The worker-side guard around the function comes with the queue-target work; until
        # then the function is returned as it is.
        return obj
