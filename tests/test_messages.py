"""The worker trusts no message: cron-bridge metadata is checked before anything runs or is
recorded, a bad optional field is ignored, and every reader survives a malformed record."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cron_bridge import InvalidMessage, JobContext, Occurrence, StoreUnavailable
from cron_bridge.beat.replica import Beat
from cron_bridge.control.audit import audit
from cron_bridge.http.dashboard import View, job_page, overview_page
from cron_bridge.jobs import Job, declare
from cron_bridge.run import delivery as worker
from cron_bridge.stores import MemoryStore, RunRecord, Store
from tests.blips import LockBlips
from tests.conftest import StoreKit

RAN: list[str] = []


def handler(ctx: JobContext) -> str:
    RAN.append(ctx.occurrence_id)
    return "done"


def job_named(name: str) -> Job:
    return declare(name, every="1m", adapter="test", task=name, handler=handler)


@pytest.fixture
def store() -> Iterator[MemoryStore]:
    shared = MemoryStore()
    worker.configure(shared)
    RAN.clear()
    yield shared
    worker.configure(None)


def deliver(job: Job, meta: Any, attempt: int = 1) -> worker.Delivery:
    return worker.run_delivery(job, meta, attempt=attempt, call=handler)


def meta_for(job: str, at: datetime, **extra: Any) -> dict[str, Any]:
    occurrence = Occurrence(job=job, scheduled_at=at)
    return {"job": job, "occurrence_id": occurrence.id, "attempts": 1, **extra}


NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "meta",
    [
        meta_for("payroll.pay", NOW),  # another job's occurrence
        {**meta_for("reports.daily", NOW), "job": "payroll.pay"},  # another job's name
        {"occurrence_id": "reports.daily@yesterday"},
        {"occurrence_id": 42},
        {"occurrence_id": None},
        {"occurrence_id": "reports.daily@" + "9" * 400},
        "reports.daily@2026-11-30T12:00:00.000Z",  # not an object
        meta_for("reports.daily", NOW, copy=7),  # a copy's name that is not text
        meta_for("reports.daily", NOW, copy=""),
        meta_for("reports.daily", NOW, copy="a" * 65),
        meta_for("reports.daily", NOW, copy="3f9c\n\x1b[2J"),  # control characters
        meta_for("reports.daily", NOW, copy="k\u00e9y"),  # not ASCII
        meta_for("reports.daily", NOW, copy=["3f9c"]),
    ],
)
def test_a_message_for_another_job_or_malformed_never_runs_nor_records(
    store: MemoryStore, meta: Any
) -> None:
    """A foreign or malformed occurrence is refused before the handler and the record."""
    job = job_named("reports.daily")
    with pytest.raises(InvalidMessage):
        deliver(job, meta)
    assert RAN == []
    assert store.history("reports.daily", 10) == [] and store.history("payroll.pay", 10) == []


@pytest.mark.parametrize("attempt", [0, -3, True, 10**9])
def test_an_attempt_that_is_not_a_try_number_is_refused(store: MemoryStore, attempt: Any) -> None:
    """The handler is never given a negative, zero or absurd attempt number."""
    job = job_named("reports.daily")
    with pytest.raises(InvalidMessage):
        deliver(job, meta_for("reports.daily", NOW), attempt=attempt)
    assert RAN == []


@pytest.mark.parametrize(
    "trace",
    ["00-abc", {"traceparent": 7}, {"traceparent": "x" * 5000}, ["traceparent"], {1: "a"}],
)
def test_a_malformed_trace_context_is_ignored_and_the_run_is_recorded(
    store: MemoryStore, trace: Any
) -> None:
    """The optional trace field never costs the occurrence: the run completes, recorded."""
    job = job_named("reports.daily")
    delivery = deliver(job, meta_for("reports.daily", NOW, trace=trace))
    assert delivery.record.outcome == "completed" and delivery.value == "done"
    assert [r.outcome for r in store.history("reports.daily", 10)] == ["completed"]


@pytest.mark.parametrize("year", [1, 9, 999, 1970, 2026, 9999])
def test_occurrence_ids_round_trip_for_every_year(year: int) -> None:
    """Four-digit years, always: what an id says is what parse reads back."""
    at = datetime(year, 3, 4, 5, 6, 7, 890_000, tzinfo=UTC)
    occurrence = Occurrence(job="reports.daily", scheduled_at=at)
    assert occurrence.id == f"reports.daily@{year:04d}-03-04T05:06:07.890Z"
    assert Occurrence.parse(occurrence.id) == occurrence


def test_a_year_one_occurrence_written_by_a_worker_is_read_by_the_audit(
    store: MemoryStore,
) -> None:
    """A hostile message for year 1 is run (it is this job's) and the audit still reads it."""
    job = job_named("reports.daily")
    deliver(job, meta_for("reports.daily", datetime(1, 1, 2, tzinfo=UTC)))
    found = audit(store, "reports.daily", datetime(1, 1, 1, tzinfo=UTC), NOW)
    assert found.once == 1
    assert "reports.daily@0001-01-02T00:00:00.000Z" in {
        r.occurrence_id for r in store.history("reports.daily", 10)
    }


def bypassing_validation(**fields: Any) -> RunRecord:
    """A record as a hostile peer with write access to the store could write it."""
    record = object.__new__(RunRecord)
    defaults = {"attempt": 1, "reason": None, "duration_ms": None, "error": None, "traceback": None}
    for name, value in {**defaults, **fields}.items():
        object.__setattr__(record, name, value)
    return record


def test_every_reader_survives_a_malformed_record(shared_kit: StoreKit) -> None:
    """History skips what it cannot read; the audit and the dashboard carry on."""
    store: Store = shared_kit.open()
    good = RunRecord(
        job="reports.daily",
        occurrence_id="reports.daily@2026-11-30T11:00:00.000Z",
        outcome="completed",
        trigger="queue",
        replica="w1",
        started_at=NOW - timedelta(hours=1),
    )
    store.record_many(
        [
            good,
            bypassing_validation(
                job="reports.daily",
                occurrence_id="reports.daily@1-01-01T00:00Z",
                outcome="completed",
                trigger="queue",
                replica="w1",
                started_at=NOW,
            ),
            bypassing_validation(
                job="reports.daily",
                occurrence_id="x",
                outcome="exploded",
                trigger="queue",
                replica="w1",
                started_at=NOW,
            ),
            bypassing_validation(
                job="reports.daily",
                occurrence_id="y",
                outcome="completed",
                trigger="queue",
                replica="w1",
                started_at=NOW,
                attempt=-4,
            ),
        ]
    )
    history = store.history("reports.daily", 10)
    assert good in history
    assert all(r.outcome != "exploded" and r.attempt >= 1 for r in history)
    found = audit(store, "reports.daily", NOW - timedelta(days=1), NOW)
    assert found.once == 1
    beat = Beat(store, [job_named("reports.daily")])
    page = overview_page(View(beat, {}), "/_scheduler", "token")
    assert "reports.daily" in page
    page = job_page(View(beat, {}), "/_scheduler", "token", *View(beat, {}).jobs()[0])
    assert "reports.daily" in page and "exploded" not in page


def test_a_cluster_task_direct_call_still_runs_as_manual(store: MemoryStore) -> None:
    """No metadata at all (``.delay()``, ``.send()``): a fresh manual occurrence, as before."""
    job = job_named("reports.daily")
    delivery = deliver(job, None)
    assert delivery.record.trigger == "manual" and delivery.record.outcome == "completed"


def test_a_worker_waits_out_a_store_blip_within_the_grace() -> None:
    """The store is down for the first three asks: the delivery asks again and runs once."""
    store = LockBlips(3)
    worker.configure(store)
    RAN.clear()
    try:
        job = job_named("reports.daily")
        delivery = deliver(job, meta_for("reports.daily", NOW))
    finally:
        worker.configure(None)
    assert delivery.record.outcome == "completed" and len(RAN) == 1
    assert [r.outcome for r in store.history("reports.daily", 10)] == ["completed"]


def test_a_worker_gives_the_failure_to_the_queue_after_the_grace() -> None:
    """A store down for longer than misfire_grace: StoreUnavailable to the queue library,
    whose own retries apply; the handler never ran."""
    store = LockBlips(10**6)
    worker.configure(store)
    RAN.clear()
    try:
        job = declare(
            "reports.daily",
            every="1m",
            adapter="test",
            task="reports.daily",
            handler=handler,
            misfire_grace="1s",
        )
        with pytest.raises(StoreUnavailable):
            deliver(job, meta_for("reports.daily", NOW))
    finally:
        worker.configure(None)
    assert RAN == []
