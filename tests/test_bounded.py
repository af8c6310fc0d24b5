"""One-off runs (at=) and schedules bounded by start and end: parsing, occurrences, and a
beat that runs them once."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from cron_bridge import Beat, ConfigError, declare
from cron_bridge.schedules import Every
from cron_bridge.stores import MemoryStore
from cron_bridge.testing import FakeClock
from cron_bridge.windows import NEVER, At, Window, parse_instant
from tests.test_beat import START, beats, clock, inline, outcomes, total
from tests.waiting import wait_for

__all__ = ["beats", "clock"]  # fixtures

T = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "value",
    [
        "2026-12-01T09:00:00+01:00",
        "2026-12-01T08:00:00Z",
        "2026-12-01T08:00:00.000+00:00",
        datetime(2026, 12, 1, 3, 0, tzinfo=timezone(timedelta(hours=-5))),
    ],
)
def test_an_instant_is_any_aware_form_of_the_same_moment(value: object) -> None:
    assert parse_instant(value, option="at") == T


@pytest.mark.parametrize(
    "value",
    [
        "2026-12-01T09:00:00",
        datetime(2026, 12, 1, 9),
        "tomorrow",
        1764576000,
        "1969-12-31T00:00Z",
        "9999-06-01T00:00Z",
    ],
)
def test_a_naive_or_unreadable_instant_is_a_config_error(value: object) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_instant(value, option="at")
    assert caught.value.option == "at"


def test_a_one_off_has_one_occurrence_then_none() -> None:
    once = At("2026-12-01T09:00:00+01:00")
    assert once.next_after(T - timedelta(seconds=1)) == T
    assert once.next_after(T) == NEVER
    assert list(once.occurrences(T - timedelta(days=1), T + timedelta(days=1))) == [T]
    assert list(once.occurrences(T, T + timedelta(days=1))) == []
    assert once.describe() == "at 2026-12-01T08:00:00.000Z"


def test_a_window_keeps_the_occurrences_from_start_to_end_included() -> None:
    window = Window(Every("1m"), start=T, end=T + timedelta(minutes=3))
    assert window.next_after(T - timedelta(hours=5)) == T
    got = list(window.occurrences(T - timedelta(hours=1), T + timedelta(hours=1)))
    assert got == [T + timedelta(minutes=n) for n in range(4)]
    assert window.next_after(T + timedelta(minutes=3)) == NEVER
    assert window.describe() == "every 1m from 2026-12-01T08:00:00Z until 2026-12-01T08:03:00Z"
    with pytest.raises(ConfigError) as caught:
        Window(Every("1m"), start=T, end=T - timedelta(seconds=1))
    assert caught.value.option == "end"


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"cron": "* * * * *", "at": "2026-12-01T08:00Z"}, "cron"),
        ({"every": "1m", "at": "2026-12-01T08:00Z"}, "every"),
        ({"at": "2026-12-01T08:00Z", "end": "2026-12-02T08:00Z"}, "end"),
        ({"every": "1m", "start": "2026-12-01T08:00"}, "start"),
        ({"every": "1m", "end": "soon"}, "end"),
    ],
)
def test_bad_one_off_and_window_options_name_the_job_and_option(
    options: dict[str, str], option: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        declare("billing.once", target="inline", handler=lambda ctx: None, **options)
    assert (caught.value.job, caught.value.option) == ("billing.once", option)


def test_a_one_off_runs_once_across_replicas_and_a_window_only_inside_it(
    clock: FakeClock, beats: list[Beat]
) -> None:
    store = MemoryStore(clock=clock)
    once, ran_once = inline("once", every=None, at=START + timedelta(seconds=2))
    windowed, ran_window = inline(
        "window", start=START + timedelta(seconds=1.5), end=START + timedelta(seconds=3.4)
    )
    beats += [Beat(store, [once, windowed], clock=clock, replica_id=f"r{i}") for i in range(3)]
    for beat in beats:
        beat.start()
    clock.advance(1)  # 12:00:01.5: nothing due yet
    clock.advance(1)  # 12:00:02.5: the one-off, and the window's first
    wait_for(
        lambda: total(store, "once", beats) == 3 and total(store, "window", beats) == 3,
        30,
        "2.5 s",
        every=0.01,
    )
    clock.advance(1)  # 12:00:03.5: the window's last
    wait_for(lambda: total(store, "window", beats) == 6, 30, "3.5 s", every=0.01)
    for _ in range(3):  # and nothing after
        clock.advance(1)
        time.sleep(0.2)
    assert total(store, "once", beats) == 3 and total(store, "window", beats) == 6
    assert [ctx.occurrence_id for ctx in ran_once] == ["once@2026-05-01T12:00:02.500Z"]
    assert sorted(ctx.occurrence_id[-13:] for ctx in ran_window) == [
        "12:00:02.000Z",
        "12:00:03.000Z",
    ]
    for counts in outcomes(store, "once", beats).values():
        assert counts["completed"] == 1 and counts["skipped-claimed"] == 2
