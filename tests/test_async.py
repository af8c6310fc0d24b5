"""``async def`` handlers: awaited on cron-bridge's own event loop, inline in the beat and
on a queue worker, with ``ctx.signal`` usable from async code."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from cron_bridge import Beat, JobContext, declare
from cron_bridge.run import delivery as worker
from cron_bridge.stores import MemoryStore
from cron_bridge.testing import FakeClock
from tests.test_beat import beats, clock
from tests.waiting import wait_for

__all__ = ["beats", "clock"]  # fixtures


def test_an_async_inline_handler_is_awaited_and_its_failure_recorded(
    clock: FakeClock, beats: list[Beat]
) -> None:
    seen: list[str] = []

    async def tick(ctx: JobContext) -> None:
        await asyncio.sleep(0.01)
        seen.append(ctx.occurrence_id)

    async def broken(ctx: JobContext) -> None:
        await asyncio.sleep(0)
        raise RuntimeError("the ledger is locked")

    store = MemoryStore(clock=clock)
    jobs = [
        declare("async.tick", every="1s", target="inline", handler=tick),
        declare("async.broken", every="1s", target="inline", handler=broken),
    ]
    beats.append(Beat(store, jobs, clock=clock))
    beats[0].start()
    clock.advance(1)
    # Both recorded (the handler appends to seen before its run is recorded).
    wait_for(
        lambda: all(len(store.history(j)) == 1 for j in ("async.tick", "async.broken")),
        30,
        "both runs recorded",
        every=0.01,
    )
    assert len(seen) == 1
    assert [r.outcome for r in store.history("async.tick")] == ["completed"]
    (failed,) = store.history("async.broken")
    assert (failed.outcome, failed.error) == ("failed", "RuntimeError: the ledger is locked")


def test_an_async_handler_sees_its_abort_on_the_event_loop(
    clock: FakeClock, beats: list[Beat]
) -> None:
    said: dict[str, object] = {}

    async def slow(ctx: JobContext) -> None:
        began = time.monotonic()
        said["aborted"] = await ctx.signal.wait_async(30)
        said["reason"], said["took"] = ctx.signal.reason, time.monotonic() - began

    store = MemoryStore(clock=clock)
    job = declare("async.slow", every="1s", target="inline", handler=slow, timeout="200ms")
    beats.append(Beat(store, [job], clock=clock))
    beats[0].start()
    clock.advance(1)
    wait_for(lambda: "took" in said, 20, "the aborted run", every=0.01)
    assert (said["aborted"], said["reason"]) == (True, "timeout")
    assert said["took"] < 10  # type: ignore[operator]


@pytest.fixture
def worker_store() -> Iterator[MemoryStore]:
    shared = MemoryStore()
    worker.configure(shared)
    yield shared
    worker.configure(None)


def test_an_async_task_on_a_worker_is_awaited_under_the_guard(worker_store: MemoryStore) -> None:
    async def report(ctx: JobContext, tenant: int) -> str:
        await asyncio.sleep(0.01)
        return f"{ctx.name} for tenant {tenant}"

    job = declare("async.report", every="1m", adapter="test", task="async.report", handler=report)
    delivery = worker.run_delivery(job, None, attempt=1, call=lambda ctx: report(ctx, tenant=7))
    assert delivery.value == "async.report for tenant 7"
    assert delivery.record.outcome == "completed"
    assert [r.outcome for r in worker_store.history("async.report")] == ["completed"]
