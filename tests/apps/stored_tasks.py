"""Plain tasks the workers know, for stored schedules: marked ``@storable``, no schedule of
their own. Each writes down the occurrence it ran, found through its queue library's own
current message."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from cron_bridge import storable
from tests.apps import journal


def write(meta: Mapping[str, Any] | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    path = os.environ.get("CB_TEST_JOURNAL")
    if path:
        journal.append(
            path,
            {
                "event": "ran",
                "occurrence_id": (meta or {}).get("occurrence_id"),
                "args": list(args),
                "kwargs": kwargs,
                "at": time.time(),
                "pid": os.getpid(),
            },
        )
    return "reported"


@storable
def report(*args: Any, **kwargs: Any) -> str:
    """The RQ task (by dotted path)."""
    from rq import get_current_job

    current = get_current_job()
    return write(current.meta.get("cron_bridge") if current else None, args, kwargs)
