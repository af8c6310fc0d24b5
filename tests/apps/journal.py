"""What handlers in the test apps write down: one JSON line per event, appended atomically."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from cron_bridge import JobContext


def write(event: str, ctx: JobContext, **extra: Any) -> None:
    """Append one line to the file named by CB_TEST_JOURNAL (a no-op without it)."""
    path = os.environ.get("CB_TEST_JOURNAL")
    if not path:
        return
    line = {
        "event": event,
        "job": ctx.name,
        "occurrence_id": ctx.occurrence_id,
        "trigger": ctx.trigger,
        "attempt": ctx.attempt,
        "replica": ctx.replica,
        "pid": os.getpid(),
        "at": time.time(),
        **extra,
    }
    append(path, line)


def append(path: str, line: dict[str, Any]) -> None:
    """Append one JSON line: one write call with O_APPEND, so processes never interleave."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def read(path: Path) -> list[dict[str, Any]]:
    """Every line written so far."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
