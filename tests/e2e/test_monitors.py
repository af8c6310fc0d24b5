"""Check-ins for every job (``monitor=``) on real workers of Celery, RQ and Dramatiq, each
against a loopback server that records what arrives: Sentry's envelopes (the real sentry-sdk,
``monitor="sentry"``) and HTTP pings (``monitor=Ping(url)``, as Healthchecks.io takes them).

- Sentry: a job of 3 attempts whose handler fails, sent once: each attempt checks in as the
  queue runs it, in progress then error under one id of its own, with the monitor config
  derived from the job (interval, zone, check-in margin).
- Ping: a job every second on 3 beats and 2 workers: one start and one success ping per run,
  as many as the handlers ran, none from the replicas that stood aside; the failing job of 3
  attempts: start then fail, 3 times.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import importable
from tests.e2e.processes import cli, outcomes_by_occurrence
from tests.e2e.test_queues import Stack, running, stop_all
from tests.e2e.test_sentry_beat import Recorder
from tests.servers import RedisServer
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

importable("sentry_sdk")

LIBRARIES = ["celery", "rq", "dramatiq"]


def a_stack(library: str, tmp_path: Path, redis_server: RedisServer) -> Stack:
    name = uuid.uuid4().hex[:8]
    return Stack(
        library=library,
        broker=redis_server.url,
        queue=f"q-{name}",
        job=f"mon.{name}",
        store_url=f"{redis_server.url}?prefix=mon{name}:",
        redis_port=redis_server.port,
        folder=tmp_path,
        notes=tmp_path / "journal.jsonl",
    )


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_retried_failing_run_checks_in_to_sentry_at_each_attempt(
    library: str, tmp_path: Path, redis_server: RedisServer
) -> None:
    stack = a_stack(library, tmp_path, redis_server)
    recorder = Recorder()
    served = recorder.serve()
    extra = {"CB_TEST_MONITOR": "sentry", "CB_TEST_SENTRY_DSN": next(served)}
    services = running(stack.workers("fail", 1, **extra))
    try:
        sent = cli(
            "run", stack.job, "-A", stack.app, env=stack.env("fail", **extra), cwd=stack.folder
        )
        assert sent.returncode == 0, sent.stderr
        wait_for(lambda: len(recorder.check_ins) >= 6, 60, "six check-ins")
        time.sleep(3)  # a seventh would come within this
    finally:
        stop_all(services)
        served.close()
    assert [line["attempt"] for line in stack.lines("attempt")] == [1, 2, 3]
    by_id = defaultdict(list)
    for check_in in recorder.check_ins:
        assert check_in.slug == stack.job
        by_id[check_in.check_in_id].append(check_in.status)
    assert len(by_id) == 3, by_id  # one check-in id per attempt
    assert sorted(by_id.values()) == [["in_progress", "error"]] * 3, by_id
    assert {str(c.config) for c in recorder.check_ins} == {
        str(
            {
                "checkin_margin": 1,
                "schedule": {"type": "interval", "value": 1, "unit": "hour"},
                "timezone": "UTC",
            }
        )
    }


class Pings:
    """A loopback server standing in for Healthchecks.io: it keeps the path of every ping."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def serve(self) -> Iterator[str]:
        pings = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                pings.paths.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"OK")

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/ping/{uuid.uuid4()}"
        finally:
            server.shutdown()
            server.server_close()


@pytest.mark.parametrize("library", LIBRARIES)
def test_every_run_pings_once_from_the_worker_that_ran_it(
    library: str, tmp_path: Path, redis_server: RedisServer
) -> None:
    stack = a_stack(library, tmp_path, redis_server)
    pings = Pings()
    served = pings.serve()
    url = next(served)
    extra = {"CB_TEST_MONITOR": f"ping:{url}"}
    services = running(stack.workers("every", 2, **extra), stack.beats("every", 3, **extra))
    try:
        wait_for(lambda: len(stack.lines("ran")) >= 8, 60, "runs on the workers")
        for beat in services[2:]:
            beat.terminate()
        store = stack.store()
        path = url.removeprefix(url.split("/ping/")[0])

        def settled() -> bool:
            """Every occurrence sent has met a worker (run, or skipped there), and every run
            has pinged its start and end."""
            sent = outcomes_by_occurrence(store, [stack.job])
            beat_side = {"enqueued", "skipped-claimed"}
            met = all(set(c) - beat_side for c in sent.values() if c["enqueued"])
            said = Counter(pings.paths)
            return met and said[f"{path}/start"] == said[path] == len(stack.lines("ran"))

        wait_for(settled, 30, "the workers to finish what was sent last, and ping")
        store.close()
    finally:
        stop_all(services)
        served.close()
    ran = Counter(line["occurrence_id"] for line in stack.lines("ran"))
    assert max(ran.values()) == 1, ran.most_common(3)
    said = Counter(pings.paths)
    assert set(said) == {f"{path}/start", path}, said
    assert said[f"{path}/start"] == said[path] == sum(ran.values()), (said, len(ran))


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_retried_failing_run_pings_start_and_fail_at_each_attempt(
    library: str, tmp_path: Path, redis_server: RedisServer
) -> None:
    stack = a_stack(library, tmp_path, redis_server)
    pings = Pings()
    served = pings.serve()
    url = next(served)
    extra = {"CB_TEST_MONITOR": f"ping:{url}"}
    services = running(stack.workers("fail", 1, **extra))
    try:
        sent = cli(
            "run", stack.job, "-A", stack.app, env=stack.env("fail", **extra), cwd=stack.folder
        )
        assert sent.returncode == 0, sent.stderr
        wait_for(lambda: len(pings.paths) >= 6, 60, "six pings")
        time.sleep(3)  # a seventh would come within this
    finally:
        stop_all(services)
        served.close()
    path = url.removeprefix(url.split("/ping/")[0])
    assert pings.paths == [f"{path}/start", f"{path}/fail"] * 3, pings.paths
