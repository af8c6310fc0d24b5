"""The RQ adapter on the seam: functions named and sent."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis
from rq import Queue

from cron_bridge import ConfigError, Registry, cluster_task
from cron_bridge.queues.installed import get_adapter

pytestmark = pytest.mark.extras  # the adapter and its queue library


def report(ctx: Any) -> None:
    """A module-level function RQ can import by dotted path."""


def test_a_plain_function_with_an_rq_queue_is_named_by_its_dotted_path() -> None:
    """RQ jobs are enqueued by dotted path, so that is their task and default name."""
    registry = Registry()
    cluster_task(every="5m", queue=Queue("reports", connection=Redis()), registry=registry)(report)
    job = registry.get("adapters.rq.tests.test_adapter.report")
    assert job is not None
    assert (job.adapter, job.task, job.queue) == (
        "rq",
        "adapters.rq.tests.test_adapter.report",
        "reports",
    )


def test_an_rq_function_that_cannot_be_imported_is_refused() -> None:
    """A closure has no dotted path a worker could import."""

    def closure(ctx: Any) -> None:
        pass

    with pytest.raises(ConfigError, match="dotted path"):
        cluster_task(every="5m", queue="default", registry=Registry())(closure)


def test_rq_sends_a_batch_in_one_pipeline_and_refuses_a_duplicate_sent_again(
    redis_server: Any,
) -> None:
    """What a beat sends at once goes to RQ in one round trip (``enqueue_many``); a send
    marked ``again`` (the first one failed without an answer and may have landed) uses
    ``unique=True``, so an occurrence already in RQ is not queued a second time."""
    import uuid
    from datetime import UTC, datetime, timedelta

    from cron_bridge.jobs import Occurrence
    from cron_bridge.queues.adapter import Dispatch
    from cron_bridge_rq.adapter import rq_job_id

    connection = Redis.from_url(redis_server.url)
    queue = Queue(f"rq-batch-{uuid.uuid4().hex[:6]}", connection=connection)
    registry = Registry()
    cluster_task(every="1m", queue=queue, registry=registry)(report)
    (declared,) = registry.jobs()
    at = datetime(2026, 5, 1, 12, tzinfo=UTC)
    dispatches = [
        Dispatch(
            job=declared,
            occurrence=Occurrence(job=declared.name, scheduled_at=at + timedelta(minutes=n)),
            trigger="schedule",
            replica="r1",
        )
        for n in range(50)
    ]
    adapter = get_adapter("rq")
    before = connection.info("commandstats").get("cmdstat_exec", {}).get("calls", 0)
    assert adapter.enqueue_many(dispatches) == [None] * 50
    after = connection.info("commandstats").get("cmdstat_exec", {}).get("calls", 0)
    assert after - before == 1  # one MULTI/EXEC pipeline for the 50
    assert queue.count == 50
    assert set(queue.job_ids) == {rq_job_id(d.occurrence) for d in dispatches}
    again = [
        Dispatch(
            job=d.job, occurrence=d.occurrence, trigger=d.trigger, replica=d.replica, again=True
        )
        for d in dispatches[:3]
    ]
    assert adapter.enqueue_many(again) == [None] * 3  # already there: refused, counted as sent
    assert queue.count == 50


def test_rq_one_function_declared_for_two_queues_sends_to_each(redis_server: Any) -> None:
    """The rq.Queue is kept per function and queue: a function declared twice, for two
    queues, is sent to the queue of each declaration (not to the last one declared)."""
    import uuid
    from datetime import UTC, datetime

    from cron_bridge.queues.adapter import Dispatch

    connection = Redis.from_url(redis_server.url)
    first, second = (
        Queue(f"rq-{n}-{uuid.uuid4().hex[:6]}", connection=connection) for n in ("first", "second")
    )
    registry = Registry()
    cluster_task(every="1m", queue=first, name="to-first", registry=registry)(report)
    cluster_task(every="1m", queue=second, name="to-second", registry=registry)(report)
    at = datetime(2026, 5, 1, 12, tzinfo=UTC)
    dispatches = [
        Dispatch(job=job, occurrence=job.occurrence(at), trigger="schedule", replica="r1")
        for job in registry.jobs()
    ]
    assert get_adapter("rq").enqueue_many(dispatches) == [None, None]
    assert (first.count, second.count) == (1, 1)


def test_the_send_options_the_help_and_the_docs_name_are_the_ones_rq_takes() -> None:
    """The core cannot import the RQ adapter for its help: what it says of RQ's ``send``
    options, and what the pages say, is checked here against what the adapter takes."""
    import re

    from cron_bridge.options import OPTIONS
    from cron_bridge_rq.send import SEND_OPTIONS
    from tests.e2e.processes import REPO

    said = OPTIONS["send"].help.partition("(RQ: ")[2].partition(")")[0]
    assert tuple(said.split(", ")) == SEND_OPTIONS, OPTIONS["send"].help
    for page in ("jobs.md", "control.md"):
        text = (REPO / "docs" / page).read_text()
        said = text.partition("(RQ: ")[2].partition(")")[0]
        assert tuple(re.findall(r"`(\w+)`", said)) == SEND_OPTIONS, (page, said)
