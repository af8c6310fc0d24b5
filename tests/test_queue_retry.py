"""A retry the queue library scheduled itself (``QueueRetry``, as the Celery adapter raises for
``self.retry()`` and ``autoretry_for``): recorded as a failed attempt that is not the last, with
the handler's own error, and given back to the library, never retried again by the guard."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from cron_bridge import JobContext, Occurrence
from cron_bridge.errors import QueueRetry
from cron_bridge.jobs import declare
from cron_bridge.run import delivery as worker
from cron_bridge.stores import MemoryStore


class LibraryRetry(Exception):
    """A queue library's own "tried again later" signal (Celery's ``Retry``)."""


@pytest.fixture
def store() -> Iterator[MemoryStore]:
    shared = MemoryStore()
    worker.configure(shared)
    yield shared
    worker.configure(None)


def retried(ctx: JobContext) -> None:
    cause = RuntimeError(f"try {ctx.attempt} fails")
    raise QueueRetry(LibraryRetry("scheduled"), cause) from cause


@pytest.mark.parametrize("attempts", [1, 3])
def test_a_library_retry_is_an_attempt_that_is_not_the_last(
    store: MemoryStore, caplog: pytest.LogCaptureFixture, attempts: int
) -> None:
    """Whatever the job's attempts: recorded failed with the cause, logged as attempts remain,
    no retry of the guard's own, and the library's signal raised again."""
    job = declare(
        "reports.own", every="1m", adapter="test", task="t", attempts=attempts, handler=retried
    )
    occurrence = Occurrence(job=job.name, scheduled_at=datetime(2026, 12, 1, tzinfo=UTC))
    meta = {"job": job.name, "occurrence_id": occurrence.id, "attempts": attempts}
    with caplog.at_level(logging.WARNING, logger="cron_bridge"):
        delivery = worker.run_delivery(job, meta, attempt=attempts, call=retried)
    assert delivery.retry_in is None
    assert (delivery.record.outcome, delivery.record.error) == (
        "failed",
        f"RuntimeError: try {attempts} fails",
    )
    assert "RuntimeError" in (delivery.record.traceback or "")
    with pytest.raises(LibraryRetry):
        delivery.raise_if_failed()
    [line] = [r for r in caplog.records if "reports.own" in r.getMessage()]
    assert line.levelno == logging.WARNING and "attempts remain" in line.getMessage()
    assert [r.outcome for r in store.history(job.name, 5)] == ["failed"]
