"""Run records as table rows, shared by the SQL stores."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cron_bridge.stores.records import RunRecord

__all__ = ["RUN_COLUMNS", "record_from_row", "record_to_row"]

RUN_COLUMNS = (
    "job",
    "occurrence_id",
    "outcome",
    "reason",
    "trigger",
    "attempt",
    "replica",
    "started_at",
    "duration_ms",
    "error",
    "traceback",
)


def record_to_row(record: RunRecord, *, text_times: bool = True) -> tuple[Any, ...]:
    """The record as values in ``RUN_COLUMNS`` order; times as ISO text unless told not to."""
    started: Any = record.started_at.isoformat() if text_times else record.started_at
    return (
        record.job,
        record.occurrence_id,
        record.outcome,
        record.reason,
        record.trigger,
        record.attempt,
        record.replica,
        started,
        record.duration_ms,
        record.error,
        record.traceback,
    )


_TEXT_COLUMNS = frozenset(RUN_COLUMNS) - {"attempt", "duration_ms"}


def record_from_row(row: tuple[Any, ...], columns: tuple[str, ...] = RUN_COLUMNS) -> RunRecord:
    """The record a row in ``columns`` order holds (``RUN_COLUMNS``, or a leading part of it
    where the table lacks the newer columns), its text columns as the server sent them (bytes).

    Raises:
        ValueError: a text column that is not UTF-8 text, or any value ``RunRecord`` refuses.
    """
    values = dict(zip(columns, row, strict=True))
    for name in _TEXT_COLUMNS & values.keys():
        value = values[name]
        if isinstance(value, bytes | bytearray | memoryview):
            values[name] = bytes(value).decode()  # UnicodeDecodeError is a ValueError
    started = values["started_at"]
    if isinstance(started, str):
        values["started_at"] = datetime.fromisoformat(started)
    return RunRecord(**values)
