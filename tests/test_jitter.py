"""Jitter: each occurrence fires at its scheduled time plus a share of the job's jitter that
every replica computes the same way, while its claim key and id stay the scheduled time."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from cron_bridge import Beat, ConfigError, declare
from cron_bridge.beat.planning import plan
from cron_bridge.jobs import Job
from cron_bridge.stores import MemoryStore
from cron_bridge.testing import FakeClock
from tests.test_beat import beats, clock, inline, outcomes, total
from tests.waiting import wait_for

__all__ = ["beats", "clock"]  # fixtures

T = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _job(name: str, jitter: str = "30s") -> Job:
    return declare(name, every="1m", jitter=jitter, target="inline", handler=lambda ctx: None)


def test_every_replica_computes_the_same_delay_within_the_window() -> None:
    first, again = _job("mail.digest"), _job("mail.digest")
    assert first.fire_at(T) == again.fire_at(T)
    delays = [_job(f"tenant.{n}").fire_at(T) - T for n in range(1000)]
    assert all(timedelta(0) <= d < timedelta(seconds=30) for d in delays)
    assert min(delays) < timedelta(seconds=1) and max(delays) > timedelta(seconds=29)
    per_second = [sum(1 for d in delays if int(d.total_seconds()) == s) for s in range(30)]
    assert max(per_second) < 3 * 1000 / 30, per_second  # spread, not bunched
    assert _job("plain", jitter="0s").fire_at(T) == T


def test_lateness_counts_from_the_jittered_time() -> None:
    job = declare(
        "late.ok",
        every="1m",
        jitter="50s",
        misfire_grace="30s",
        target="inline",
        handler=lambda ctx: None,
    )
    fired = job.fire_at(T)
    on_time = plan(job, [T], fired + timedelta(seconds=29)).items
    assert [(p.run, p.trigger) for p in on_time] == [(True, "schedule")]
    late = plan(job, [T], fired + timedelta(seconds=31)).items
    assert [p.run for p in late] == [False]


@pytest.mark.parametrize("value", ["-1s", "2d", "soon"])
def test_a_bad_jitter_is_a_config_error(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _job("bad.jitter", jitter=value)
    assert (caught.value.job, caught.value.option) == ("bad.jitter", "jitter")


def test_a_jittered_occurrence_fires_at_its_time_once_with_the_scheduled_id(
    clock: FakeClock, beats: list[Beat]
) -> None:
    store = MemoryStore(clock=clock)
    job, seen = inline("spread", every="10s", jitter="5s")
    beats += [Beat(store, [job], clock=clock, replica_id=f"r{i}") for i in range(2)]
    for beat in beats:
        beat.start()
    scheduled = job.schedule.next_after(clock.now())
    fire_at = job.fire_at(scheduled)
    assert fire_at > scheduled  # this occurrence's share of the 5 s is not zero
    clock.advance(fire_at - clock.now() - timedelta(milliseconds=1))
    time.sleep(0.3)
    assert seen == []  # due, but its jittered time has not come
    clock.advance(timedelta(milliseconds=2))
    wait_for(lambda: total(store, "spread", beats) == 2, 30, "the jittered run", every=0.01)
    assert [ctx.occurrence_id for ctx in seen] == [job.occurrence(scheduled).id]
    occurrence_id = job.occurrence(scheduled).id
    assert outcomes(store, "spread", beats) == {
        occurrence_id: Counter({"completed": 1, "skipped-claimed": 1})
    }
