"""The body of the twin tasks that tests/e2e/test_direct_calls.py sends directly: one declared
with ``@cluster_task``, one not, with the same options of the queue library. Each run writes
down which twin it was and fails, so the library's own retries decide how often it runs."""

from __future__ import annotations

import os
import time

from tests.apps import journal

# The library's own retry options of both twins: two retries, one second apart.
RETRIES = 2
DELAY_S = 1


def fail(twin: str, label: str) -> None:
    path = os.environ.get("CB_TEST_JOURNAL")
    if path:
        journal.append(
            path,
            {
                "event": "direct",
                "twin": twin,
                "label": label,
                "at": time.time(),
                "pid": os.getpid(),
            },
        )
    raise RuntimeError(f"{twin} fails")
