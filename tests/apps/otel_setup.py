"""OpenTelemetry's SDK in a test app's processes, writing every finished span as a JSON line
to the file named by CB_TEST_SPANS (nothing without it)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from tests.apps import journal


def install() -> None:
    path = os.environ.get("CB_TEST_SPANS")
    if not path:
        return
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class LineExporter(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            for span in spans:
                context = span.get_span_context()
                assert context is not None
                journal.append(
                    path,
                    {
                        "name": span.name,
                        "kind": span.kind.name,
                        "trace_id": f"{context.trace_id:032x}",
                        "span_id": f"{context.span_id:016x}",
                        "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
                        "attributes": dict(span.attributes or {}),
                        "pid": os.getpid(),
                    },
                )
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(LineExporter()))
    trace.set_tracer_provider(provider)
