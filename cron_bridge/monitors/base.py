"""What a monitor is told (``CheckIn``) and does (``Monitor``), and how its messages are said:
once per job and target, with the credentials of the URLs they name masked."""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from cron_bridge.plumbing.redaction import redact_head, redact_url
from cron_bridge.schedules import Schedule

__all__ = ["CheckIn", "Monitor", "host_of", "masked", "warn_once"]

log = logging.getLogger("cron_bridge.monitors")

_NAMESPACE = uuid.UUID("6f1c3a52-8d1e-4f7a-9b7e-0c9d2b5e4a10")  # check-in ids, per attempt
SHOWN = 200  # characters of a value a message shows


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckIn:
    """One attempt of one occurrence, as a monitor sees it."""

    job: str
    schedule: Schedule
    misfire_grace: timedelta
    timeout: timedelta | None
    occurrence_id: str
    attempt: int
    replica: str

    @property
    def id(self) -> str:
        """The same for the attempt's start and end, different for each attempt."""
        return str(uuid.uuid5(_NAMESPACE, f"{self.occurrence_id}#{self.attempt}"))


@runtime_checkable
class Monitor(Protocol):
    """What a monitor does. ``check`` runs at declaration (raise ``ConfigError`` for a job it
    cannot watch); ``started`` and ``finished`` around each attempt, on the run's own thread
    (the beat's dispatch pool for an inline job): they must not raise, and must not block
    (the built-ins hand their calls to a thread of their own, ``monitors.calls``)."""

    def check(
        self, job: str, schedule: Schedule, misfire_grace: timedelta, timeout: timedelta | None
    ) -> None: ...

    def started(self, check_in: CheckIn) -> None: ...

    def finished(self, check_in: CheckIn, *, ok: bool, duration: float | None) -> None: ...


def masked(value: object) -> str:
    """``value`` as a message may show it: cut to ``SHOWN`` characters, a URL's whole user-info
    as ``***`` (a DSN's key has no password, and is one), secret parameters and passwords in
    the rest as ``***`` (``cron_bridge.plumbing.redaction``)."""
    # Cut by redact_head, which knows it cut: a password whose "@" fell past the cut is
    # masked all the same.
    text = redact_head(str(value), SHOWN * 4)
    try:
        parts = urlsplit(text)
    except ValueError:
        return "***"
    if "@" in parts.netloc:
        text = urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))
    elif "@" in text and "://" not in text:  # a DSN without its scheme: key@host
        text = "***@" + text.rpartition("@")[2]
    return redact_head(redact_url(text), SHOWN)


def host_of(url: str) -> str:
    """The host (and port) a URL names, without its user-info."""
    try:
        return urlsplit(url).netloc.rpartition("@")[2][:SHOWN]
    except ValueError:
        return "***"


_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(key: str, message: str, *args: object) -> None:
    """Log a monitor's failure once per job and target (a monitor down is not news twice)."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(message, *args)
