"""``Sentry``: check-ins through sentry-sdk's crons API, the monitor upserted from the job.

``capture_checkin`` only queues the envelope (sentry-sdk sends it on its own thread). The
closing check-in is flushed, for at most ``FLUSH_TIMEOUT``, on a thread of ours
(``calls.launch``), never on the run's: a worker's delivery waits for it (``calls.settle``), so
it leaves even from a process that ends with the run (RQ's work horse); the beat does not.
"""

from __future__ import annotations

import math
import time
from datetime import timedelta
from typing import Any

from cron_bridge.errors import ConfigError
from cron_bridge.monitors.base import CheckIn, masked, warn_once
from cron_bridge.monitors.calls import launch
from cron_bridge.schedules import Cron, Every, Schedule
from cron_bridge.windows import Window

__all__ = ["FLUSH_TIMEOUT", "Sentry"]

FLUSH_TIMEOUT = 2.0  # seconds the closing Sentry check-in may take to leave the process
_UNITS = (("day", 86400), ("hour", 3600), ("minute", 60))


class Sentry:
    """Check-ins through sentry-sdk's crons API, the monitor upserted from the schedule."""

    name = "sentry"

    def check(
        self, job: str, schedule: Schedule, misfire_grace: timedelta, timeout: timedelta | None
    ) -> None:
        self.config(job, schedule, misfire_grace, timeout)

    def config(
        self, job: str, schedule: Schedule, misfire_grace: timedelta, timeout: timedelta | None
    ) -> dict[str, Any]:
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
            raise ConfigError(
                "Sentry Crons takes a cron expression or an interval of whole "
                "minutes (anchored at the epoch, no offset)",
                job=job,
                option="monitor",
                value="sentry",
            )
        if timeout is not None:
            config["max_runtime"] = _minutes(timeout)
        return config

    def started(self, check_in: CheckIn) -> None:
        self._send(check_in, "in_progress", None)

    def finished(self, check_in: CheckIn, *, ok: bool, duration: float | None) -> None:
        if self._send(check_in, "ok" if ok else "error", duration):
            launch(_flush, timeout=FLUSH_TIMEOUT, name="cron-bridge-sentry-flush")

    def _send(self, check_in: CheckIn, status: str, duration: float | None) -> bool:
        try:
            from sentry_sdk.crons import capture_checkin

            config: Any = self.config(
                check_in.job, check_in.schedule, check_in.misfire_grace, check_in.timeout
            )
            capture_checkin(
                monitor_slug=check_in.job,
                check_in_id=check_in.id,
                status=status,
                duration=duration,
                monitor_config=config,
            )
        except Exception as exc:  # noqa: BLE001 - a monitor never fails the run
            warn_once(
                f"sentry:{check_in.job}",
                "the Sentry check-in of %s failed: %s",
                check_in.job,
                masked(exc),
            )
            return False
        return True


def _flush(deadline: float) -> None:
    import sentry_sdk  # there: capture_checkin was imported

    sentry_sdk.flush(timeout=max(0.0, deadline - time.monotonic()))


def _minutes(value: timedelta) -> int:
    return max(1, math.ceil(value.total_seconds() / 60))


def _whole_minutes(every: Every) -> bool:
    seconds = every.interval.total_seconds()
    return seconds >= 60 and seconds % 60 == 0 and not every.offset
