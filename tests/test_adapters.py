"""The adapter seam: adapters are found through entry points and name the tasks they accept."""

from __future__ import annotations

from typing import Any

import dramatiq
import pytest
from celery import Celery
from dramatiq.brokers.stub import StubBroker
from redis import Redis
from rq import Queue

from cron_bridge import ConfigError, Registry, cluster_task
from cron_bridge.queues.installed import ENTRY_POINT_GROUP, get_adapter, installed_adapters
from cron_bridge.storable import HANDLER_ATTR

# The three adapters and their queue libraries.
pytestmark = pytest.mark.extras


def report(ctx: Any) -> None:
    """A module-level function RQ can import by dotted path."""


def test_the_three_adapters_are_discovered_through_entry_points() -> None:
    """Installing an adapter distribution is all it takes for the core to find it."""
    names = {adapter.name for adapter in installed_adapters()}
    assert {"celery", "rq", "dramatiq"} <= names, ENTRY_POINT_GROUP
    assert type(get_adapter("celery")).__module__.startswith("cron_bridge_celery")


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


def test_a_dramatiq_actor_becomes_a_queue_job() -> None:
    """``@cluster_task`` over an actor takes the actor name and queue name."""
    registry = Registry()

    def sync(ctx: Any) -> None:
        pass

    actor = dramatiq.actor(sync, broker=StubBroker(), actor_name="sync_accounts", queue_name="ops")
    cluster_task(every="5m", registry=registry)(actor)
    job = registry.get("sync_accounts")
    assert job is not None
    assert (job.adapter, job.task, job.queue) == ("dramatiq", "sync_accounts", "ops")


def test_a_plain_function_with_an_rq_queue_is_named_by_its_dotted_path() -> None:
    """RQ jobs are enqueued by dotted path, so that is their task and default name."""
    registry = Registry()
    cluster_task(every="5m", queue=Queue("reports", connection=Redis()), registry=registry)(report)
    job = registry.get("tests.test_adapters.report")
    assert job is not None
    assert (job.adapter, job.task, job.queue) == ("rq", "tests.test_adapters.report", "reports")


def test_an_rq_function_that_cannot_be_imported_is_refused() -> None:
    """A closure has no dotted path a worker could import."""

    def closure(ctx: Any) -> None:
        pass

    with pytest.raises(ConfigError, match="dotted path"):
        cluster_task(every="5m", queue="default", registry=Registry())(closure)


def test_an_object_no_adapter_accepts_lists_the_installed_adapters() -> None:
    """A plain function without ``queue=`` or ``target="inline"`` is refused with a way out."""
    with pytest.raises(ConfigError) as caught:
        cluster_task(every="5m", name="lost", registry=Registry())(report)
    message = str(caught.value)
    assert "celery, dramatiq, rq" in message
    assert 'target="inline"' in message
    assert caught.value.job == "lost"


