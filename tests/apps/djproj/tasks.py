"""The project's task: it writes down what arrived, for the test to compare with the rows."""

from __future__ import annotations

import os
from typing import Any

from celery import shared_task

from tests.apps import journal


@shared_task(name="djproj.tick", bind=True)
def tick(self: Any, label: str = "", n: int = 0) -> None:
    headers = self.request.headers or {}
    meta = headers.get("cron_bridge") or {}
    path = os.environ.get("CB_TEST_JOURNAL")
    if path:
        journal.append(
            path,
            {
                "label": label,
                "n": n,
                "periodic_task_name": headers.get("periodic_task_name"),
                "team": headers.get("team"),
                "job": meta.get("job"),
                "occurrence_id": meta.get("occurrence_id"),
                "replica": meta.get("replica"),
                "queue": (self.request.delivery_info or {}).get("routing_key"),
                "priority": (self.request.delivery_info or {}).get("priority"),
                "expires": self.request.expires,
            },
        )


@shared_task(name="djproj.fail")
def fail() -> None:
    """A task that fails, as a run whose error a monitor should see."""
    raise RuntimeError("the ledger is locked")
