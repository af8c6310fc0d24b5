"""Plain tasks the workers know, for stored schedules: no cron-bridge decorator on them."""

from __future__ import annotations

import os
import time
from typing import Any

from tests.apps import journal


def report(*args: Any, **kwargs: Any) -> str:
    """An RQ task: writes down which occurrence it ran (from its RQ job's meta)."""
    from rq import get_current_job

    current = get_current_job()
    meta = current.meta.get("cron_bridge", {}) if current is not None else {}
    path = os.environ.get("CB_TEST_JOURNAL")
    if path:
        journal.append(path, {"event": "ran", "occurrence_id": meta.get("occurrence_id"),
                              "args": list(args), "kwargs": kwargs, "at": time.time(),
                              "pid": os.getpid()})  # fmt: skip
    return "reported"
