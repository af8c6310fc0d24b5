"""Declarations this process read and will not run: the registrations of another tool's
config that the tool itself refuses (``rq cron`` logs one and runs the others), so a drop-in
that runs the others says which ones, in one place that ``cron-bridge list``, ``/healthz``
and the dashboard read. A job that silently never runs is the failure this is for: each one
is logged at ERROR once, and stays listed for the life of the process. What is kept is
redacted (a URL's password, ``password=...``): ``/healthz``, which needs no token, shows it."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from cron_bridge.plumbing.redaction import redact_text

__all__ = ["Refusal", "clear", "refuse", "refused"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Refusal:
    """One declaration not run.

    Attributes:
        name: the declaration's own name, as its tool shows it (any text).
        source: where it was declared (``rq cron``).
        reason: why it is not run, in one line.
    """

    name: str
    source: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "reason": self.reason}


_lock = threading.Lock()
_refused: dict[Refusal, None] = {}  # in the order they were read, each once


def refuse(name: str, source: str, reason: str) -> Refusal:
    """Record that the declaration ``name`` of ``source`` is not run, and log it at ERROR the
    first time (a config read twice, by a listing and a beat, says it once)."""
    refusal = Refusal(
        redact_text(str(name)), str(source), redact_text(" ".join(str(reason).split()))
    )
    with _lock:
        new = refusal not in _refused
        _refused[refusal] = None
    if new:
        log.error(
            "%s registration %r is refused and will not run: %s",
            refusal.source,
            refusal.name,
            refusal.reason,
        )
    return refusal


def refused() -> list[Refusal]:
    """The declarations refused so far, in the order they were read."""
    with _lock:
        return list(_refused)


def clear(source: str | None = None) -> None:
    """Forget the refusals of ``source`` (all with None): a config read again says its own."""
    with _lock:
        for refusal in [r for r in _refused if source is None or r.source == source]:
            del _refused[refusal]
