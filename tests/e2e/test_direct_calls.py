"""``@cluster_task`` changes nothing for a task's other callers: twin tasks with the same queue
library options, one decorated and one not, are sent directly to a real worker and must run
as often, as far apart, and keep the same options (tests/apps/direct.py)."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.apps import direct, journal
from tests.e2e.processes import Worker, command_env
from tests.servers import RedisServer
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

SEND = {
    "celery": "from tests.apps import celery_app as app\n"
    "app.twin_plain.delay('x'); app.twin_decorated.delay('x')",
    "dramatiq": "from tests.apps import dramatiq_app as app\n"
    "app.twin_plain.send('x'); app.twin_decorated.send('x')",
    "rq": "import os\nfrom redis import Redis\nfrom rq import Queue, Retry\n"
    "from rq.serializers import JSONSerializer\nfrom tests.apps import direct, rq_app, scenarios\n"
    "queue = Queue(scenarios.QUEUE, connection=Redis.from_url(os.environ['RQ_REDIS_URL']),\n"
    "              serializer=JSONSerializer)\n"
    "for twin in (rq_app.twin_plain, rq_app.twin_decorated):\n"
    "    queue.enqueue(twin, 'x', retry=Retry(max=direct.RETRIES, interval=direct.DELAY_S))",
}

# The options each library keeps on the task, compared between the twins.
OPTIONS = {
    "celery": "from tests.apps import celery_app as app\n"
    "names = ['max_retries', 'default_retry_delay', 'autoretry_for', 'retry_backoff',\n"
    "         'acks_late', 'typing', 'time_limit', 'soft_time_limit', 'ignore_result',\n"
    "         'serializer', 'rate_limit', 'reject_on_worker_lost', 'retry_kwargs']\n"
    "for twin in (app.twin_plain, app.twin_decorated):\n"
    "    print(repr({n: getattr(twin, n, None) for n in names}))",
    "dramatiq": "from tests.apps import dramatiq_app as app\n"
    "for twin in (app.twin_plain, app.twin_decorated):\n"
    "    print(repr(sorted(twin.options.items())), twin.queue_name, twin.priority)",
    "rq": "import inspect\nfrom tests.apps import rq_app as app\n"
    "print(repr(inspect.signature(app.twin_plain)))\n"
    "print(repr(inspect.signature(app.twin_decorated).replace(parameters=list(\n"
    "    inspect.signature(app.twin_decorated).parameters.values())[1:])))",
}


def python(code: str, env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("library", ["celery", "rq", "dramatiq"])
def test_a_decorated_task_sent_directly_behaves_as_its_undecorated_twin(
    library: str, tmp_path: Path, redis_server: RedisServer
) -> None:
    """Both twins fail every run, with two retries of their own a second apart: each runs
    three times (not once, as when the job's attempts=1 overrode the task's options), the
    retries at least a second apart, and the task options read the same."""
    name = uuid.uuid4().hex[:8]
    notes = tmp_path / "journal.jsonl"
    env = command_env(
        notes,
        CB_TEST_BROKER=redis_server.url,
        CB_TEST_QUEUE=f"q-{name}",
        CB_TEST_JOB=f"job.{name}",
        RQ_REDIS_URL=redis_server.url,
        CRON_BRIDGE_STORE=f"{redis_server.url}?prefix=dc{name}:",
    )
    plain, decorated = python(OPTIONS[library], env, tmp_path).splitlines()
    assert plain == decorated
    preload = "tests.apps.rq_app" if library == "rq" else ""  # RQ: the functions loaded
    worker = Worker(
        "worker",
        tmp_path,
        env,
        library=library,
        queue=f"q-{name}",
        broker=redis_server.url,
        preload=preload,
    )
    worker.start()
    try:
        python(SEND[library], env, tmp_path)
        runs = lambda: [line for line in journal.read(notes) if line["event"] == "direct"]  # noqa: E731
        wait_for(lambda: len(runs()) >= 2 * (direct.RETRIES + 1), 90, "three runs of each twin")
        time.sleep(4)  # a fourth run of either would come within this
    finally:
        worker.ensure_stopped()
    lines = runs()
    assert Counter(line["twin"] for line in lines) == {
        "plain": direct.RETRIES + 1,
        "decorated": direct.RETRIES + 1,
    }, worker.output()[-3000:]
    # Each library's own lowest wait for a 1 s retry: RQ schedules it at int(now + interval),
    # so it can be 0.1 s; Dramatiq's jitter brings a backoff above max_backoff back to 50-100 %
    # of it (0.82 s was seen); Celery's countdown is the delay. Both twins keep to the
    # library's own bound, and to 10 s.
    lowest = {"rq": 0.0, "dramatiq": 0.45 * direct.DELAY_S}.get(library, 0.9 * direct.DELAY_S)
    for twin in ("plain", "decorated"):
        times = [line["at"] for line in lines if line["twin"] == twin]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert all(lowest <= gap < 10 for gap in gaps), (twin, gaps)
