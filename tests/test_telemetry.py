"""Spans and metrics of inline runs, in one process, with OpenTelemetry's SDK in memory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cron_bridge import Beat, JobContext, declare
from cron_bridge.stores import MemoryStore
from cron_bridge.testing import FakeClock
from tests.test_beat import START
from tests.waiting import wait_for

# OpenTelemetry's SDK.
pytestmark = pytest.mark.extras

_SPANS = InMemorySpanExporter()
_METRICS = InMemoryMetricReader()


@pytest.fixture(scope="module", autouse=True)
def sdk() -> None:
    """The global providers can be set once per process; this module's tests share them."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_SPANS))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[_METRICS]))


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    _SPANS.clear()
    yield _SPANS


def points(name: str) -> list[Any]:
    data = _METRICS.get_metrics_data()
    assert data is not None
    return [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


def test_an_inline_run_is_a_span_with_its_attributes_and_counts(
    spans: InMemorySpanExporter,
) -> None:
    """scheduler.run <job> with job, scope, trigger, occurrence, replica, attempt and outcome;
    a failure sets the span's status; runs, duration and lag are recorded."""

    def broken(ctx: JobContext) -> None:
        raise RuntimeError("ledger closed")

    clock = FakeClock(START)
    store = MemoryStore(clock=clock)
    jobs = [
        declare("otel.ok", every="1s", target="inline", handler=lambda ctx: None),
        declare("otel.broken", every="1s", target="inline", handler=broken),
    ]
    beat = Beat(store, jobs, clock=clock, replica_id="r1")
    beat.start()
    try:
        clock.advance(1)
        wait_for(lambda: len(spans.get_finished_spans()) == 2, 30, "two spans", every=0.01)
    finally:
        beat.stop()
    by_name = {span.name: span for span in spans.get_finished_spans()}
    ok = by_name["scheduler.run otel.ok"]
    assert dict(ok.attributes or {}) == {
        "job": "otel.ok",
        "scope": "cluster",
        "trigger": "schedule",
        "occurrence": "otel.ok@2026-05-01T12:00:01.000Z",
        "replica": "r1",
        "attempt": 1,
        "outcome": "completed",
    }
    assert ok.kind == trace.SpanKind.INTERNAL
    failed = by_name["scheduler.run otel.broken"]
    assert (failed.attributes or {})["outcome"] == "failed"
    assert failed.status.status_code == trace.StatusCode.ERROR
    runs = {
        (p.attributes["job"], p.attributes["outcome"]): p.value for p in points("cron_bridge.runs")
    }
    assert runs[("otel.ok", "completed")] >= 1
    assert runs[("otel.broken", "failed")] >= 1
    assert any(p.attributes["job"] == "otel.ok" for p in points("cron_bridge.duration"))
    assert any(p.attributes["job"] == "otel.ok" for p in points("cron_bridge.lag"))
