"""A burst's run records: written once its last slice is sent, and however it ends."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from cron_bridge import Beat, Registry, cluster_task
from cron_bridge.beat.claiming import SLICE_MIN
from cron_bridge.queues import installed
from cron_bridge.queues.adapter import Dispatch
from cron_bridge.queues.installed import register
from cron_bridge.stores import MemoryStore
from cron_bridge.testing import FakeClock
from tests.test_beat import ListQueue, QueueTask, beats, clock
from tests.waiting import wait_for

__all__ = ["beats", "clock"]  # fixtures

JOBS = 4 * SLICE_MIN  # four slices


class WatchedQueue(ListQueue):
    """Notes how many run records the store held at each send; can hold a send."""

    def __init__(self, store: MemoryStore, names: list[str]) -> None:
        super().__init__()
        self.store = store
        self.names = names
        self.records_at_send: list[int] = []
        self.sending = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def enqueue_many(self, dispatches: Sequence[Dispatch]) -> list[Exception | None]:
        self.records_at_send.append(self.records())
        self.sending.set()
        assert self.release.wait(10), "the test never released the send"
        return super().enqueue_many(dispatches)

    def records(self) -> int:
        return sum(len(self.store.history(name, 10)) for name in self.names)


def burst(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> tuple[Beat, WatchedQueue]:
    monkeypatch.setattr(installed, "_registered", dict(installed._registered))
    names = [f"burst.{n:04d}" for n in range(JOBS)]
    store = MemoryStore(clock=clock)
    queue = WatchedQueue(store, names)
    register(queue)
    registry = Registry()
    for name in names:
        cluster_task(every="1m", registry=registry)(QueueTask(name))
    return Beat(store, registry, clock=clock, replica_id="r0", shutdown_timeout="200ms"), queue


def test_a_burst_writes_its_records_once_its_last_slice_is_sent(
    clock: FakeClock, beats: list[Beat], monkeypatch: pytest.MonkeyPatch
) -> None:
    beat, queue = burst(clock, monkeypatch)
    beats.append(beat)
    beat.start()
    clock.advance(60)
    wait_for(lambda: queue.records() == JOBS, 30, "the records", every=0.01)
    assert len(queue.records_at_send) == 4  # one send per slice
    assert queue.records_at_send == [0, 0, 0, 0]  # none written while slices were left
    assert len({sent["occurrence_id"] for sent in queue.sent}) == JOBS
    outcomes = {r.outcome for name in queue.names for r in beat.store.history(name, 10)}
    assert outcomes == {"enqueued"}


def test_a_burst_cut_short_by_stop_still_writes_what_it_sent(
    clock: FakeClock, beats: list[Beat], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped during its first slice's send: that slice's records are written, the slices
    after it are never claimed (the other replicas or the catch-up take them)."""
    beat, queue = burst(clock, monkeypatch)
    queue.release.clear()
    beat.start()
    clock.advance(60)
    assert queue.sending.wait(10), "the burst never started sending"
    stopping = threading.Thread(target=beat.stop)
    stopping.start()
    # stop() aborts the burst after its shutdown_timeout; only then does the send return.
    wait_for(
        lambda: any(signal.aborted for signal in list(beat._dispatcher._inflight.values())),
        30,
        "stop() aborting the burst",
        every=0.01,
    )
    queue.release.set()
    stopping.join(30)
    assert not stopping.is_alive()
    assert len(queue.sent) == SLICE_MIN  # the first slice only
    assert queue.records() == SLICE_MIN
    sent = {d["occurrence_id"] for d in queue.sent}
    recorded = {r.occurrence_id for name in queue.names for r in beat.store.history(name, 10)}
    assert recorded == sent
