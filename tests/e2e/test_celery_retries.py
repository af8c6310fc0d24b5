"""A Celery task's own retries (``autoretry_for``, ``self.retry()``) under the guard, on a real
worker: each try is an attempt numbered as Celery counts it (``request.retries + 1``), recorded
``failed`` with the task's own error while Celery tries again, and the last try as it ended.
Celery's ``Retry`` goes back to Celery untouched: it is neither swallowed nor the error."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from cron_bridge.stores import store_from_url
from tests.apps import journal
from tests.e2e.processes import Worker, cli, command_env
from tests.e2e.test_celery_twin import celery_python
from tests.servers import RedisServer
from tests.waiting import wait_for

pytestmark = pytest.mark.slow
__all__ = ["celery_python"]  # the fixture: this environment's Celery and the lowest declared


@pytest.mark.parametrize(
    ("task", "last"),
    [("autoretry", ("failed", "RuntimeError: try 3 fails")), ("self-retry", ("completed", None))],
)
def test_a_tasks_own_retries_are_attempts_not_failures(
    task: str,
    last: tuple[str, str | None],
    tmp_path: Path,
    redis_server: RedisServer,
    celery_python: str,
) -> None:
    """Two retries of the task's own, sent by the beat: three tries, attempts 1, 2, 3, the
    first two recorded failed with the task's error (not ``Retry(...)``), the third as it
    ended; no fourth try (the guard does not retry on top of Celery)."""
    name = uuid.uuid4().hex[:8]
    job = f"job.{name}.{task}"
    notes = tmp_path / "journal.jsonl"
    store_url = f"{redis_server.url}?prefix=cr{name}:"
    env = command_env(
        notes,
        CB_TEST_BROKER=redis_server.url,
        CB_TEST_QUEUE=f"q-{name}",
        CB_TEST_JOB=f"job.{name}",
        CRON_BRIDGE_STORE=store_url,
    )
    worker = Worker(
        "worker",
        tmp_path,
        env,
        library="celery",
        queue=f"q-{name}",
        broker=redis_server.url,
        python=celery_python,
    )
    worker.start()
    tries = lambda: [line for line in journal.read(notes) if line["event"] == "own-retry"]  # noqa: E731
    store = store_from_url(store_url)
    ended = lambda: [r for r in store.history(job, 20) if r.outcome != "enqueued"]  # noqa: E731
    try:
        sent = cli("run", job, "-A", "tests.apps.celery_app", env=env, cwd=tmp_path)
        assert sent.returncode == 0, sent.stderr
        wait_for(lambda: len(ended()) >= 3, 90, "three recorded tries")
        wait_for(lambda: len(tries()) >= 3, 10, "three tries written down")
        time.sleep(3)  # a fourth try would come within this (no countdown)
    finally:
        worker.ensure_stopped()
    lines = tries()
    assert [(line["attempt"], line["celery_retries"]) for line in lines] == [(1, 0), (2, 1), (3, 2)]
    assert len({line["occurrence_id"] for line in lines}) == 1
    assert {line["trigger"] for line in lines} == {"queue"}
    records = sorted(ended(), key=lambda r: r.attempt)
    assert [(r.attempt, r.outcome, r.error) for r in records] == [
        (1, "failed", "RuntimeError: try 1 fails"),
        (2, "failed", "RuntimeError: try 2 fails"),
        (3, *last),
    ], worker.output()[-3000:]
    log = worker.output()
    assert "attempt 1 (attempts remain)" in log and "attempt 2 (attempts remain)" in log
    assert "Retry(" not in " ".join(r.error or "" for r in records)
