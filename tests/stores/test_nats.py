"""NATS specifics: a large batch keeps each request within its own timeout; a settled pending
send survives a server killed before its next sync."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cron_bridge.errors import StoreUnavailable
from cron_bridge.jobs import Occurrence
from cron_bridge.stores import nats_pending, store_from_url
from tests.conftest import _serve
from tests.servers import NatsServer
from tests.waiting import retried


def test_a_batch_of_ten_thousand_claims_is_answered_within_a_one_second_timeout(
    nats_server: NatsServer,
) -> None:
    """Each request of a batch has the store's answer timeout (here 1 s). Sent all at once,
    10,000 claims queued on the server and the last ones timed out while it was still
    answering; kept ``IN_FLIGHT`` at a time, every one is answered, and the winners are right."""
    prefix = f"big{uuid.uuid4().hex[:6]}"
    # The buckets made first, with the default timeout: making them is JetStream's file work,
    # slower than 1 s on a loaded machine, and not what this test is about.
    maker = store_from_url(f"{nats_server.url}?prefix={prefix}")
    try:
        made = Occurrence(job="made", scheduled_at=datetime(2026, 5, 1, tzinfo=UTC))
        assert maker.claim_many([made], "maker") == [True]
    finally:
        maker.close()
    store = store_from_url(f"{nats_server.url}?prefix={prefix}&connect_timeout=1")
    try:
        at = datetime(2026, 5, 1, 12, tzinfo=UTC)
        batch = [
            Occurrence(job=f"job-{i:05d}", scheduled_at=at + timedelta(minutes=i % 7))
            for i in range(10_000)
        ]
        assert all(store.claim_many(batch[::100], "other"))
        assert store.claim_many(batch, "me") == [i % 100 != 0 for i in range(10_000)]
    finally:
        store.close()


def test_a_batch_that_cannot_be_made_whole_raises_and_leaves_no_request_unawaited(
    nats_server: NatsServer,
) -> None:
    """A record that does not serialise in the middle of a batch: its error is raised, nothing
    of the batch was sent, and no request of it is left "never awaited" (pytest's unraisable
    warning, an error here, failed an unrelated test of a CI run when it was)."""
    import gc

    from cron_bridge.stores import RunRecord

    class Unwritable(RunRecord):
        __slots__ = ()

        def to_json(self) -> dict[str, object]:
            raise TypeError("not a record anyone writes")

    store = store_from_url(f"{nats_server.url}?prefix=half{uuid.uuid4().hex[:6]}")
    try:
        at = datetime(2026, 5, 1, 12, tzinfo=UTC)
        fields = {
            "job": "j",
            "outcome": "completed",
            "trigger": "schedule",
            "replica": "r",
            "started_at": at,
        }
        good = RunRecord(occurrence_id="j@2026-05-01T12:00:00.000Z", **fields)  # type: ignore[arg-type]
        bad = Unwritable(occurrence_id="j@2026-05-01T12:01:00.000Z", **fields)  # type: ignore[arg-type]
        try:
            store.record_many([good, bad, good])
        except TypeError as exc:
            assert "not a record anyone writes" in str(exc)
        else:
            raise AssertionError("the batch was written")
        gc.collect()  # an unawaited coroutine would warn here, and the warning is an error
        assert store.history("j") == []
    finally:
        store.close()


@pytest.fixture
def own_nats() -> Iterator[NatsServer]:
    """A nats-server of this test's own: it is SIGKILLed and started again."""
    yield from _serve(NatsServer, "nats-server")


@pytest.mark.nats
def test_a_settled_send_stays_settled_when_the_server_is_killed_seconds_later(
    own_nats: NatsServer,
) -> None:
    """JetStream writes a removal to disk only at its next sync: killed within it, the server
    brought a send back from before its settle once the settle's marker had itself expired
    (chaos seed 60 ran an inline occurrence twice that way). The marker outlives the sync."""
    store = store_from_url(f"{own_nats.url}?prefix=settled")
    try:
        at = datetime(2026, 5, 1, 12, tzinfo=UTC)
        batch = [Occurrence(job=f"job-{i}", scheduled_at=at) for i in range(10)]
        assert all(store.claim_many(batch, "me", pending=[True] * 10, lease=timedelta(0)))
        assert all(store.settle_many(batch, "me"))
        time.sleep(3)  # what a marker of a second's lifetime did not outlive
        own_nats.crash()
        own_nats.start()
        assert retried(lambda: store.take_over("taker"), 30, errors=(StoreUnavailable,)) == []
    finally:
        store.close()


@pytest.mark.nats
def test_a_takeover_whose_scan_outlives_a_settled_send_still_answers(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream lists a settled send's removal, which expires before the watch delivers
    it (a slow round trip): the scan ends once the watch's initial values are in, with
    nothing to take, instead of waiting out its timeout and calling the store down; and a
    claimer asking after that removal expired is still told who settled it."""
    monkeypatch.setattr(nats_pending, "SETTLED_KEPT", 1)
    store = store_from_url(f"{nats_server.url}?prefix=scan{uuid.uuid4().hex[:6]}")
    other = store_from_url(store.url)
    try:
        at = datetime(2030, 1, 1, tzinfo=UTC)
        batch = [
            Occurrence(job="scanned", scheduled_at=at + timedelta(minutes=i)) for i in range(5)
        ]
        assert all(store.claim_many(batch, "me", pending=[True] * 5, lease=timedelta(0)))
        assert other.take_over("taker") != []  # all five, each now the taker's
        assert other.settle_many(batch, "taker") == [True] * 5
        real = store._js.stream_info

        async def slow(*args: Any, **kwargs: Any) -> Any:
            info = await real(*args, **kwargs)
            await asyncio.sleep(2.5)  # the removals' lives end meanwhile
            return info

        monkeypatch.setattr(store._js, "stream_info", slow)
        assert store.take_over("me") == []
        assert store.settle_many(batch, "me") == [False] * 5  # settled by the taker
    finally:
        store.close()
        other.close()


@pytest.mark.nats
def test_a_claimer_that_died_between_its_marker_and_its_removal_blocks_no_taker(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A settle writes its marker, then removes the pending send; the claimer died between
    the two (its removal never came). The taker finds the claimer's marker with the send
    now its own: it writes over the marker and settles, once; the claimer, asked after, is
    told another replica holds it."""
    prefix = f"died{uuid.uuid4().hex[:6]}"
    claimer = store_from_url(f"{nats_server.url}?prefix={prefix}")
    taker = store_from_url(claimer.url)
    try:
        occurrence = Occurrence(job="cut", scheduled_at=datetime(2030, 1, 1, tzinfo=UTC))
        assert claimer.claim_many([occurrence], "claimer", pending=[True], lease=timedelta(0))

        async def died(name: str, last: int) -> bool:
            raise StoreUnavailable("the claimer died here")

        monkeypatch.setattr(claimer._sends, "drop", died)
        with pytest.raises(StoreUnavailable):
            claimer.settle_many([occurrence], "claimer")
        assert taker.take_over("taker") == [(occurrence.claim_key, "claimer")]
        assert taker.settle_many([occurrence], "taker") == [True]
        assert taker.take_over("another") == []
        monkeypatch.undo()
        assert claimer.settle_many([occurrence], "claimer") == [False]
    finally:
        claimer.close()
        taker.close()
