"""The Celery adapter: ``@cluster_task`` over ``@app.task`` / ``@shared_task``.

The beat sends through the task's own ``apply_async``, as celery beat does, so the task's
queue, routing, ``expires``, priority and serializer apply on every Celery version (``send_task``
by name drops the task's own queue before Celery 5.7); the occurrence travels in a
``cron_bridge`` message header, the handler is never run or pickled by the beat. On the worker
the task body runs under the guard; a failure goes back to Celery through
``task.retry(countdown=..., max_retries=...)``. A task's own retries (``self.retry()``,
``autoretry_for``) stay Celery's: each try is an attempt, numbered as Celery counts it.
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from celery import Celery
from celery.app.task import Task
from celery.exceptions import Retry
from celery.local import PromiseProxy, Proxy
from celery.signals import worker_process_shutdown

from cron_bridge.adapters import (
    HANDLER_ATTR,
    META_KEY,
    Adapter,
    Dispatch,
    Job,
    QueueRetry,
    SendThreads,
    TaskRef,
    flush_worker_records,
    override,
    run_delivery,
)
from cron_bridge_celery import worker_check  # noqa: F401 - the check of a worker's embedded beat

__all__ = ["CeleryAdapter"]


def _flush_records(**_: Any) -> None:
    """A prefork child ends in billiard's os._exit right after ``worker_process_shutdown``,
    where neither atexit nor multiprocessing's finalizers run: write what its deliveries kept."""
    flush_worker_records()


worker_process_shutdown.connect(_flush_records, weak=False)


class CeleryAdapter(Adapter, name="celery", stored_task="cron_bridge.stored"):
    """Celery tasks: ``@app.task``, ``@shared_task`` and the lazy proxy of an unfinalized app.
    Stored schedules are sent to the task ``cron_bridge.stored`` (``cron_bridge_celery.stored``)
    by name."""

    def __init__(self) -> None:
        self._decorated: list[Any] = []  # their app sends the stored schedules
        self._send_threads = SendThreads()

    @override
    def accepts(self, obj: object, queue: object | None) -> bool:
        return isinstance(obj, Task | Proxy)

    @override
    def describe(self, obj: object, queue: object | None) -> TaskRef:
        # Without queue= the app's own routing (task_routes) picks the queue when it is sent.
        task: Any = obj
        return TaskRef(
            task=task.name,
            name=task.name,
            queue=queue if isinstance(queue, str) else None,
            home=_home(task),
        )

    @override
    def wrap(self, obj: Any, job: Job) -> Any:
        self._decorated.append(obj)
        if isinstance(obj, PromiseProxy) and not obj.__evaluated__():
            # The app is not finalized yet: install once Celery builds the task.
            obj.__then__(_install, obj, job)
        elif isinstance(obj, Proxy):
            # @shared_task: the task of the current app (the worker's, once it imports this
            # module), taken now; this finalizes that app, as any use of the task would.
            _install(obj._get_current_object(), job)
        else:
            _install(obj, job)
        return obj

    @override
    def declared_in(self, modules: Sequence[ModuleType]) -> list[Job]:
        """The ``beat_schedule`` entries of the Celery apps in ``modules``, as jobs."""
        # Imported here: only a listing asks, and a worker that imports the adapter loads
        # neither celery beat nor the scheduler.
        from cron_bridge_celery.scheduler import beat_schedule_jobs

        return beat_schedule_jobs(modules)

    @property
    @override
    def declared_as(self) -> str:
        return "beat_schedule"

    @property
    @override
    def runs_with(self) -> str:
        return "celery -A {modules} beat -S cron_bridge"

    @override
    def enqueue_many(self, dispatches: Sequence[Dispatch]) -> list[Exception | None]:
        results: list[Exception | None] = [None] * len(dispatches)
        by_app: defaultdict[int, list[int]] = defaultdict(list)
        apps: dict[int, Celery] = {}
        for index, dispatch in enumerate(dispatches):
            app = _app_of(dispatch.job, self._decorated)
            apps[id(app)] = app
            by_app[id(app)].append(index)
        for key, indexes in by_app.items():
            app = apps[key]

            def send(part: Sequence[int], app: Celery = app, indexes: list[int] = indexes) -> None:
                # Each sender publishes on a connection of its own from the app's pool.
                mine = [indexes[i] for i in part]
                try:
                    with app.connection_for_write() as connection:
                        # One quick try: the beat retries within misfire_grace itself, and a
                        # blocking reconnect loop would hold up the other occurrences.
                        connection.ensure_connection(
                            max_retries=1, interval_start=0, interval_step=0
                        )
                        with app.amqp.Producer(connection) as producer:
                            _publish(app, producer, dispatches, mine, results)
                except Exception as exc:  # noqa: BLE001 - no connection: every send failed
                    for index in mine:
                        results[index] = results[index] or exc

            # A publish waits for the broker's answer: a large batch from two threads.
            self._send_threads.run(send, len(indexes))
        return results


BATCHED = 250  # messages per kombu publish batch (one pipeline round trip on Redis)


