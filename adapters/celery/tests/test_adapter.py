"""The Celery adapter on the seam: tasks named, wrapped and sent."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery
from redis import Redis

from cron_bridge import Registry, cluster_task
from cron_bridge.queues.installed import get_adapter
from cron_bridge.storable import HANDLER_ATTR
from tests.batches import a_batch, report

pytestmark = pytest.mark.extras  # the adapter and its queue library


def test_a_celery_task_becomes_a_queue_job_named_after_the_task() -> None:
    """``@cluster_task`` over ``@app.task`` takes the task's name, and ``queue=`` overrides."""
    app = Celery("tests", set_as_current=False)
    registry = Registry()

    @cluster_task(cron="0 3 * * *", tz="Europe/Warsaw", queue="billing", registry=registry)
    @app.task(name="billing.close_day")
    def close_day(ctx: Any) -> None:
        pass

    job = registry.get("billing.close_day")
    assert job is not None
    assert (job.adapter, job.task, job.queue, job.target) == (
        "celery",
        "billing.close_day",
        "billing",
        "queue",
    )


def test_the_lazy_proxy_of_an_unfinalized_app_is_wrapped_once_built() -> None:
    """``@shared_task``-style proxies are accepted and wrapped when Celery builds the task."""
    app = Celery("lazy", set_as_current=False)
    registry = Registry()

    @cluster_task(every="5m", registry=registry)
    @app.task(name="lazy.task")
    def lazy(ctx: Any) -> str:
        return "ran"

    job = registry.get("lazy.task")
    assert job is not None and job.adapter == "celery"
    app.finalize()
    task = app.tasks["lazy.task"]
    assert hasattr(task.run, HANDLER_ATTR)  # the guard's wrapper is installed
    assert task.run.__name__ == "lazy"


def test_a_shared_task_is_wrapped_in_the_current_app() -> None:
    """``@shared_task`` under ``@cluster_task``: the current app's task runs under the guard."""
    from celery import shared_task

    app = Celery("shared", set_as_current=True)
    registry = Registry()

    @cluster_task(every="5m", registry=registry)
    @shared_task(name="shared.report")
    def report(ctx: Any) -> None:
        pass

    job = registry.get("shared.report")
    assert job is not None and job.adapter == "celery"
    assert hasattr(app.tasks["shared.report"].run, HANDLER_ATTR)


def test_celery_still_checks_a_calls_arguments_against_the_handler_without_ctx() -> None:
    """The argument check (``typing``) stays on: ``.delay()`` with arguments the handler does
    not take fails at the call, as for the undecorated task; ``ctx`` is never asked for."""
    app = Celery("typed", set_as_current=False)

    @app.task(name="typed.plain")
    def plain(day: str, *, dry_run: bool = False) -> None:
        pass

    @cluster_task(every="5m", registry=Registry())
    @app.task(name="typed.decorated")
    def decorated(ctx: Any, day: str, *, dry_run: bool = False) -> None:
        pass

    assert decorated.typing is plain.typing is True
    for task in (plain, decorated):
        task.__header__("2026-12-01", dry_run=True)  # what apply_async checks first
        with pytest.raises(TypeError):
            task.apply_async(args=("2026-12-01", "extra"))
        with pytest.raises(TypeError):
            task.apply_async(kwargs={"night": "x"})


