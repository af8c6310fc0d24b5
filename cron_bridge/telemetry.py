"""Spans and metrics: OpenTelemetry when ``opentelemetry-api`` is installed, else nothing.

Every run is a span ``scheduler.run <job>`` with the attributes job, scope, trigger,
occurrence, replica, attempt and outcome. The beat's span around an enqueue puts its W3C trace
context in the message (``trace`` in the occurrence metadata), and the worker's span is its
child, so one trace shows the claim, the enqueue and every attempt.

Metrics, from every run record: ``cron_bridge.runs`` (counter by job and outcome, skips
included: a lost claim counts as ``skipped-claimed`` though it writes no record),
``cron_bridge.duration`` (ms) and ``cron_bridge.lag`` (ms between the occurrence's scheduled
time and the run's start). They go to the OpenTelemetry meter, and to a Prometheus registry
once ``serve_metrics`` is called (``cron-bridge beat --metrics HOST:PORT``, needs
``prometheus-client``), with the served beat's own gauges (``watch_replica``): whether it
runs, whether the store answers it, its clock's offset and the live replicas it sees.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cron_bridge.errors import ConfigError
from cron_bridge.jobs import Job, Occurrence

if TYPE_CHECKING:
    from cron_bridge.stores.records import RunRecord

__all__ = [
    "NO_SPAN",
    "RunSpan",
    "count",
    "inject",
    "observe",
    "run_span",
    "serve_metrics",
    "tracing",
]

log = logging.getLogger(__name__)

OTEL: bool
try:
    from opentelemetry import metrics as otel_metrics
    from opentelemetry import propagate, trace

    OTEL = True
except ImportError:  # the [otel] extra is optional
    OTEL = False

SCOPE = "cron_bridge"
LAG_OUTCOMES = frozenset({"enqueued", "completed", "failed", "aborted"})


class RunSpan:
    """The span of one run (a no-op without OpenTelemetry); ``outcome`` is set at the end."""

    def __init__(self, span: Any) -> None:
        self._span = span

    def set_outcome(self, outcome: str, error: str | None = None) -> None:
        if self._span is None:
            return
        self._span.set_attribute("outcome", outcome)
        if outcome == "failed":
            from opentelemetry.trace import Status, StatusCode

            self._span.set_status(Status(StatusCode.ERROR, error))

    def carrier(self) -> dict[str, str]:
        """The W3C trace context of this span, to put in a message."""
        if self._span is None or not OTEL or not self._span.get_span_context().is_valid:
            return {}  # no provider set: nothing to carry
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(self._span))
        return carrier

    def end(self) -> None:
        if self._span is not None:
            self._span.end()


NO_SPAN = RunSpan(None)


def tracing() -> bool:
    """Whether a tracer provider is set. Without one, OpenTelemetry's default makes spans
    that record nothing and carry no context: the beat skips them (a burst starts thousands;
    it asks once per batch)."""
    return OTEL and not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


@functools.cache
def _tracer() -> Any:
    """This library's tracer: OpenTelemetry's proxy, which follows the provider set later."""
    return trace.get_tracer(SCOPE)


def start_span(
    job: Job,
    occurrence: Occurrence,
    *,
    trigger: str,
    replica: str,
    attempt: int,
    parent: Mapping[str, str] | None = None,
    kind: str = "internal",
) -> RunSpan:
    """Start ``scheduler.run <job>``; the caller ends it. ``parent``: a carrier from a message."""
    if not OTEL or (parent is None and not tracing()):
        # With a parent, the no-op span still carries the parent's context to what the
        # handler calls, as OpenTelemetry's default does.
        return NO_SPAN
    context = propagate.extract(dict(parent)) if parent else None
    span = _tracer().start_span(
        f"scheduler.run {job.name}",
        context=context,
        kind={
            "internal": trace.SpanKind.INTERNAL,
            "producer": trace.SpanKind.PRODUCER,
            "consumer": trace.SpanKind.CONSUMER,
        }[kind],
        attributes={
            "job": job.name,
            "scope": job.scope,
            "trigger": trigger,
            "occurrence": occurrence.id,
            "replica": replica,
            "attempt": attempt,
        },
    )
    return RunSpan(span)


@contextmanager
def run_span(
    job: Job,
    occurrence: Occurrence,
    *,
    trigger: str,
    replica: str,
    attempt: int,
    parent: Mapping[str, str] | None = None,
) -> Iterator[RunSpan]:
    """``start_span`` as the current span for the block (a handler's own spans nest in it)."""
    span = start_span(
        job,
        occurrence,
        trigger=trigger,
        replica=replica,
        attempt=attempt,
        parent=parent,
        kind="consumer" if parent else "internal",
    )
    if span._span is None:
        yield span
        return
    try:
        with trace.use_span(span._span, end_on_exit=False, record_exception=False):
            yield span
    finally:
        span.end()


def inject() -> dict[str, str]:
    """The W3C trace context of the current span (empty without OpenTelemetry)."""
    if not OTEL:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


class _Instruments:
    """The three metrics, on the OpenTelemetry meter and, once served, in Prometheus."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._otel: tuple[Any, Any, Any] | None = None
        self._prometheus: tuple[Any, Any, Any] | None = None

    def otel(self) -> tuple[Any, Any, Any] | None:
        if not OTEL:
            return None
        if self._otel is not None:  # every record asks: no lock once made
            return self._otel
        with self._lock:
            if self._otel is None:
                meter = otel_metrics.get_meter(SCOPE)
                self._otel = (
                    meter.create_counter("cron_bridge.runs", description="Run records by outcome"),
                    meter.create_histogram("cron_bridge.duration", unit="ms"),
                    meter.create_histogram("cron_bridge.lag", unit="ms"),
                )
            return self._otel

    def enable_prometheus(self, registry: Any) -> None:
        from prometheus_client import Counter, Histogram

        buckets = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)
        with self._lock:
            self._prometheus = (
                Counter(
                    "cron_bridge_runs",
                    "Run records by job and outcome, skips included.",
                    ["job", "outcome"],
                    registry=registry,
                ),
                Histogram(
                    "cron_bridge_duration_ms",
                    "How long runs took, in milliseconds.",
                    ["job"],
                    registry=registry,
                    buckets=buckets,
                ),
                Histogram(
                    "cron_bridge_lag_ms",
                    "How late runs started after their occurrence, in ms.",
                    ["job"],
                    registry=registry,
                    buckets=buckets,
                ),
            )

    def observe(self, record: RunRecord) -> None:
        lag = None
        if record.outcome in LAG_OUTCOMES:
            scheduled = _scheduled_at(record.occurrence_id)
            if scheduled is not None:
                lag = max(0.0, (record.started_at - scheduled).total_seconds() * 1000)
        otel = self.otel()
        if otel is not None:
            runs, duration, late = otel
            runs.add(1, {"job": record.job, "outcome": record.outcome})
            if record.duration_ms is not None:
                duration.record(record.duration_ms, {"job": record.job})
            if lag is not None:
                late.record(lag, {"job": record.job, "outcome": record.outcome})
        prometheus = self._prometheus
        if prometheus is not None:
            runs, duration, late = prometheus
            runs.labels(record.job, record.outcome).inc()
            if record.duration_ms is not None:
                duration.labels(record.job).observe(record.duration_ms)
            if lag is not None:
                late.labels(record.job).observe(lag)

    def count(self, job: str, outcome: str, n: int) -> None:
        """Count ``n`` outcomes that left no record (the claims a replica lost)."""
        otel = self.otel()
        if otel is not None:
            otel[0].add(n, {"job": job, "outcome": outcome})
        if self._prometheus is not None:
            self._prometheus[0].labels(job, outcome).inc(n)


_instruments = _Instruments()


def _scheduled_at(occurrence_id: str) -> datetime | None:
    """The scheduled time an occurrence id names; None for an id this version cannot read
    (no lag, still counted)."""
    job, _, stamp = occurrence_id.rpartition("@")
    at = _stamp(stamp)  # a burst's records share a few times: each parsed once
    if at is None or not job:
        return None
    return at


@functools.lru_cache(maxsize=256)
def _stamp(stamp: str) -> datetime | None:
    try:
        return Occurrence.parse(f"x@{stamp}").scheduled_at
    except ValueError:
        return None


def observe(record: RunRecord) -> None:
    """Count a run record in the metrics; never raises."""
    try:
        _instruments.observe(record)
    except Exception:
        log.exception("could not record metrics for %s", record.occurrence_id)


def count(job: str, outcome: str, n: int = 1) -> None:
    """Count outcomes in the metrics as ``observe`` does, without a record; never raises."""
    try:
        _instruments.count(job, outcome, n)
    except Exception:
        log.exception("could not record metrics for %s", job)


def serve_metrics(host: str, port: int) -> Any:
    """Serve the metrics in Prometheus text format on http://host:port/metrics.

    Returns:
        The HTTP server (``shutdown()`` stops it).

    Raises:
        ConfigError: prometheus-client is not installed.
        OSError: the address cannot be bound.
    """
    try:
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError:
        raise ConfigError(
            'serving metrics needs prometheus-client: pip install "cron-bridge[metrics]"',
            option="metrics",
            value=f"{host}:{port}",
        ) from None
    registry = CollectorRegistry()
    _instruments.enable_prometheus(registry)
    registry.register(_replica_gauges)
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server


REPLICAS_EVERY = 5.0  # seconds: a scrape reads the store's live replicas at most this often


class _ReplicaGauges:
    """What a served beat says of itself at each scrape, for alerts: whether its loop runs
    (``cron_bridge_up``), whether the store answered it last (``cron_bridge_store_up``), its
    clock's offset from the store's (``cron_bridge_clock_offset_seconds``), and how many
    replicas the store lists alive (``cron_bridge_replicas_live``, read at most every
    ``REPLICAS_EVERY`` seconds; the last count stands while the store does not answer)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._health: Callable[[], Mapping[str, Any]] | None = None
        self._live: Callable[[], int] | None = None
        self._count: int | None = None
        self._counted_at = -math.inf

    def watch(self, health: Callable[[], Mapping[str, Any]], live: Callable[[], int]) -> None:
        with self._lock:
            self._health, self._live = health, live
            self._count, self._counted_at = None, -math.inf

    def describe(self) -> list[Any]:
        return []  # nothing is collected when the registry is made: no beat yet

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        with self._lock:
            health, live = self._health, self._live
        if health is None or live is None:
            return
        found = health()
        replica = str(found.get("replica", ""))

        def gauge(name: str, text: str, value: float) -> Any:
            family = GaugeMetricFamily(name, text, labels=["replica"])
            family.add_metric([replica], value)
            return family

        yield gauge(
            "cron_bridge_up",
            "1 while this replica's timer loop runs.",
            1.0 if found.get("running") else 0.0,
        )
        yield gauge(
            "cron_bridge_store_up",
            "1 when the store answered this replica last.",
            1.0 if found.get("store_reachable") else 0.0,
        )
        offset = found.get("clock_offset_ms")
        if isinstance(offset, int | float) and math.isfinite(offset):
            text = "How far the store's clock is ahead of this replica's."
            yield gauge("cron_bridge_clock_offset_seconds", text, offset / 1000)
        count = self._live_count(live)
        if count is not None:
            text = "Replicas whose heartbeat the store holds, as this one reads it."
            yield gauge("cron_bridge_replicas_live", text, count)

    def _live_count(self, live: Callable[[], int]) -> int | None:
        now = time.monotonic()
        if now - self._counted_at >= REPLICAS_EVERY:
            self._counted_at = now
            try:
                self._count = live()
            except Exception:  # a scrape never fails for the store
                log.debug("could not count the live replicas", exc_info=True)
        return self._count


_replica_gauges = _ReplicaGauges()


def watch_replica(health: Callable[[], Mapping[str, Any]], live: Callable[[], int]) -> None:
    """Report this beat's health (``Beat.health``) and the store's live replicas (a count)
    on the served metrics (``serve_metrics``)."""
    _replica_gauges.watch(health, live)
