"""Through a store outage nothing that happened goes unrecorded: run records the store could
not take are written once it answers, and a claimed inline occurrence asks for its lock until
the very end of its grace."""

from __future__ import annotations

import os
import time
import warnings

import pytest

from cron_bridge import Beat
from cron_bridge.errors import StoreUnavailable
from cron_bridge.run import recording
from cron_bridge.run.recording import Recorder
from cron_bridge.stores import RunRecord
from cron_bridge.testing import FakeClock
from tests.blips import LockDownFor, RecordBlips
from tests.test_beat import START, beats, clock, inline
from tests.waiting import wait_for

__all__ = ["beats", "clock"]  # fixtures


def _record(n: int) -> RunRecord:
    return RunRecord(
        job="j",
        occurrence_id=f"j@2026-01-01T00:00:0{n}.000Z",
        outcome="completed",
        trigger="schedule",
        replica="r",
        started_at=START,
    )


def test_records_the_store_refused_are_written_with_the_next_ones() -> None:
    store = RecordBlips(2)
    recorder = Recorder(store)
    for n in (1, 2):
        with pytest.raises(StoreUnavailable):
            recorder.write([_record(n)])
    assert recorder.pending == 2 and store.history("j") == []
    recorder.write([_record(3)])
    assert [r.occurrence_id[-13:-5] for r in store.history("j")] == [
        "00:00:03",
        "00:00:02",
        "00:00:01",
    ]
    assert recorder.pending == 0


def test_at_most_the_limit_is_kept_and_the_oldest_go_first(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(recording, "LIMIT", 3)
    recorder = Recorder(RecordBlips(10))
    for n in range(1, 6):
        with pytest.raises(StoreUnavailable):
            recorder.write([_record(n)])
    assert recorder.pending == 3 and recorder.dropped == 2
    assert "dropped" in caplog.text


def test_a_beat_writes_the_records_of_an_outage_once_the_store_answers(
    clock: FakeClock, beats: list[Beat]
) -> None:
    store = RecordBlips(2, clock=clock)
    job, seen = inline("tick")
    beats.append(Beat(store, [job], clock=clock))
    beats[0].start()
    for n in range(1, 4):
        clock.advance(1)
        wait_for(lambda n=n: len(seen) == n, 30, f"run {n}", every=0.01)  # one tick at a time
    wait_for(lambda: len(store.history("tick")) == 3, 30, "every run recorded", every=0.01)
    assert len(seen) == 3
    assert {r.outcome for r in store.history("tick")} == {"completed"}


def test_the_lock_is_asked_for_until_the_end_of_the_grace(
    clock: FakeClock, beats: list[Beat]
) -> None:
    """Down for 2.6 s with a 3 s grace: asked again at most a second apart, it runs (the
    backoff used to double past the grace and give up 1.25 s before its end)."""
    store = LockDownFor(2.6, clock=clock)
    job, seen = inline("blip", misfire_grace="3s")
    beats.append(Beat(store, [job], clock=clock))
    beats[0].start()
    clock.advance(1)
    wait_for(lambda: len(store.history("blip")) == 1, 15, "the run", every=0.01)
    assert [r.outcome for r in store.history("blip")] == ["completed"]
    assert len(seen) == 1
    gaps = [b - a for a, b in zip(store.asked, store.asked[1:], strict=False)]
    assert max(gaps) < 1.5, gaps


def test_a_burst_of_records_is_logged_a_line_per_outcome_and_each_record_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Up to LOGGED_EACH records are logged one line each; a larger batch (a burst) one line
    per outcome and replica with the count and the first and last occurrence, and each record
    at debug level only."""

    def made(n: int, outcome: str, replica: str) -> RunRecord:
        return RunRecord(
            job=f"j{n}",
            occurrence_id=f"j{n}@2026-01-01T00:00:00.000Z",
            outcome=outcome,
            trigger="schedule",
            replica=replica,  # type: ignore[arg-type]
            started_at=START,
        )

    few = [made(n, "enqueued", "r") for n in range(recording.LOGGED_EACH)]
    with caplog.at_level("INFO", logger="cron_bridge.run.recording"):
        recording.log_records(few)
    assert [r.getMessage() for r in caplog.records] == [
        f"enqueued j{n}@2026-01-01T00:00:00.000Z on r" for n in range(recording.LOGGED_EACH)
    ]
    caplog.clear()
    burst = [made(n, "enqueued", "r") for n in range(100)] + [made(100, "missed", "r")]
    with caplog.at_level("INFO", logger="cron_bridge.run.recording"):
        recording.log_records(burst)
    assert [r.getMessage() for r in caplog.records] == [
        "enqueued 100 occurrence(s) on r, from j0@2026-01-01T00:00:00.000Z to "
        "j99@2026-01-01T00:00:00.000Z",
        "missed 1 occurrence(s) on r, from j100@2026-01-01T00:00:00.000Z to "
        "j100@2026-01-01T00:00:00.000Z",
    ]
    caplog.clear()
    with caplog.at_level("DEBUG", logger="cron_bridge.run.recording"):
        recording.log_records(burst)
    each = [r.getMessage() for r in caplog.records if r.levelname == "DEBUG"]
    assert each == [f"{r.outcome} {r.occurrence_id} on r" for r in burst]


def test_flush_within_asks_again_until_the_store_takes_them_and_gives_up_in_time() -> None:
    store = RecordBlips(1)
    recorder = Recorder(store)
    with pytest.raises(StoreUnavailable):
        recorder.write([_record(1)])
    store.failures = 3
    assert recorder.flush_within(10) and recorder.pending == 0 and len(store.history("j")) == 1
    store.failures = 10**6  # never answers again
    with pytest.raises(StoreUnavailable):
        recorder.write([_record(2)])
    began = time.monotonic()
    assert not recorder.flush_within(0.6)
    assert 0.6 <= time.monotonic() - began < 2 and recorder.pending == 1


def test_a_worker_process_keeps_what_one_delivery_could_not_record_for_the_next() -> None:
    """One recorder per worker process, not per delivery: the first delivery's record, refused,
    is written by the second delivery; a forked child starts with nothing kept (the parent's
    records are the parent's to write, never twice)."""
    from cron_bridge.jobs import declare
    from cron_bridge.run import delivery as worker

    store = RecordBlips(1)
    worker.configure(store)
    try:
        job = declare(
            "reports.kept",
            every="1m",
            adapter="test",
            task="reports.kept",
            handler=lambda ctx: None,
        )
        meta = {"job": job.name, "occurrence_id": f"{job.name}@2026-01-01T00:00:00.000Z"}
        worker.run_delivery(job, meta, attempt=1, call=lambda ctx: None)
        assert store.history(job.name) == [] and worker.worker_recorder().pending == 1
        read, write = os.pipe()
        with warnings.catch_warnings():  # 3.12+ warns of fork() beside threads; none runs here
            warnings.simplefilter("ignore", DeprecationWarning)
            child = os.fork()
        if child == 0:  # pragma: no cover - the child reports through the pipe
            os.write(write, str(worker.worker_recorder().pending).encode())
            os._exit(0)
        os.close(write)
        assert os.read(read, 16) == b"0"
        os.close(read)
        os.waitpid(child, 0)
        meta = {"job": job.name, "occurrence_id": f"{job.name}@2026-01-01T00:01:00.000Z"}
        worker.run_delivery(job, meta, attempt=1, call=lambda ctx: None)
        assert [r.outcome for r in store.history(job.name)] == ["completed", "completed"]
        assert worker.flush_worker_records(0) and worker.worker_recorder().pending == 0
    finally:
        worker.configure(None)
