"""Stored schedules with real processes: added from the CLI while three beats run, run on a
real RQ, Celery and Dramatiq worker once per occurrence, updated from every 2 s to every 3 s
and removed, each change followed by every replica."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from cron_bridge.jobs import Occurrence
from tests.apps import journal
from tests.conftest import make_kit
from tests.e2e.processes import BeatProcess, Worker, cli, command_env
from tests.servers import RedisServer
from tests.waiting import wait_for

pytestmark = [pytest.mark.redis, pytest.mark.slow]


# The app each library's beats and worker load, and the plain task the schedule names.
APPS = {
    "rq": ("tests.apps.rq_app", "tests.apps.stored_tasks.report"),
    "celery": ("tests.apps.celery_app", "cb.stored_report"),
    "dramatiq": ("tests.apps.dramatiq_app", "cb.stored_report"),
}


@pytest.mark.parametrize("library", ["rq", "celery", "dramatiq"])
def test_a_stored_schedule_is_added_updated_and_removed_while_three_beats_run(
    library: str, request: pytest.FixtureRequest, redis_server: RedisServer, tmp_path: Path
) -> None:
    kit = make_kit("redis", request, tmp_path)
    path = tmp_path / "journal.jsonl"
    queue = f"stored-{library}-{uuid.uuid4().hex[:6]}"
    app, task = APPS[library]
    # The app's own scenario job is on demand (never armed): only the stored schedule runs.
    env = command_env(
        path,
        CRON_BRIDGE_STORE=kit.url,
        RQ_REDIS_URL=redis_server.url,
        CB_TEST_BROKER=redis_server.url,
        CB_TEST_QUEUE=queue,
        CB_TEST_SCENARIO="long",
        CB_TEST_JOB=f"cb.job-{queue}",
    )
    beats = [BeatProcess(f"b{i}", tmp_path, env, app=app, store_url=kit.url) for i in range(3)]
    worker = Worker(
        "w", tmp_path, env, library=library, queue=queue, broker=redis_server.url, preload=app
    )

    def runs() -> Counter[str]:
        return Counter(str(line["occurrence_id"]) for line in journal.read(path))

    try:
        for beat in beats:
            beat.start()
        worker.start()
        # Every beat running (following the stored schedules) and the worker taking messages.
        wait_for(
            lambda: all("started with" in beat.output() for beat in beats) and worker.up(),
            60,
            "the beats and the worker up",
        )
        done = cli(
            "schedule",
            "add",
            "tenant.report",
            "--library",
            library,
            "--task",
            task,
            "--every",
            "2s",
            "--queue",
            queue,
            "--kwargs",
            '{"tenant": 7}',
            "-A",
            app,
            env=env,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        wait_for(lambda: len(runs()) >= 4, 30, "four runs every 2 s")
        done = cli("schedule", "update", "tenant.report", "--every", "3s", env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        updated = time.time()
        wait_for(
            lambda: (
                sum(1 for o in runs() if Occurrence.parse(o).scheduled_at.timestamp() > updated + 2)
                >= 3
            ),
            30,
            "three runs every 3 s",
        )
        done = cli("schedule", "remove", "tenant.report", env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        removed = time.time()
        time.sleep(5)
        for beat in beats:
            beat.terminate()
        worker.terminate()
    finally:
        for service in [*beats, worker]:
            service.ensure_stopped()
        kit.close()
    ran = runs()
    assert set(ran.values()) == {1}, f"ran more than once: {ran}"
    times = sorted(Occurrence.parse(o).scheduled_at.timestamp() for o in ran)
    after = [t for t in times if t > updated + 2]
    assert after and all(t % 3 == 0 for t in after), after  # followed by every replica
    assert all(t <= removed + 1 for t in times), "ran after it was removed"
    lines = journal.read(path)
    assert {json.dumps(line["kwargs"]) for line in lines} == {'{"tenant": 7}'}
    listed = cli(
        "history", "tenant.report", "--changes", "--json", "--store", kit.url, env=env, cwd=tmp_path
    )
    actions = [c["action"] for c in json.loads(listed.stdout)]
    assert actions == ["schedule removed", "schedule updated", "schedule added"]
