"""What a replica's parts share instead of callbacks: whether its store answers, and where its
run records go.

``StoreHealth`` is told by whoever asked the store last (the heartbeat, a claim batch, a
record write, an inline run's lock) whether it answered; a replica whose store went down
claims nothing until it answers again, and the parts that care register what to do then.
``Records`` logs each run record, counts it for telemetry and writes it, keeping what the
store could not take until it answers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from cron_bridge import telemetry
from cron_bridge.beat.planning import Planned
from cron_bridge.clock import Clock
from cron_bridge.errors import StoreUnavailable
from cron_bridge.run.recording import Recorder, log_records
from cron_bridge.stores.base import Store
from cron_bridge.stores.records import Outcome, RunRecord

__all__ = ["Records", "StoreHealth"]

log = logging.getLogger(__name__)


class StoreHealth:
    """Whether the store answered the last time this replica asked it. While it does not, a
    WARNING says so again every ``REMIND`` seconds: an outage is never one line long ago."""

    REMIND = 60.0

    def __init__(self) -> None:
        self.down = False
        self._down_since = 0.0
        self._said_at = 0.0
        self._when_down: list[Callable[[], None]] = []
        self._when_up: list[Callable[[], None]] = []

    def when_down(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` each time the store stops answering."""
        self._when_down.append(hook)

    def when_up(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` each time the store answers again."""
        self._when_up.append(hook)

    def failed(self, exc: StoreUnavailable) -> None:
        now = time.monotonic()
        if not self.down:
            log.warning("store unavailable, cluster jobs are paused until it is back: %s", exc)
            self._down_since = self._said_at = now
            for hook in self._when_down:
                hook()
        elif now - self._said_at >= self.REMIND:
            self._said_at = now
            log.warning(
                "store still unavailable after %d s, cluster jobs paused: %s",
                now - self._down_since,
                exc,
            )
        self.down = True

    def ok(self) -> None:
        if self.down:
            log.warning("store reachable again; claiming what came due meanwhile")
            self.down = False  # before the hooks: a hook that fails again says so
            for hook in self._when_up:
                hook()


class Records:
    """A replica's run records: made, logged, counted, written (kept while the store is
    down, written once it answers)."""

    def __init__(self, store: Store, health: StoreHealth, *, replica: str, clock: Clock) -> None:
        self.replica = replica
        self.clock = clock
        self._recorder = Recorder(store)
        self._health = health
        health.when_up(self._recorder.flush)

    def of(
        self, item: Planned, outcome: Outcome, *, at: datetime | None = None, **extra: Any
    ) -> RunRecord:
        """The record of ``item`` on this replica, started ``at`` (now when not given)."""
        return RunRecord(
            job=item.job.name,
            occurrence_id=item.occurrence.id,
            outcome=outcome,
            trigger=item.trigger,
            replica=self.replica,
            started_at=at or self.clock.now(),
            **extra,
        )

    def write(self, records: Sequence[RunRecord]) -> None:
        if not records:
            return
        log_records(records)
        for record in records:
            telemetry.observe(record)
        try:
            self._recorder.write(records)
        except StoreUnavailable as exc:
            self._health.failed(exc)  # kept: written once the store answers