def test_celery_sends_a_large_batch_from_two_threads_each_on_its_own_connection(
    redis_server: Any,
) -> None:
    """A large batch goes to Celery from ``THREADS`` threads, each publishing on a connection
    of its own from the app's pool: every message lands once with its occurrence, and the
    sends of an app whose broker is down fail, each in its place, the others unaffected."""
    import json
    import uuid

    queue = f"celery-batch-{uuid.uuid4().hex[:6]}"
    up = Celery("up", broker=redis_server.url, set_as_current=False)
    down = Celery("down", broker="redis://127.0.0.1:9/0", set_as_current=False)
    down.conf.broker_connection_timeout = 0.2
    registry = Registry()
    cluster_task(every="1m", queue=queue, registry=registry)(up.task(name="good.task")(report))
    cluster_task(every="1m", queue=queue, registry=registry)(down.task(name="bad.task")(report))
    jobs = {job.name: job for job in registry.jobs()}
    dispatches, failing = a_batch(jobs, "good.task", "bad.task", every=5)
    answers = get_adapter("celery").enqueue_many(dispatches)
    assert [n for n, answer in enumerate(answers) if answer is not None] == sorted(failing)
    sent = Redis.from_url(redis_server.url).lrange(queue, 0, -1)
    ids = [json.loads(raw)["headers"]["cron_bridge"]["occurrence_id"] for raw in sent]
    assert len(ids) == len(set(ids)) == len(dispatches) - len(failing)
    assert set(ids) == {d.occurrence.id for n, d in enumerate(dispatches) if n not in failing}


def test_celery_sends_in_publish_batches_and_a_failed_batch_fails_its_messages(
    redis_server: Any,
) -> None:
    """Celery publishes through kombu's publish batch (one pipeline per ``BATCHED`` messages
    on Redis). A batch Redis refuses when it is flushed (here a user whose ACL may not write
    one queue) answers an error for each of its messages: a message answered as sent is
    always in its queue, and the batches without the refused message are all sent."""
    import json
    import uuid
    from datetime import UTC, datetime, timedelta

    import redis

    from cron_bridge.jobs import Occurrence
    from cron_bridge.queues.adapter import Dispatch
    from cron_bridge_celery.adapter import BATCHED

    tag = uuid.uuid4().hex[:6]
    good, refused, user = f"celery-good-{tag}", f"celery-refused-{tag}", f"sender-{tag}"
    client = Redis.from_url(redis_server.url)
    try:  # reads anywhere, writes all but the refused queue (key permissions: Redis 7)
        client.execute_command(
            "ACL",
            "SETUSER",
            user,
            "on",
            "nopass",
            "+@all",
            "&*",
            "%R~*",
            f"%W~{good}*",
            "%W~_kombu*",
        )
    except redis.ResponseError as exc:
        pytest.skip(f"this redis-server has no key permissions in its ACLs: {exc}")
    app = Celery(
        "batched",
        set_as_current=False,
        broker=redis_server.url.replace("redis://", f"redis://{user}:@"),
    )
    registry = Registry()
    cluster_task(every="1m", queue=good, registry=registry)(app.task(name="good.task")(report))
    cluster_task(every="1m", queue=refused, registry=registry)(app.task(name="bad.task")(report))
    jobs = {job.name: job for job in registry.jobs()}
    at = datetime(2026, 5, 1, 12, tzinfo=UTC)
    size = 4 * BATCHED
    poisoned = size // 2
    dispatches = [
        Dispatch(
            job=jobs["bad.task" if n == poisoned else "good.task"],
            occurrence=Occurrence(job="good.task", scheduled_at=at + timedelta(minutes=n)),
            trigger="schedule",
            replica="r1",
        )
        for n in range(size)
    ]
    answers = get_adapter("celery").enqueue_many(dispatches)
    landed = {
        json.loads(raw)["headers"]["cron_bridge"]["occurrence_id"]
        for raw in client.lrange(good, 0, -1)
    }
    answered_sent = {
        d.occurrence.id for d, answer in zip(dispatches, answers, strict=True) if answer is None
    }
    assert answered_sent <= landed  # never "sent" for a message that is not there
    assert answers[poisoned] is not None
    assert len(landed) == size - 1  # Redis ran the rest of the refused batch's pipeline
    # That batch failed as a whole: to the beat the delivery of its other messages is
    # uncertain (they landed; it sends them again, and the worker's completion mark keeps a
    # second copy from running). The other batches were sent.
    assert sum(answer is not None for answer in answers) == BATCHED
