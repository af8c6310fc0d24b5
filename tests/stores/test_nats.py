"""NATS specifics: a large batch keeps each request within its own timeout."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from cron_bridge.jobs import Occurrence
from cron_bridge.stores import store_from_url
from tests.servers import NatsServer


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
