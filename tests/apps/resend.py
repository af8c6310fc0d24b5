"""Sends one occurrence of the scenario job to its queue, as the beat sends it; run twice for
the same time, the second message is what a redelivery brings back (a lost ack, a visibility
timeout, a requeue after a worker's heartbeat).

    python -m tests.apps.resend tests.apps.celery_app 2026-11-30T12:00:00+00:00
"""

from __future__ import annotations

import importlib
import sys
from datetime import datetime

from cron_bridge.queues.adapter import Dispatch
from cron_bridge.queues.installed import get_adapter
from cron_bridge.registry import default_registry
from tests.apps import scenarios


def main() -> None:
    importlib.import_module(sys.argv[1])
    job = default_registry.get(scenarios.JOB)
    assert job is not None and job.adapter is not None, scenarios.JOB
    occurrence = job.occurrence(datetime.fromisoformat(sys.argv[2]))
    dispatch = Dispatch(job=job, occurrence=occurrence, trigger="schedule", replica="resend")
    (error,) = get_adapter(job.adapter).enqueue_many([dispatch])
    if error is not None:
        raise SystemExit(f"could not send {occurrence.id}: {error}")


if __name__ == "__main__":
    main()
