"""The chaos run's judge on the losses it allows: a skip behind a lock its finished run could
not release only when the store failed around the run's end, and only until the lock expires."""

from __future__ import annotations

from chaos.check import LOCK_TTL, allowed

WHY = ("skipped-overlap on worker0-1-1-a: held by chaos.queued01@2026-12-01T23:03:12.000Z "
       "on worker1-1-2-b")  # fmt: skip
RUNS = {"chaos.queued01@2026-12-01T23:03:12.000Z": (100.0, 101.0, "chaos.queued01@...")}


def test_a_skip_behind_a_finished_run_is_allowed_only_when_the_store_failed_as_it_ended() -> None:
    assert allowed(WHY, set(), RUNS, 101.8, {}, faults=[100.9])  # cut as the run ended
    assert allowed(WHY, set(), RUNS, 101.8, {}, faults=[99.0, 101.5])  # a restart around it
    assert not allowed(WHY, set(), RUNS, 101.8, {}, faults=[])  # nothing failed: a bug
    assert not allowed(WHY, set(), RUNS, 101.8, {}, faults=[90.0])  # long before
    assert not allowed(WHY, set(), RUNS, 101.8, {}, faults=[102.0])  # after the skip
    late = 101.0 + LOCK_TTL + 1.0  # the lock had expired by then whatever the store did
    assert not allowed(WHY, set(), RUNS, late, {}, faults=[100.9])


def test_a_skip_behind_a_run_still_going_is_allowed_as_before() -> None:
    assert allowed(WHY, set(), RUNS, 100.5, {})
    assert allowed(WHY, {"worker1-1"}, RUNS, 150.0, {})  # its holder was killed or frozen
