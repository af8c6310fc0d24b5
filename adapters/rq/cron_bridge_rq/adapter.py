"""The RQ adapter: ``@cluster_task(queue=...)`` over a plain, importable function.

The beat enqueues by dotted path with a job id made from the occurrence; the occurrence
travels in the job's meta. What one beat sends at once goes in one pipeline (RQ's
``enqueue_many``): the claim already makes each occurrence's job id unique to one send. A send
that failed without an answer (it may have landed) is sent again with ``enqueue_call(...,
unique=True)``, which RQ refuses for a job id it holds, so the same occurrence never sits in RQ
twice.
Failures go back to RQ, whose ``Retry(max=..., interval=[...])`` (run by a worker started with
``--with-scheduler``) brings the next attempt.
"""

from __future__ import annotations

import functools
import math
import os
import threading
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from redis import Redis
from rq import Queue, Retry, get_current_job
from rq.exceptions import DuplicateJobError
from rq.serializers import JSONSerializer

from cron_bridge.adapters import (
    HANDLER_ATTR,
    META_KEY,
    Adapter,
    ConfigError,
    Dispatch,
    Job,
    Store,
    TaskRef,
    flush_worker_records,
    override,
    run_delivery,
)
from cron_bridge_rq.ids import rq_job_id
from cron_bridge_rq.send import check_send

__all__ = ["HORSE_FLUSH", "RQAdapter", "rq_intervals", "rq_job_id", "use_worker_connection"]

# Seconds a job asks the store again for the records it kept before returning: RQ's work
# horse ends with os._exit right after the job, where no exit hook runs, and what it kept
# would be lost. Only a job whose record the store did not take waits (within its timeout).
HORSE_FLUSH = 10.0


def rq_intervals(delays: Sequence[float]) -> list[int]:
    """RQ retry intervals (whole seconds) never shorter than the backoff.

    RQ schedules a retry at ``int(now + interval)``, dropping the fraction of the second, so a
    1 s interval can come back after 0.1 s; one more second keeps the wait at least the delay.
    """
    return [math.ceil(delay) + 1 if delay > 0 else 0 for delay in delays]


# The Redis of queues given by name when RQ_REDIS_URL is not set: a BeatWorker's own.
_worker_connection: list[Redis | None] = [None]


def use_worker_connection(connection: Redis | None) -> None:
    """Send the jobs whose queue is given by name, when ``RQ_REDIS_URL`` is not set, to this
    Redis: what ``cron_bridge_rq.BeatWorker`` calls with the worker's own connection."""
    _worker_connection[0] = connection


