"""Replicas fire on the store's time: the offset measured at every heartbeat corrects the
replica's clock, is recorded with the heartbeat and is warned about past a second."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cron_bridge import Beat, declare
from cron_bridge.beat.clocksync import ROUND_TRIP_MAX, StoreClock
from cron_bridge.clock import SystemClock
from cron_bridge.jobs import Occurrence
from cron_bridge.stores import MemoryStore, Store
from cron_bridge.testing import FakeClock
from tests.conftest import StoreKit, store_kinds
from tests.waiting import waited


class AheadBy(SystemClock):
    """This host's clock, running ``seconds`` ahead of the world."""

    def __init__(self, seconds: float) -> None:
        self.skew = timedelta(seconds=seconds)

    def now(self) -> datetime:
        return super().now() + self.skew


class StoreWithClock(MemoryStore):
    """A store whose heartbeat answers with the true time, as Redis and Postgres do."""

    def heartbeat(self, replica: str, ttl: timedelta, **options: Any) -> datetime | None:
        super().heartbeat(replica, ttl, **options)
        self.offsets = options
        return datetime.now(UTC)


def test_a_replica_three_seconds_ahead_corrects_its_clock_and_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The offset comes from the heartbeat; now() is back on the store's time; it is warned
    about once, and sent with the next heartbeat."""
    clock = StoreClock(AheadBy(3))
    store = StoreWithClock()
    with caplog.at_level(logging.WARNING, logger="cron_bridge.beat.clocksync"):
        clock.heartbeat(store, "r1", timedelta(seconds=15))
        first = clock.offset_ms
        clock.heartbeat(store, "r1", timedelta(seconds=15))
    assert abs((clock.now() - datetime.now(UTC)).total_seconds()) < 0.5
    assert first is not None and -3500 < first < -2500
    assert store.offsets["clock_offset_ms"] == first  # sent with the next heartbeat
    warnings = [r for r in caplog.records if "ahead of the store's" in r.getMessage()]
    assert len(warnings) == 1


class SlowToAnswer(MemoryStore):
    """A heartbeat that reads the store's clock at once and answers ``seconds`` later (one
    that reconnected through a failover)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def heartbeat(self, replica: str, ttl: timedelta, **options: Any) -> datetime | None:
        read = datetime.now(UTC)
        time.sleep(self.seconds)
        return read


def test_a_reading_from_a_slow_heartbeat_leaves_the_offset_as_it_was() -> None:
    """The store's time can have been read anywhere in a long round trip: once the clock
    was read, a heartbeat slower than ROUND_TRIP_MAX changes nothing, where its midpoint
    would put the clock half of it off. The first reading is taken however slow: a replica
    3 s ahead is then at most half the round trip off, not 3 s."""
    clock = StoreClock(AheadBy(3))
    clock.heartbeat(StoreWithClock(), "r1", timedelta(seconds=15))
    measured = clock.offset_ms
    assert measured is not None and -3500 < measured < -2500
    clock.heartbeat(SlowToAnswer(ROUND_TRIP_MAX.total_seconds() + 0.3), "r1", timedelta(seconds=15))
    assert clock.offset_ms == measured
    fresh = StoreClock(AheadBy(3))
    fresh.heartbeat(SlowToAnswer(ROUND_TRIP_MAX.total_seconds() + 0.3), "r1", timedelta(seconds=15))
    assert fresh.offset_ms is not None
    assert abs(fresh.now() - datetime.now(UTC)) < ROUND_TRIP_MAX  # not the 3 s it was off


def test_a_fake_clock_is_never_corrected() -> None:
    """Tests on a fake timeline keep it, whatever the store's clock says."""
    fake = FakeClock(datetime(2026, 3, 1, tzinfo=UTC))
    clock = StoreClock(fake)
    clock.heartbeat(StoreWithClock(), "r1", timedelta(seconds=15))
    assert clock.now() == fake.now() and clock.offset_ms is None


@pytest.mark.parametrize("kind", store_kinds(["redis", "postgres"]))
def test_a_replica_whose_clock_runs_ahead_fires_on_the_stores_time(
    kind: str, kit_factory: Callable[[str], StoreKit]
) -> None:
    """A beat on a host 3 s ahead, with a store that has a clock (Redis, Postgres), joining
    a cluster that claimed an occurrence a second ago: its runs start at or after their
    scheduled time by the store's clock, never 3 s early, from the first one on, and its
    catch-up at start finds nothing missed in what, by its own clock, is the past."""
    store: Store = kit_factory(kind).open()
    starts: list[tuple[str, datetime]] = []
    joined = datetime.now(UTC)
    previous = Occurrence(job="clock.tick", scheduled_at=joined.replace(microsecond=0))
    assert store.claim_many([previous], "another-replica") == [True]

    def tick(ctx: Any) -> None:
        starts.append((ctx.occurrence_id, datetime.now(UTC)))

    job = declare("clock.tick", every="1s", target="inline", handler=tick)
    beat = Beat(store, [job], clock=AheadBy(3), heartbeat_interval="1s")
    beat.start()
    try:
        waited(lambda: len(starts) >= 4, 30)
    finally:
        beat.stop()
    assert len(starts) >= 4
    for occurrence_id, started in starts:
        scheduled = Occurrence.parse(occurrence_id).scheduled_at
        assert started >= scheduled - timedelta(milliseconds=300), (occurrence_id, started)
    early = [
        r.occurrence_id
        for r in store.history("clock.tick", 100)
        if r.outcome == "missed" and r.scheduled_at > joined
    ]
    assert early == [], "caught up on occurrences that were not yet due"
