"""The RQ task of stored schedules: the beat enqueues ``run_stored(schedule=<name>)``; the
worker reads the schedule from the store and, when stored schedules may name its function
(``cron_bridge.storable``), imports it by dotted path and runs it under the guard.

The function's module is imported only when it is loaded in the worker already or
``CRON_BRIDGE_STORED_TASKS`` names it, and what is found must be a function defined there
under that name (``proj.tasks.system``, where ``proj.tasks`` did ``from os import system``,
is refused).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from rq import get_current_job

from cron_bridge.adapters import (
    META_KEY,
    RefusedTask,
    flush_worker_records,
    listed,
    run_stored_schedule,
)
from cron_bridge_rq.adapter import HORSE_FLUSH

__all__ = ["run_stored"]


def run_stored(schedule: str) -> Any:
    """Run the stored schedule called ``schedule`` for the occurrence in this job's meta.

    Raises:
        RefusedTask: no such schedule, not an RQ one, or a function stored schedules may not
            name (recorded ``failed``, and not retried by RQ).
    """
    current = get_current_job()
    meta = current.meta.get(META_KEY) if current is not None else None

    def attempt(job: Any) -> int:
        retries_left = current.retries_left if current is not None else None
        return max(1, job.attempts - retries_left) if retries_left is not None else 1

    try:
        _, delivery = run_stored_schedule(
            "rq", schedule, meta, attempt=attempt, resolve=_function, unloaded=_unloaded
        )
    except RefusedTask:
        if current is not None:
            current.retries_left = 0  # a refusal is final: RQ's Retry must not bring it back
        raise
    finally:
        flush_worker_records(HORSE_FLUSH)  # the work horse ends with os._exit after the job
    delivery.raise_if_failed()
    return delivery.value


def _unloaded(path: str) -> str | None:
    """How to load the function at dotted ``path`` in this worker, when its module is not
    loaded here (``rq worker`` imports the function's module only in the work horse, after the
    check, so a ``@cluster_task`` or ``@storable`` there is never seen); None when it is."""
    module_name = path.rpartition(".")[0]
    if not module_name or module_name in sys.modules:
        return None
    return (
        f"load {module_name!r:.200} before the worker forks its work horses (`rq worker -c "
        f"{module_name:.200}`, which imports it as RQ's settings module, or a worker script "
        f"that imports it), or list it in CRON_BRIDGE_STORED_TASKS ({module_name:.200}.*)"
    )


def _function(path: str) -> Any:
    """The function at dotted ``path``, importing its module only where that is allowed."""
    module_name, _, name = path.rpartition(".")
    if not module_name or not name.isidentifier():
        raise LookupError(f"{path!r:.200} is not a function's dotted path")
    module = sys.modules.get(module_name)
    if module is None:
        if not listed(path):
            raise LookupError(
                f"this worker has not loaded {module_name!r:.200}, and CRON_BRIDGE_STORED_TASKS "
                "does not name it: import the module in the worker or list it there"
            )
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise LookupError(f"cannot import {module_name!r:.200}: {exc}") from None
    func = getattr(module, name, None)
    if (
        not isinstance(func, types.FunctionType)
        or func.__module__ != module_name
        or func.__qualname__ != name
    ):
        raise LookupError(f"{path!r:.200} is not a function defined in {module_name!r:.200}")
    return func
