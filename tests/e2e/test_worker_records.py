"""Run records a real worker kept while the store refused them reach the store: an RQ work
horse writes its own before it exits; Celery and Dramatiq workers write them with the next
delivery, or when the worker exits. The handler pauses writes on the store's Redis (``CLIENT
PAUSE ... WRITE``) as it ends, for longer than the store's timeout, so the record write of
that very run is refused; each test checks it was (the worker said it kept it)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from cron_bridge.stores import Store
from tests.conftest import unavailable
from tests.e2e.processes import Service
from tests.e2e.test_queues import Stack, floor_python, running, stop_all
from tests.servers import RedisServer, ServerUnavailable
from tests.waiting import wait_for

pytestmark = [pytest.mark.redis, pytest.mark.slow]

PAUSE_MS = 3000  # the store's timeout is 0.5 s: the record write is refused, not just slow
KEPT = "kept, written when the store answers"
FIRST, SECOND = "2026-01-01T12:00:00+00:00", "2026-01-01T13:00:00+00:00"


@pytest.fixture(scope="module")
def store_server() -> Iterator[RedisServer]:
    """A Redis of the store's own: the pause must not stop the broker's writes."""
    server = RedisServer()
    try:
        server.start()
    except ServerUnavailable as exc:
        unavailable("redis-server", exc)
    yield server
    server.remove()


def _stack(
    library: str,
    tmp_path: Path,
    broker: RedisServer,
    store: RedisServer,
    python: str = sys.executable,
) -> Stack:
    name = uuid.uuid4().hex[:8]
    return Stack(
        library=library,
        broker=broker.url,
        queue=f"q-{name}",
        job=f"job.{name}",
        store_url=f"{store.url}?prefix=kept{name}:&connect_timeout=0.5",
        redis_port=broker.port,
        folder=tmp_path,
        notes=tmp_path / "journal.jsonl",
        python=python,
    )


def _extra(store: RedisServer) -> dict[str, str]:
    return {"CB_TEST_PAUSE_REDIS": store.url, "CB_TEST_PAUSE_MS": str(PAUSE_MS)}


def _send(stack: Stack, store: RedisServer, at: str) -> str:
    """One message of the job for ``at``, as the beat sends it; its occurrence id."""
    sent = subprocess.run(
        [stack.python, "-m", "tests.apps.resend", stack.app, at],
        env=stack.env("pause", **_extra(store)),
        cwd=stack.folder,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert sent.returncode == 0, sent.stderr
    return f"{stack.job}@{at[:19]}.000Z"


def _completed(store: Store, job: str) -> set[str]:
    return {r.occurrence_id for r in store.history(job, 20) if r.outcome == "completed"}


def _recorded(store: Store, job: str) -> set[str]:
    return {r.occurrence_id for r in store.history(job, 20)}


def _writable(server: RedisServer) -> bool:
    """The pause is over: the store's Redis takes a write again."""
    with redis.Redis.from_url(server.url, socket_timeout=0.2) as client:
        try:
            return bool(client.set("cb-test-probe", "1"))
        except redis.RedisError:
            return False


def _refused_then_over(stack: Stack, worker: Service, server: RedisServer) -> None:
    """Wait until the worker said it kept the record, then until the pause is over."""
    wait_for(lambda: KEPT in worker.output(), 60, "the record write refused and kept")
    wait_for(lambda: _writable(server), 30, "the end of the pause")


@pytest.mark.parametrize("version", ["newest", "floor"])
def test_an_rq_work_horse_writes_the_record_the_store_refused_before_it_exits(
    version: str, tmp_path: Path, redis_server: RedisServer, store_server: RedisServer
) -> None:
    """RQ forks a work horse per job and ends it with os._exit, where no exit hook runs: the
    record the store refused is written before the horse exits, once the store answers (on
    the newest RQ and on the lowest the adapter declares)."""
    python = floor_python("rq") if version == "floor" else sys.executable
    stack = _stack("rq", tmp_path, redis_server, store_server, python)
    (worker,) = workers = running(stack.workers("pause", 1, **_extra(store_server)))
    store = stack.store()
    try:
        first = _send(stack, store_server, FIRST)
        wait_for(lambda: _completed(store, stack.job) == {first}, 40, "the record in the store")
        output = worker.output()
    finally:
        stop_all(workers)
        store.close()
    assert KEPT in output, output[-3000:]  # the write was refused: kept, then written
    assert [line["occurrence_id"] for line in stack.lines("ran")] == [first]


@pytest.mark.parametrize("library", ["celery", "dramatiq"])
def test_a_record_the_store_refused_is_written_with_the_next_delivery(
    library: str, tmp_path: Path, redis_server: RedisServer, store_server: RedisServer
) -> None:
    """Celery's prefork child and Dramatiq's worker process outlive the delivery: the record
    is kept in the process, not lost with the delivery, and written with the next one."""
    stack = _stack(library, tmp_path, redis_server, store_server)
    (worker,) = workers = running(stack.workers("pause", 1, **_extra(store_server)))
    store = stack.store()
    try:
        first = _send(stack, store_server, FIRST)
        _refused_then_over(stack, worker, store_server)
        assert _completed(store, stack.job) == set()  # kept in the worker, not yet written
        second = _send(stack, store_server, SECOND)
        # The second run's own outcome does not matter here (it may skip behind the first's
        # lock, still released in the background): its delivery wrote the first's record.
        wait_for(lambda: {first, second} <= _recorded(store, stack.job), 40, "both records")
        assert _completed(store, stack.job) >= {first}
    finally:
        stop_all(workers)
        store.close()


@pytest.mark.parametrize("library", ["celery", "dramatiq"])
def test_a_record_the_store_refused_is_written_when_the_worker_exits(
    library: str, tmp_path: Path, redis_server: RedisServer, store_server: RedisServer
) -> None:
    """No delivery comes after: the record is written as the worker process exits (Celery's
    prefork child on worker_process_shutdown, Dramatiq's through multiprocessing's exit)."""
    stack = _stack(library, tmp_path, redis_server, store_server)
    (worker,) = workers = running(stack.workers("pause", 1, **_extra(store_server)))
    store = stack.store()
    try:
        first = _send(stack, store_server, FIRST)
        _refused_then_over(stack, worker, store_server)
        assert _completed(store, stack.job) == set()
        worker.terminate()
        assert _completed(store, stack.job) == {first}
    finally:
        stop_all(workers)
        store.close()