class RQAdapter(Adapter, name="rq", stored_task="cron_bridge_rq.stored.run_stored"):
    """Plain functions enqueued by dotted path to an ``rq.Queue`` (or a queue name). Stored
    schedules enqueue ``cron_bridge_rq.stored.run_stored``.

    A queue given by name is on the Redis of ``RQ_REDIS_URL``; without it, in a worker that
    carries the beat (``cron_bridge_rq.BeatWorker``), on the worker's own Redis
    (``use_worker_connection``)."""

    def __init__(self) -> None:
        # The rq.Queue a function was declared with, by (dotted path, queue name): one
        # function may be declared for several queues.
        self._queues: dict[tuple[str, str], Queue] = {}
        self._connections: dict[str, Redis] = {}
        self._named: dict[tuple[str, str], Queue] = {}
        self._lock = threading.Lock()

    @override
    def accepts(self, obj: object, queue: object | None) -> bool:
        return isinstance(obj, types.FunctionType) and isinstance(queue, Queue | str)

    @override
    def describe(self, obj: object, queue: object | None) -> TaskRef:
        func: Any = obj
        path = f"{func.__module__}.{func.__qualname__}"
        if func.__module__ == "__main__" or "<locals>" in func.__qualname__:
            raise ConfigError(
                "RQ enqueues by dotted path, and a worker cannot import this function; define "
                "it at the top level of an importable module",
                job=path,
                option="queue",
                value=queue,
            )
        home = (func.__module__, func.__qualname__)
        if isinstance(queue, Queue):
            self._queues[(path, queue.name)] = queue
            return TaskRef(task=path, name=path, queue=queue.name, home=home)
        return TaskRef(task=path, name=path, queue=str(queue), home=home)

    @override
    def declared_in(self, modules: Sequence[types.ModuleType]) -> list[Job]:
        """The ``rq.cron.register(...)`` calls the imported modules made (an ``rq cron``
        config imported with ``-A``), as ``cron-bridge rq-cron`` would run them."""
        # Imported here, as in as_listed: only the command line asks, and a worker that
        # imports the adapter loads neither the rq-cron command nor click.
        from cron_bridge_rq.rq_cron import registered_jobs

        return registered_jobs()

    @property
    @override
    def declared_as(self) -> str:
        return "rq cron"

    @property
    @override
    def runs_with(self) -> str:
        return "cron-bridge rq-cron {modules}"

    @override
    def as_listed(self, store: Store | None, jobs: Sequence[Job]) -> dict[str, Job | str]:
        """The ``rq cron`` interval registrations among ``jobs`` as ``cron-bridge list``
        shows them: anchored where the store keeps their anchor, else "at its first deploy"."""
        from cron_bridge_rq.rq_cron import listed

        return listed(store, jobs)

    @override
    def wrap(self, obj: Any, job: Job) -> Any:
        original = obj

        @functools.wraps(original)
        def run(*args: Any, **kwargs: Any) -> Any:
            current = get_current_job()
            meta = current.meta.get(META_KEY) if current is not None else None
            retries_left = current.retries_left if current is not None else None
            attempt = job.attempts - retries_left if retries_left is not None else 1
            try:
                delivery = run_delivery(
                    job,
                    meta,
                    attempt=max(1, attempt),
                    call=lambda ctx: original(ctx, *args, **kwargs),
                )
            finally:
                flush_worker_records(HORSE_FLUSH)
            # RQ's Retry, set when the beat enqueued it, decides on the next attempt.
            delivery.raise_if_failed()
            return delivery.value

        setattr(run, HANDLER_ATTR, original)  # what a stored schedule naming it calls
        return run

    @override
    def enqueue_many(self, dispatches: Sequence[Dispatch]) -> list[Exception | None]:
        """First sends with ``enqueue_many``, one pipeline per Redis connection; a send that
        failed before, one by one with ``unique=True``."""
        results: list[Exception | None] = [None] * len(dispatches)
        batches: dict[int, tuple[Redis, dict[int, tuple[Queue, list[int]]]]] = {}
        for index, dispatch in enumerate(dispatches):
            if dispatch.again:
                results[index] = self._enqueue_unique(dispatch)
                continue
            try:
                queue = self._queue(dispatch.job)
            except Exception as exc:  # noqa: BLE001 - a queue we cannot build fails its jobs
                results[index] = exc
                continue
            _, by_queue = batches.setdefault(id(queue.connection), (queue.connection, {}))
            by_queue.setdefault(id(queue), (queue, []))[1].append(index)
        for connection, by_queue in batches.values():
            try:
                with connection.pipeline() as pipe:
                    for queue, indexes in by_queue.values():
                        data = [self._data(dispatches[i]) for i in indexes]
                        queue.enqueue_many(data, pipeline=pipe)
                    pipe.execute()
            except Exception as exc:  # noqa: BLE001 - the broker's error is the outcome
                for _, indexes in by_queue.values():
                    for index in indexes:
                        results[index] = exc
        return results

    def _enqueue_unique(self, dispatch: Dispatch) -> Exception | None:
        """A send again after a failure, which may have landed: RQ refuses a job id it holds."""
        data = self._data(dispatch)
        try:
            self._queue(dispatch.job).enqueue_call(
                func=data.func,
                kwargs=data.kwargs,
                job_id=data.job_id,
                meta=data.meta,
                retry=data.retry,
                timeout=data.timeout,
                unique=True,
            )
        except DuplicateJobError:
            return None  # in RQ already: sent once, not twice
        except Exception as exc:  # noqa: BLE001 - the broker's error is the outcome
            return exc
        return None

    def _data(self, dispatch: Dispatch) -> Any:
        job = dispatch.job
        retries = job.attempts - 1
        retry = None
        if retries:
            retry = Retry(max=retries, interval=rq_intervals(job.backoff.delays(retries)))
        send = job.send
        hard_limit = send.get("job_timeout")
        if hard_limit is None and job.timeout is not None:
            hard_limit = int(job.timeout.total_seconds()) + 30
        return Queue.prepare_data(
            job.task or job.name,
            kwargs=dict(job.kwargs),
            job_id=rq_job_id(dispatch.occurrence),
            meta={**send.get("meta", {}), META_KEY: dispatch.meta()},
            retry=retry,
            timeout=hard_limit,
            result_ttl=send.get("result_ttl"),
            ttl=send.get("ttl"),
            at_front=bool(send.get("at_front", False)),
        )

    @override
    def check_send(self, options: Mapping[str, Any]) -> None:
        """Refuse what RQ would not take as a job's options (``Job.send``)."""
        check_send(options)

    def _queue(self, job: Job) -> Queue:
        known = self._queues.get((job.task or "", job.queue or ""))
        if known is not None:
            return known
        url = os.environ.get("RQ_REDIS_URL")
        worker = _worker_connection[0]
        if not url and worker is not None:
            return self._named_queue("(the worker's)", job.queue or "default", lambda: worker)
        if not url:
            raise ConfigError(
                "a queue given by name needs RQ_REDIS_URL for its Redis (or pass an rq.Queue)",
                job=job.name,
                option="queue",
                value=job.queue,
            )
        return self._named_queue(
            url,
            job.queue or "default",
            lambda: Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5),
        )

    def _named_queue(self, where: str, name: str, connect: Callable[[], Redis]) -> Queue:
        with self._lock:
            queue = self._named.get((where, name))
            if queue is not None:
                return queue
            connection = self._connections.get(where)
            if connection is None:
                connection = self._connections[where] = connect()
            # JSON, never pickle: workers of these queues run with
            # --serializer rq.serializers.JSONSerializer. One Queue per name, so a batch for
            # one queue is one enqueue_many.
            queue = self._named[(where, name)] = Queue(
                name, connection=connection, serializer=JSONSerializer
            )
            return queue