def _publish(
    app: Celery,
    producer: Any,
    dispatches: Sequence[Dispatch],
    indexes: list[int],
    results: list[Exception | None],
) -> None:
    """Send ``dispatches[i]`` for each of ``indexes``, ``BATCHED`` at a time in kombu's publish
    batch (``Producer.batch``, kombu 5.7: on Redis one pipeline instead of a client and a round
    trip per message; a transport that cannot batch publishes each at once). A batch that
    fails when it is flushed fails each of its messages (delivery uncertain: sent again by the
    beat, and a second copy that did land finds the worker's completion mark)."""
    batch = getattr(producer, "batch", None)
    if batch is None:  # kombu before 5.7
        for index in indexes:
            results[index] = _send(app, producer, dispatches[index])
        return
    for start in range(0, len(indexes), BATCHED):
        part = indexes[start : start + BATCHED]
        try:
            # Flushed when the block ends (or early, past max_size Redis commands: a queue
            # with an expiry adds some per message). Once a flush has failed, the batch
            # refuses the rest and its final flush raises: the whole part is failed below.
            with batch(max_size=4 * BATCHED):
                for index in part:
                    results[index] = _send(app, producer, dispatches[index])
        except Exception as exc:  # noqa: BLE001 - a flush failed: delivery of the part unknown
            for index in part:
                results[index] = results[index] or exc


def _app_of(job: Job, decorated: Sequence[Any]) -> Celery:
    """The job's task's app; for a stored schedule (no task object), the app of the tasks
    decorated in this process, else Celery's current app (``app.set_default()``)."""
    task: Any = job.handler
    if task is None and decorated:
        task = decorated[0]
    if task is None:
        from celery import current_app

        current: Celery = current_app._get_current_object()
        return current
    app: Celery = task._get_app() if hasattr(task, "_get_app") else task.app
    return app


def _send(app: Celery, producer: Any, dispatch: Dispatch) -> Exception | None:
    job = dispatch.job
    options: dict[str, Any] = {
        "headers": {META_KEY: dispatch.meta()},
        "producer": producer,
        # The beat retries within misfire_grace itself; a blocking publish retry would hold
        # up every other occurrence of the batch.
        "retry": False,
    }
    if job.queue is not None:
        options["queue"] = job.queue
    task: Any = job.handler
    if isinstance(task, Proxy):
        task = task._get_current_object()
    try:
        if isinstance(task, Task):
            task.apply_async(kwargs=dict(job.kwargs), **options)
        else:
            app.send_task(job.task or job.name, kwargs=dict(job.kwargs), **options)
    except Exception as exc:  # noqa: BLE001 - the broker's error is the occurrence's outcome
        return exc
    return None


def _home(task: Any) -> tuple[str, str] | None:
    """The module and attribute of a task made by ``@app.task`` or ``@shared_task`` from a
    function; None for a class-based task."""
    if isinstance(task, PromiseProxy) and not task.__evaluated__():
        # An app not finalized yet: the proxy holds the function Celery will build it from
        # (reading the task would build it too early).
        args = object.__getattribute__(task, "_Proxy__args")
        run = args[0] if args else None
    else:
        if isinstance(task, Proxy):
            task = task._get_current_object()  # @shared_task: wrap takes it now anyway
        run = getattr(type(task), "run", None)
    module, name = getattr(run, "__module__", None), getattr(run, "__name__", None)
    if not module or not name or "<" in getattr(run, "__qualname__", "<"):
        return None
    return module, name


def _install(task: Any, job: Job) -> None:
    """Run the task body under the guard, with Celery's own retries for failures."""
    original = task.run

    def run(*args: Any, **kwargs: Any) -> Any:
        request = task.request
        meta = (getattr(request, "headers", None) or {}).get(META_KEY)
        if meta is None:
            meta = getattr(request, META_KEY, None)
        attempt = (getattr(request, "retries", 0) or 0) + 1

        def call(ctx: Any) -> Any:
            try:
                return original(ctx, *args, **kwargs)
            except Retry as retry:
                # self.retry() or autoretry_for: Celery has sent the next try already.
                cause = retry.exc if isinstance(retry.exc, BaseException) else None
                raise QueueRetry(retry, cause) from retry

        delivery = run_delivery(job, meta, attempt=attempt, call=call)
        if delivery.retry_in is not None:
            raise task.retry(
                countdown=delivery.retry_in, max_retries=job.attempts - 1, exc=delivery.error
            )
        delivery.raise_if_failed()
        return delivery.value

    run.__name__ = getattr(original, "__name__", "run")
    run.__doc__ = getattr(original, "__doc__", None)
    setattr(run, HANDLER_ATTR, original)  # what a stored schedule naming the task calls
    task.run = run
    # Messages never carry ctx (the worker makes it): Celery checks a call's arguments
    # (typing=True, its default) against the handler's signature without it.
    task.__header__ = _header_without_ctx(original)


def _header_without_ctx(run: Any) -> Any:
    """What Celery's argument check calls (``Task.__header__``): raises ``TypeError`` for
    arguments the handler, less its leading ``ctx``, does not take; accepts anything when the
    signature cannot be read."""
    try:
        signature = inspect.signature(run)  # a bound task's run: self is already left out
    except (TypeError, ValueError):
        return lambda *args, **kwargs: None
    parameters = list(signature.parameters.values())[1:]
    without_ctx = signature.replace(parameters=parameters)
    # Whether binding accepts a call depends only on how many positional arguments come and
    # which keywords: a shape accepted once is not bound again (a beat sends each job's
    # with the same kwargs); a refusal is bound each time, for its own text.
    accepted: set[tuple[int, frozenset[str]]] = set()

    def check(*args: Any, **kwargs: Any) -> None:
        shape = (len(args), frozenset(kwargs))
        if shape in accepted:
            return
        without_ctx.bind(*args, **kwargs)
        if len(accepted) >= SHAPES_KEPT:
            accepted.clear()
        accepted.add(shape)

    return check


SHAPES_KEPT = 64  # argument shapes a task's check remembers
