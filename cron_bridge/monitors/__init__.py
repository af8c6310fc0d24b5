"""Check-ins for every job: a cron monitor told when each run starts and how it ends.

``@cluster_task(..., monitor="sentry")`` (or ``monitor=Ping(...)``, or ``CRON_BRIDGE_MONITOR=
sentry`` / ``cron-bridge beat --monitor sentry`` for every job without its own) sends, from
the process that runs the attempt under the guard (the worker for a queue job, the beat for an
inline one), an in-progress check-in when the handler starts and an ok or error one when it
ends: once per attempt of an occurrence, so a retried run checks in as the queue's attempts
happen, and never from the replicas that stood aside. Two built-ins, behind ``Monitor``:

- ``Sentry()`` (``monitors.sentry``): sentry-sdk's public crons API, with the monitor config
  derived from the schedule. Needs ``sentry_sdk.init(...)`` in that process.
- ``Ping(url)`` (``monitors.ping``): an HTTP ping, as Healthchecks.io takes it (``url/start``,
  ``url``, ``url/fail``), or ``Ping(start=..., success=..., fail=...)`` for any other service.

Their calls leave on threads of their own, each within a deadline (``monitors.calls``): the
handler, the overlap lock and the beat's dispatch pool never wait for a monitor's peer. A
worker's delivery waits for its check-ins (at most their deadlines, ``settle``) so that they
leave even from a process that ends with the run (RQ's work horse); a failed call is logged
once, never the run's failure.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from cron_bridge.errors import ConfigError
from cron_bridge.monitors.base import CheckIn, Monitor, masked, warn_once
from cron_bridge.monitors.calls import settle
from cron_bridge.monitors.ping import Ping
from cron_bridge.monitors.sentry import FLUSH_TIMEOUT, Sentry

__all__ = [
    "FLUSH_TIMEOUT",
    "CheckIn",
    "Monitor",
    "Ping",
    "Sentry",
    "default_monitor",
    "resolve",
    "set_default",
    "settle",
]

ENV = "CRON_BRIDGE_MONITOR"
BUILT_IN = ("sentry",)  # what a name (an option, an environment variable) may name


def resolve(value: object, *, job: str) -> Monitor | None:
    """The monitor an option names: None, ``"sentry"``, or a ``Monitor`` (``Ping(...)``).

    Raises:
        ConfigError: anything else (the value shown with its credentials masked: a DSN or a
            ping URL given where a name goes).
    """
    if value is None or isinstance(value, Monitor):
        return value
    if value == "sentry":
        return Sentry()
    raise ConfigError(
        f"expected None, {' or '.join(map(repr, BUILT_IN))}, or a Ping(...)",
        job=job,
        option="monitor",
        value=masked(value),
    )


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
        warn_once(
            f"env:{name}",
            "%s=%s is not a monitor (expected %s); no check-ins",
            ENV,
            masked(name),
            " or ".join(BUILT_IN),
        )
        return None
    return resolve(name, job="*")
