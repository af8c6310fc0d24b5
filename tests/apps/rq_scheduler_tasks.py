"""Plain functions rq-scheduler's jobs call in the twin test (tests/e2e/
test_rq_scheduler_import.py), run both by rq-scheduler's pickle worker and, once imported, by
cron-bridge's JSON worker; each writes down what RQ told it (its job id, its meta)."""

from __future__ import annotations

import os
import time

from rq import get_current_job

from tests.apps import journal


def _note(event: str, label: str) -> None:
    path = os.environ.get("CB_TEST_JOURNAL")
    current = get_current_job()
    if path and current is not None:
        journal.append(
            path,
            {
                "event": event,
                "label": label,
                "job_id": current.id,
                "owner": current.meta.get("owner"),
                "at": time.time(),
            },
        )


def nap(label: str, seconds: float) -> str:
    """Runs ``seconds``: killed first by a shorter RQ job timeout."""
    _note("start", label)
    time.sleep(seconds)
    _note("end", label)
    return "rested"


def tell(label: str) -> str:
    """Says it ran, with the ``owner`` of its meta."""
    _note("ran", label)
    return "told"
