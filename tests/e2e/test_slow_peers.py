"""A real beat whose pings go to a peer that trickles its answer one byte a second: its
jobs still run every second, pinged or not, and SIGTERM ends it within its shutdown timeout
plus a few seconds (before the fix, 8 such jobs filled the dispatch pool and the beat never
exited)."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import pytest

from cron_bridge.stores import store_from_url
from tests.e2e.processes import BeatProcess, command_env
from tests.e2e.test_queues import Stack, running, stop_all
from tests.peers import trickling
from tests.servers import RedisServer
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

SHUTDOWN = 3.0


def test_a_trickling_ping_peer_holds_up_no_job_and_no_exit(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    with trickling(every=1.0) as peer:
        env = command_env(tmp_path / "journal.jsonl", CB_TEST_PING_URL=f"{peer.url}/ping/x")
        beat = BeatProcess(
            name="slow",
            folder=tmp_path,
            env=env,
            app="tests.apps.slow_pings",
            store_url=store_url,
            extra=["--shutdown-timeout", f"{SHUTDOWN:g}s"],
        )
        beat.start()
        try:
            store = store_from_url(store_url)
            try:
                began = time.monotonic()
                # 8 s of runs: each job every second, however long its pings take.
                wait_for(lambda: len(store.history("plain.job", 100)) >= 8, 60, "8 plain runs")
                wait_for(
                    lambda: all(len(store.history(f"pinged.{n}", 100)) >= 8 for n in range(8)),
                    30,
                    "8 runs of each pinged job",
                )
                elapsed = time.monotonic() - began
                plain = store.history("plain.job", 100)
                pinged = [r for n in range(8) for r in store.history(f"pinged.{n}", 100)]
            finally:
                store.close()
            assert len(peer.heads) >= 8, "the pings reached the peer"
            took = beat.terminate()
        finally:
            beat.ensure_stopped()
    assert {record.outcome for record in plain + pinged} == {"completed"}, beat.output()
    assert elapsed < 30, f"8 runs of each job took {elapsed:.1f}s"
    assert took < SHUTDOWN + 5, f"SIGTERM took {took:.1f}s to end the beat"


PING_DEADLINE = 5.0  # Ping's default timeout: a deadline for the whole request


@pytest.mark.redis
@pytest.mark.parametrize("library", ["celery", "rq", "dramatiq"])
def test_a_worker_ends_on_sigterm_while_its_pings_trickle(
    library: str, tmp_path: Path, redis_server: RedisServer
) -> None:
    """A real worker of each library runs a guarded job whose start and end pings go to a
    peer that trickles its answer a byte a second (before the fix, a ping was bounded per
    read, so it never ended): the run is recorded, and SIGTERM sent while a ping is still
    being answered ends the worker within the pings' deadlines and the 5 s exit wait."""
    name = uuid.uuid4().hex[:8]
    with trickling(every=1.0) as peer:
        stack = Stack(
            library=library,
            broker=redis_server.url,
            queue=f"q-{name}",
            job=f"job.{name}",
            store_url=f"{redis_server.url}?prefix=sp{name}:",
            redis_port=redis_server.port,
            folder=tmp_path,
            notes=tmp_path / "journal.jsonl",
        )
        extra = {"CB_TEST_MONITOR": f"ping:{peer.url}/ping/{name}"}
        (worker,) = workers = running(stack.workers("every", 1, **extra))
        store = stack.store()
        try:
            sent = subprocess.run(
                [stack.python, "-m", "tests.apps.resend", stack.app, "2026-01-01T12:00:00+00:00"],
                env=stack.env("every", **extra),
                cwd=stack.folder,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert sent.returncode == 0, sent.stderr
            wait_for(lambda: len(stack.lines("ran")) == 1, 60, "the handler's run")
            wait_for(lambda: bool(store.history(stack.job, 5)), 30, "the run's record")
            wait_for(lambda: len(peer.heads) >= 2, 30, "the end ping sent")
            took = worker.terminate()
            (record,) = store.history(stack.job, 5)
        finally:
            stop_all(workers)
            store.close()
    assert record.outcome == "completed", worker.output()[-3000:]
    assert peer.paths()[0] == f"/ping/{name}/start"
    assert took < 2 * PING_DEADLINE + 5 + 5, f"SIGTERM took {took:.1f}s to end the worker"
