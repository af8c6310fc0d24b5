"""Check-ins for every job: a cron monitor told when each run starts and how it ends.

``@cluster_task(..., monitor="sentry")`` (or ``monitor=Ping(...)``, or ``CRON_BRIDGE_MONITOR=
sentry`` / ``cron-bridge beat --monitor sentry`` for every job without its own) sends, from
the process that runs the attempt under the guard (the worker for a queue job, the beat for an
inline one), an in-progress check-in when the handler starts and an ok or error one when it
ends: once per attempt of an occurrence, so a retried run checks in as the queue's attempts
happen, and never from the replicas that stood aside. Two built-ins, behind ``Monitor``:

- ``Sentry()``: sentry-sdk's public crons API (``sentry_sdk.crons.capture_checkin``), with the
  monitor config derived from the schedule: a crontab or a whole-minute interval, its zone, a
  check-in margin from ``misfire_grace`` and a max runtime from ``timeout`` (whole minutes,
  rounded up). Needs ``sentry_sdk.init(...)`` in that process, as Sentry's own integrations do;
  the closing check-in is flushed (for up to 2 s) before the run returns, for the same reason.
- ``Ping(url)``: an HTTP ping, as Healthchecks.io takes it (``url/start``, ``url``,
  ``url/fail``); or ``Ping(start=..., success=..., fail=...)`` for any other service (Cronitor's
  ``?state=run|complete|fail`` URLs). Each ping is sent where it happens (before the handler,
  after the run's record), bounded by ``timeout``, so that it leaves even from a process that
  ends with the run (RQ's work horse); a ping that fails is logged once, never the run's
  failure.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

from cron_bridge.errors import ConfigError
from cron_bridge.schedules import Cron, Every, Schedule
from cron_bridge.windows import Window

__all__ = ["CheckIn", "Monitor", "Ping", "Sentry", "default_monitor", "resolve", "set_default"]

log = logging.getLogger(__name__)

ENV = "CRON_BRIDGE_MONITOR"
BUILT_IN = ("sentry",)  # what a name (an option, an environment variable) may name
FLUSH_TIMEOUT = 2.0  # seconds the closing Sentry check-in may take to leave the process
_NAMESPACE = uuid.UUID("6f1c3a52-8d1e-4f7a-9b7e-0c9d2b5e4a10")  # check-in ids, per attempt


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
    cannot watch); ``started`` and ``finished`` around each attempt, and must not raise."""

    def check(self, job: str, schedule: Schedule, misfire_grace: timedelta,
              timeout: timedelta | None) -> None: ...  # fmt: skip

    def started(self, check_in: CheckIn) -> None: ...

    def finished(self, check_in: CheckIn, *, ok: bool, duration: float | None) -> None: ...


def _minutes(value: timedelta) -> int:
    return max(1, math.ceil(value.total_seconds() / 60))


_UNITS = (("day", 86400), ("hour", 3600), ("minute", 60))


