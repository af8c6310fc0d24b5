"""A send whose answer was lost, on a real Redis broker: what the beat may send again.

A broker that freezes (SIGSTOP: a paused VM, a stalled disk) takes the command, and the
sender's socket timeout gives up on the answer before the broker wakes and carries it out: the
message lands although the send failed. Where the task meets the guard on the worker (every
``@cluster_task``), or the queue refuses a copy (RQ's unique job ids), the beat sends it again
marked ``again``; where it meets nothing (a drop-in sender's unchanged task: periodiq's actors,
dramatiq-crontab's, a ``beat_schedule`` entry), sending again could run it twice, so the beat
does not. Nor can it tell a send that never left from one that landed: the broker library's
own retries (redis-py's ten by default) end on whatever the last attempt met.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import dramatiq
import pytest
import redis
from dramatiq.brokers.redis import RedisBroker

from cron_bridge.queues.adapter import Dispatch
from cron_bridge.queues.installed import get_adapter
from tests.conftest import _serve
from tests.servers import RedisServer

# Dramatiq, redis-py and every adapter.
pytestmark = pytest.mark.extras


@pytest.fixture
def broker_server() -> Iterator[RedisServer]:
    """A Redis of this test's own: it is frozen and woken."""
    yield from _serve(RedisServer, "redis-server")


def frozen_send(server: RedisServer, send: object) -> Exception | None:
    """Call ``send()`` with the broker frozen, wake the broker; what the send returned."""
    assert server.process is not None and callable(send)
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        return send()  # type: ignore[no-any-return]
    finally:
        os.kill(server.process.pid, signal.SIGCONT)


def test_a_periodiq_actor_sent_to_a_frozen_broker_lands_and_is_not_sent_again(
    broker_server: RedisServer,
) -> None:
    """periodiq's sender, on dramatiq's own RedisBroker with a socket timeout: the send to a
    frozen broker fails (redis-py's own retries time out too), the message lands anyway; the
    sender says nothing would refuse a second copy, so the beat records it failed instead of
    sending it again (tests/test_beat.py shows the beat's side)."""
    from periodiq import PeriodiqMiddleware, cron

    from cron_bridge_dramatiq.periodiq import PeriodiqSender, periodic_jobs

    namespace = f"lost-{uuid.uuid4().hex[:6]}"
    broker = RedisBroker(url=broker_server.url, namespace=namespace, socket_timeout=0.5)
    broker.add_middleware(PeriodiqMiddleware(skip_delay=30))
    previous = dramatiq.get_broker()
    dramatiq.set_broker(broker)
    try:

        @dramatiq.actor(actor_name="lost.report", queue_name="reports", periodic=cron("* * * * *"))
        def report() -> None: ...

        jobs, refused = periodic_jobs([report], "UTC", 30)
        ((job, _),) = jobs.values()
        assert refused == {}
        occurrence = job.occurrence(datetime(2026, 12, 2, 1, 30, tzinfo=UTC))
        sender = PeriodiqSender({"lost.report": report}, "UTC")
        dispatch = Dispatch(job=job, occurrence=occurrence, trigger="schedule", replica="r1")
        # A sender that has sent before (dramatiq's script loaded), as a running beat has.
        assert sender.enqueue_many([dispatch]) == [None]
        error = frozen_send(broker_server, lambda: sender.enqueue_many([dispatch])[0])
    finally:
        dramatiq.set_broker(previous)
    assert isinstance(error, redis.TimeoutError), error
    assert not sender.refuses_copies
    awake = redis.Redis.from_url(broker_server.url)
    assert awake.hlen(f"{namespace}:reports.msgs") == 2  # it landed: a third send, a copy


def test_which_senders_are_sent_again_after_a_lost_answer() -> None:
    """The adapters' tasks meet the guard; the drop-in senders' tasks do not, except RQ
    cron's, whose job id is the occurrence's and whose send is unique=True."""
    from cron_bridge_celery.sender import BeatScheduleSender
    from cron_bridge_dramatiq.crontab import CrontabSender
    from cron_bridge_dramatiq.periodiq import PeriodiqSender
    from cron_bridge_rq.rq_cron import RQCronSender

    for name in ("celery", "rq", "dramatiq"):
        assert get_adapter(name).refuses_copies, name
    for sender in (BeatScheduleSender, CrontabSender, PeriodiqSender):
        assert not sender.refuses_copies, sender
    assert RQCronSender.refuses_copies
