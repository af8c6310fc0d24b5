"""What a job may hand RQ with each message (``Job.send``), by RQ's own names.

These are the options of RQ's ``enqueue`` a user chose for a job, kept as RQ reads them, so a
job moved from rq-scheduler keeps them (``cron-bridge import rq-scheduler``):

- ``job_timeout``: seconds before the work horse is killed (RQ's hard limit; ``-1`` none), in
  place of the cooperative ``timeout`` plus 30 s;
- ``result_ttl``: seconds the result is kept, ``0`` none, ``-1`` for ever;
- ``ttl``: seconds the job may wait in its queue before RQ drops it;
- ``meta``: the job's meta (what ``get_current_job().meta`` shows), a JSON object;
- ``at_front``: put it at the front of its queue.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cron_bridge.adapters import META_KEY, ConfigError

__all__ = ["SEND_OPTIONS", "check_send"]

SEND_OPTIONS = ("job_timeout", "result_ttl", "ttl", "meta", "at_front")
_SECONDS_MAX = 10**9
# The whole numbers of seconds RQ takes for each: (lowest, whether -1 "for ever" is one).
_SECONDS = {"job_timeout": (1, True), "result_ttl": (0, True), "ttl": (1, False)}


def check_send(options: Mapping[str, Any]) -> None:
    """Raises ``ConfigError`` naming the first option RQ would not take, and its value."""
    for name, value in options.items():
        option = f"send.{name}"
        if name not in SEND_OPTIONS:
            raise ConfigError(f"RQ takes {', '.join(SEND_OPTIONS)}", option=option, value=value)
        if name == "meta":
            if not isinstance(value, dict) or META_KEY in value:
                raise ConfigError(
                    f"expected a JSON object without {META_KEY!r}", option=option, value=value
                )
        elif name == "at_front":
            if not isinstance(value, bool):
                raise ConfigError("expected true or false", option=option, value=value)
        else:
            low, forever = _SECONDS[name]
            whole = isinstance(value, int) and not isinstance(value, bool)
            if not whole or not (low <= value <= _SECONDS_MAX or (forever and value == -1)):
                said = f"{low} to {_SECONDS_MAX:,} seconds" + (", or -1" if forever else "")
                raise ConfigError(f"expected {said}", option=option, value=value)
