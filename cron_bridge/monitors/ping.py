"""``Ping``: HTTP pings when a run starts, completes and fails (Healthchecks.io, Cronitor).

Each ping is one GET on a thread of its own (``calls.launch``), ended by its ``timeout`` as a
deadline for the whole request (``httpget.get``); the run never waits for it. An attempt's end
is sent after its start is over (sent, or given up at its deadline), so that a peer never sees
``/start`` after the end of the same attempt.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from urllib.parse import urlsplit

from cron_bridge.errors import ConfigError
from cron_bridge.monitors.base import CheckIn, host_of, masked, warn_once
from cron_bridge.monitors.calls import MAX_IN_FLIGHT, Call, launch
from cron_bridge.monitors.httpget import OutboundError, get
from cron_bridge.schedules import Schedule

__all__ = ["Ping"]


class Ping:
    """HTTP pings when a run starts, completes and fails.

    ``Ping(url)`` pings as Healthchecks.io takes them: ``url/start``, ``url``, ``url/fail``.
    ``Ping(start=..., success=..., fail=...)`` pings the URLs given (each may be left out).
    ``timeout`` (seconds, up to 60) is each ping's deadline, connection to answer.
    """

    name = "ping"

    def __init__(
        self,
        url: str | None = None,
        *,
        start: str | None = None,
        success: str | None = None,
        fail: str | None = None,
        timeout: float = 5.0,
    ) -> None:
        if url is not None:
            base = url.rstrip("/")
            start, success, fail = start or f"{base}/start", success or base, fail or f"{base}/fail"
        self.urls = {"start": start, "success": success, "fail": fail}
        self.timeout = timeout

    def check(
        self, job: str, schedule: Schedule, misfire_grace: timedelta, timeout: timedelta | None
    ) -> None:
        if not any(self.urls.values()):
            raise ConfigError("a Ping needs a URL", job=job, option="monitor", value=repr(self))
        for which, url in self.urls.items():
            if url is not None and not _is_http(url):
                raise ConfigError(
                    f"the {which} ping is not an http(s):// URL",
                    job=job,
                    option="monitor",
                    value=masked(url),
                )
        if not 0 < self.timeout <= 60:
            raise ConfigError(
                "a ping's timeout is from 0 to 60 s", job=job, option="monitor", value=self.timeout
            )

    def started(self, check_in: CheckIn) -> None:
        call = self._send("start", check_in, after=None)
        if call is not None:
            with _starts_lock:
                if len(_starts) >= MAX_IN_FLIGHT:  # ends never told (a crash): forget the done
                    for done in [key for key, going in _starts.items() if going.done.is_set()]:
                        del _starts[done]
                _starts[check_in.id] = call

    def finished(self, check_in: CheckIn, *, ok: bool, duration: float | None) -> None:
        with _starts_lock:
            start = _starts.pop(check_in.id, None)
        self._send("success" if ok else "fail", check_in, after=start)

    def _send(self, which: str, check_in: CheckIn, *, after: Call | None) -> Call | None:
        url = self.urls[which]
        if url is None:
            return None

        def ping(deadline: float) -> None:
            try:
                get(url, deadline=deadline)
            except (OSError, OutboundError, ValueError) as exc:
                warn_once(
                    f"ping:{check_in.job}:{url}",
                    "the ping of %s to %s failed: %s",
                    check_in.job,
                    host_of(url),
                    masked(exc),
                )

        call = launch(ping, timeout=self.timeout, after=after, name="cron-bridge-ping")
        if call is None:
            warn_once(
                f"ping-dropped:{check_in.job}",
                "a ping of %s was dropped: %d calls to "
                "monitors are in flight already, their peers not answering",
                check_in.job,
                MAX_IN_FLIGHT,
            )
        return call

    def __repr__(self) -> str:
        hosts = sorted({host_of(u) for u in self.urls.values() if u})
        return f"Ping({', '.join(hosts)})"


def _is_http(url: str) -> bool:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not one
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


# The start of each attempt in flight, by check-in id, for its end to be sent after it.
_starts: dict[str, Call] = {}
_starts_lock = threading.Lock()