class Sentry:
    """Check-ins through sentry-sdk's crons API, the monitor upserted from the schedule."""

    name = "sentry"

    def check(self, job: str, schedule: Schedule, misfire_grace: timedelta,
              timeout: timedelta | None) -> None:  # fmt: skip
        self.config(job, schedule, misfire_grace, timeout)

    def config(self, job: str, schedule: Schedule, misfire_grace: timedelta,
               timeout: timedelta | None) -> dict[str, Any]:  # fmt: skip
        """Sentry's monitor config for the job.

        Raises:
            ConfigError: a schedule Sentry Crons cannot express (an interval not in whole
                minutes or with an offset, a one-off run).
        """
        inner = schedule.inner if isinstance(schedule, Window) else schedule
        config: dict[str, Any] = {"checkin_margin": _minutes(misfire_grace)}
        if isinstance(inner, Cron):
            config["schedule"] = {"type": "crontab", "value": inner.expr}
            config["timezone"] = inner.tz
        elif isinstance(inner, Every) and _whole_minutes(inner):
            seconds = int(inner.interval.total_seconds())
            unit, size = next((u, s) for u, s in _UNITS if seconds % s == 0)
            config["schedule"] = {"type": "interval", "value": seconds // size, "unit": unit}
            config["timezone"] = "UTC"
        else:
            raise ConfigError("Sentry Crons takes a cron expression or an interval of whole "
                              "minutes (anchored at the epoch, no offset)", job=job,
                              option="monitor", value="sentry")  # fmt: skip
        if timeout is not None:
            config["max_runtime"] = _minutes(timeout)
        return config

    def started(self, check_in: CheckIn) -> None:
        self._send(check_in, "in_progress", None)

    def finished(self, check_in: CheckIn, *, ok: bool, duration: float | None) -> None:
        self._send(check_in, "ok" if ok else "error", duration)
        try:
            import sentry_sdk

            sentry_sdk.flush(timeout=FLUSH_TIMEOUT)
        except Exception:  # noqa: BLE001 - a monitor never fails the run
            pass

    def _send(self, check_in: CheckIn, status: str, duration: float | None) -> None:
        try:
            from sentry_sdk.crons import capture_checkin

            config: Any = self.config(check_in.job, check_in.schedule, check_in.misfire_grace,
                                      check_in.timeout)  # fmt: skip
            capture_checkin(monitor_slug=check_in.job, check_in_id=check_in.id, status=status,
                            duration=duration, monitor_config=config)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - a monitor never fails the run
            _warn_once(f"sentry:{check_in.job}", "the Sentry check-in of %s failed: %s",
                       check_in.job, exc)  # fmt: skip


def _whole_minutes(every: Every) -> bool:
    seconds = every.interval.total_seconds()
    return seconds >= 60 and seconds % 60 == 0 and not every.offset


class Ping:
    """HTTP pings when a run starts, completes and fails.

    ``Ping(url)`` pings as Healthchecks.io takes them: ``url/start``, ``url``, ``url/fail``.
    ``Ping(start=..., success=..., fail=...)`` pings the URLs given (each may be left out).
    """

    name = "ping"

    def __init__(self, url: str | None = None, *, start: str | None = None,
                 success: str | None = None, fail: str | None = None,
                 timeout: float = 5.0) -> None:  # fmt: skip
        if url is not None:
            base = url.rstrip("/")
            start, success, fail = start or f"{base}/start", success or base, fail or f"{base}/fail"
        self.urls = {"start": start, "success": success, "fail": fail}
        self.timeout = timeout

    def check(self, job: str, schedule: Schedule, misfire_grace: timedelta,
              timeout: timedelta | None) -> None:  # fmt: skip
        if not any(self.urls.values()):
            raise ConfigError("a Ping needs a URL", job=job, option="monitor", value=repr(self))
        for which, url in self.urls.items():
            if url is not None and (urlsplit(url).scheme not in ("http", "https")
                                    or not urlsplit(url).netloc):  # fmt: skip
                raise ConfigError(f"the {which} ping is not an http(s):// URL", job=job,
                                  option="monitor", value=url)  # fmt: skip
        if not 0 < self.timeout <= 60:
            raise ConfigError("a ping's timeout is from 0 to 60 s", job=job, option="monitor",
                              value=self.timeout)  # fmt: skip

    def started(self, check_in: CheckIn) -> None:
        self._ping("start", check_in)

    def finished(self, check_in: CheckIn, *, ok: bool, duration: float | None) -> None:
        self._ping("success" if ok else "fail", check_in)

    def _ping(self, which: str, check_in: CheckIn) -> None:
        url = self.urls[which]
        if url is None:
            return
        request = urllib.request.Request(url, headers={"User-Agent": "cron-bridge"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                response.read(1024)
        except Exception as exc:  # noqa: BLE001 - a monitor never fails the run
            _warn_once(f"ping:{check_in.job}:{url}", "the ping of %s to %s failed: %s",
                       check_in.job, urlsplit(url).netloc, exc)  # fmt: skip

    def __repr__(self) -> str:
        hosts = sorted({urlsplit(u).netloc for u in self.urls.values() if u})
        return f"Ping({', '.join(hosts)})"


_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(key: str, message: str, *args: object) -> None:
    """Log a monitor's failure once per job and target (a monitor down is not news twice)."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(message, *args)


def resolve(value: object, *, job: str) -> Monitor | None:
    """The monitor an option names: None, ``"sentry"``, or a ``Monitor`` (``Ping(...)``).

    Raises:
        ConfigError: anything else.
    """
    if value is None or isinstance(value, Monitor):
        return value
    if value == "sentry":
        return Sentry()
    raise ConfigError(f"expected None, {' or '.join(map(repr, BUILT_IN))}, or a Ping(...)",
                      job=job, option="monitor", value=value)  # fmt: skip


_default: list[Callable[[], Monitor | None]] = []


def set_default(name: str | None) -> None:
    """The monitor of every job without its own, in this process (``--monitor``)."""
    monitor = resolve(name or None, job="*")
    _default[:] = [lambda: monitor]


def default_monitor() -> Monitor | None:
    """The monitor of jobs without their own: ``set_default``'s, else ``CRON_BRIDGE_MONITOR``
    (a built-in's name only: an environment variable never names code)."""
    if _default:
        return _default[0]()
    name = os.environ.get(ENV, "").strip()
    if not name:
        return None
    if name not in BUILT_IN:
        _warn_once(f"env:{name}", "%s=%r is not a monitor (expected %s); no check-ins", ENV,
                   name[:40], " or ".join(BUILT_IN))  # fmt: skip
        return None
    return resolve(name, job="*")
