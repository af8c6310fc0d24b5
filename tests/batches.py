"""What the adapters' batch tests share: a handler to make tasks of, and a batch of
dispatches split between the send threads, some to a broker that is down."""

from __future__ import annotations

from typing import Any


def report(ctx: Any) -> None:
    """A module-level handler the tests make their tasks and actors of."""


def a_batch(jobs: dict[str, Any], good: str, bad: str, every: int) -> tuple[list[Any], set[int]]:
    """A batch large enough to be split between the send threads: every ``every``-th dispatch
    goes to the job whose broker is down; each occurrence is its own minute."""
    from datetime import UTC, datetime, timedelta

    from cron_bridge.jobs import Occurrence
    from cron_bridge.queues.adapter import Dispatch
    from cron_bridge.queues.sending import SPLIT_MIN, THREADS

    at = datetime(2026, 5, 1, 12, tzinfo=UTC)
    size = 3 * THREADS * SPLIT_MIN
    failing = {n for n in range(size) if n % every == every // 2}
    dispatches = [
        Dispatch(
            job=jobs[bad if n in failing else good],
            occurrence=Occurrence(job=good, scheduled_at=at + timedelta(minutes=n)),
            trigger="schedule",
            replica="r1",
        )
        for n in range(size)
    ]
    return dispatches, failing