def test_a_queue_target_with_instance_scope_is_refused_at_import() -> None:
    """scope="instance" runs in every beat, so a Celery task cannot take it."""
    app = Celery("tests", set_as_current=False)
    with pytest.raises(ConfigError) as caught:

        @cluster_task(every="5m", scope="instance", registry=Registry())
        @app.task(name="reports.local")
        def local(ctx: Any) -> None:
            pass

    assert (caught.value.job, caught.value.option, caught.value.value) == (
        "reports.local",
        "scope",
        "instance",
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


def _a_batch(jobs: dict[str, Any], good: str, bad: str, every: int) -> tuple[list[Any], set[int]]:
    """A batch large enough to be split between the send threads: every ``every``-th dispatch
    goes to the job whose broker is down; each occurrence is its own minute."""
    from datetime import UTC, datetime, timedelta

    from cron_bridge.jobs import Occurrence
    from cron_bridge.queues.adapter import Dispatch
    from cron_bridge.queues.sending import SPLIT_MIN, THREADS

    at = datetime(2026, 5, 1, 12, tzinfo=UTC)
    size = 3 * THREADS * SPLIT_MIN
    failing = {n for n in range(size) if n % every == every // 2}
    dispatches = [
        Dispatch(
            job=jobs[bad if n in failing else good],
            occurrence=Occurrence(job=good, scheduled_at=at + timedelta(minutes=n)),
            trigger="schedule",
            replica="r1",
        )
        for n in range(size)
    ]
    return dispatches, failing


def test_dramatiq_sends_a_large_batch_from_two_threads_answers_in_order(
    redis_server: Any,
) -> None:
    """A large batch goes to Dramatiq from ``THREADS`` threads (one waits on the broker's
    answer while another sends); every message lands once, and each answer stays with its
    dispatch: the sends to a broker that is down fail, in their places, and only those."""
    import json
    import uuid

    from dramatiq.brokers.redis import RedisBroker

    up = RedisBroker(url=redis_server.url, namespace=f"dq-{uuid.uuid4().hex[:6]}")
    down = RedisBroker(url="redis://127.0.0.1:9/0", socket_timeout=0.2)  # discard port: refused
    registry = Registry()
    good = dramatiq.actor(report, broker=up, actor_name="good_actor", queue_name="good")
    bad = dramatiq.actor(report, broker=down, actor_name="bad_actor", queue_name="bad")
    cluster_task(every="1m", registry=registry)(good)
    cluster_task(every="1m", registry=registry)(bad)
    jobs = {job.name: job for job in registry.jobs()}
    dispatches, failing = _a_batch(jobs, "good_actor", "bad_actor", every=7)
    answers = get_adapter("dramatiq").enqueue_many(dispatches)
    assert [n for n, answer in enumerate(answers) if answer is not None] == sorted(failing)
    sent = Redis.from_url(redis_server.url).hvals(f"{up.namespace}:good.msgs")
    ids = [json.loads(raw)["options"]["cron_bridge"]["occurrence_id"] for raw in sent]
    assert sorted(ids) == sorted(
        d.occurrence.id for n, d in enumerate(dispatches) if n not in failing
    )
    assert len(ids) == len(set(ids)) == len(dispatches) - len(failing)


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
    dispatches, failing = _a_batch(jobs, "good.task", "bad.task", every=5)
    answers = get_adapter("celery").enqueue_many(dispatches)
    assert [n for n, answer in enumerate(answers) if answer is not None] == sorted(failing)
    sent = Redis.from_url(redis_server.url).lrange(queue, 0, -1)
    ids = [json.loads(raw)["headers"]["cron_bridge"]["occurrence_id"] for raw in sent]
    assert len(ids) == len(set(ids)) == len(dispatches) - len(failing)
    assert set(ids) == {d.occurrence.id for n, d in enumerate(dispatches) if n not in failing}


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


@pytest.mark.parametrize("attribute", ["send_report", "celery_report", "dramatiq_report"])
def test_a_task_decorated_away_from_its_module_is_refused_with_how_to_declare_it(
    attribute: str,
) -> None:
    """``cluster_task(...)(imported_task)`` in another module: the worker imports the task from
    its own module, undecorated (no guard, no ctx, history "enqueued" forever), so it is a
    ConfigError that names where to put the decorator."""
    from tests.apps import imported

    task = getattr(imported, attribute)
    registry = Registry()
    with pytest.raises(ConfigError) as caught:
        cluster_task(every="1m", queue="reports", registry=registry)(task)
    error = caught.value
    assert (error.option, error.value) == ("target", f"tests.apps.imported.{attribute}")
    assert "above its definition in tests.apps.imported" in error.reason
    assert f"decorated in {__name__}" in error.reason
    assert len(registry) == 0


@pytest.mark.parametrize("library", ["celery", "dramatiq", "rq"])
def test_a_task_whose_adapter_is_not_installed_names_the_distribution_to_install(
    library: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the library's adapter, the error says which distribution to install (it used
    to say "decorate a Celery task..." about a Celery task)."""
    from cron_bridge.queues import installed

    others = [a for a in installed_adapters() if a.name != library]
    monkeypatch.setattr(installed, "_adapters", others)
    if library == "celery":
        task: Any = Celery("missing", set_as_current=False).task(name="missing.task")(report)
        queue: Any = None
    elif library == "dramatiq":
        task, queue = dramatiq.actor(actor_name="missing_actor", broker=StubBroker())(report), None
    else:
        task, queue = report, Queue("reports", connection=Redis())
    with pytest.raises(ConfigError) as caught:
        cluster_task(every="1m", queue=queue, registry=Registry())(task)
    distribution = f"cron-bridge-{library}"
    assert f"adapter is not installed: pip install {distribution}" in caught.value.reason
    assert (caught.value.option, caught.value.value) == ("target", "queue")


def test_the_senders_of_other_schedulers_take_no_cluster_task() -> None:
    """celery beat's, rq cron's, periodiq's and dramatiq-crontab's senders share the core's
    DropInSender: nothing is declared on them (and declares=False keeps them out of the adapters
    an error about a declaration lists)."""
    from cron_bridge.queues.sending import DropInSender
    from cron_bridge_celery.sender import BeatScheduleSender
    from cron_bridge_dramatiq.crontab import CrontabSender
    from cron_bridge_dramatiq.periodiq import PeriodiqSender
    from cron_bridge_rq.rq_cron import RQCronSender

    senders = [
        BeatScheduleSender(Celery("s", set_as_current=False), {}),
        CrontabSender({}),
        PeriodiqSender({}, "UTC"),
        RQCronSender(Redis(), {}),
    ]
    for sender in senders:
        assert isinstance(sender, DropInSender) and sender.declares is False
        assert sender.accepts(report, None) is False
        with pytest.raises(ConfigError, match="are not declared with @cluster_task"):
            sender.describe(report, None)
    assert {s.name for s in senders} == {
        "celery-beat-schedule",
        "dramatiq-crontab",
        "periodiq",
        "rq-cron",
    }
