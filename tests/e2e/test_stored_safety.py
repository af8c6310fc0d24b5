"""Stored schedules name only what the team agreed to run that way, on real workers of all
three libraries: ``os.system``, ``subprocess.getoutput``, ``builtins.eval``, Celery's own
``celery.backend_cleanup`` and an unmarked task of the app are refused through the JSON API
and the CLI, and never run when written straight into the store (each refused delivery
recorded ``failed``, reason ``refused``, and named by ``history --audit``); a schedule that
names a ``@cluster_task`` task runs it with ``ctx`` once per occurrence, a one-off included."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cron_bridge.control.schedules import GROUP, ScheduleEntry, announce
from cron_bridge.jobs import Occurrence
from cron_bridge.storable import ENV
from cron_bridge.stores import RunRecord, store_from_url
from tests.apps import journal
from tests.conftest import make_kit
from tests.e2e.processes import BeatProcess, Worker, cli, command_env
from tests.e2e.test_http import SECRET, call
from tests.servers import RedisServer, free_port
from tests.waiting import wait_for

pytestmark = [pytest.mark.redis, pytest.mark.slow]

APPS = {
    "rq": ("tests.apps.rq_app", "tests.apps.rq_app.decorated_report", "tests.apps.rq_app.unmarked"),
    "celery": ("tests.apps.celery_app", "cb.decorated_report", "cb.unmarked"),
    "dramatiq": ("tests.apps.dramatiq_app", "cb.decorated_report", "cb.unmarked"),
}


def _hostile(tmp_path: Path, unmarked: str) -> dict[str, tuple[str, list[str]]]:
    """Schedule name -> (task, args): each would leave a file behind if it ever ran."""
    return {
        "evil.system": ("os.system", [f"touch {tmp_path}/pwned-system"]),
        "evil.getoutput": ("subprocess.getoutput", [f"touch {tmp_path}/pwned-getoutput"]),
        "evil.eval": ("builtins.eval", [f"open({str(tmp_path / 'pwned-eval')!r}, 'w')"]),
        "evil.cleanup": ("celery.backend_cleanup", []),
        "evil.unmarked": (unmarked, []),
    }


@pytest.mark.parametrize("library", ["rq", "celery", "dramatiq"])
def test_stored_schedules_run_only_agreed_tasks_on_real_workers(
    library: str, request: pytest.FixtureRequest, redis_server: RedisServer, tmp_path: Path
) -> None:
    kit = make_kit("redis", request, tmp_path)
    path = tmp_path / "journal.jsonl"
    queue = f"safe-{library}-{uuid.uuid4().hex[:6]}"
    app, decorated, unmarked = APPS[library]
    env = command_env(
        path,
        CRON_BRIDGE_STORE=kit.url,
        RQ_REDIS_URL=redis_server.url,
        CB_TEST_BROKER=redis_server.url,
        CB_TEST_QUEUE=queue,
        CB_TEST_SCENARIO="long",
        CB_TEST_JOB=f"cb.job-{queue}",
    )
    env.pop(ENV, None)
    port = free_port()
    beat = BeatProcess(
        "b",
        tmp_path,
        env,
        app=app,
        store_url=kit.url,
        extra=["--http", f"127.0.0.1:{port}", "--secret", SECRET],
    )
    worker = Worker(
        "w", tmp_path, env, library=library, queue=queue, broker=redis_server.url, preload=app
    )
    api = f"http://127.0.0.1:{port}/_scheduler/api/schedules"
    hostile = _hostile(tmp_path, unmarked)
    store = store_from_url(kit.url)
    try:
        beat.start()
        worker.start()
        wait_for(lambda: "HTTP trigger on" in beat.output(), 30, "the HTTP server")
        for name, (task, args) in hostile.items():
            spec = {
                "name": name,
                "library": library,
                "task": task,
                "args": args,
                "every": "2s",
                "queue": queue,
            }
            status, body = call(api, SECRET, body=spec)
            assert status == 400 and "stored schedules may name" in body["error"], (task, body)
            done = cli(
                "schedule",
                "add",
                name,
                "--library",
                library,
                "--task",
                task,
                "--every",
                "2s",
                "--queue",
                queue,
                "-A",
                app,
                env=env,
                cwd=tmp_path,
            )
            assert done.returncode == 2 and "stored schedules may name" in done.stderr, done
        assert call(api, SECRET, method="GET")[1] == {"schedules": []}
        # What the team agreed to: a @cluster_task task, every 2 s and once.
        good = {"library": library, "task": decorated, "queue": queue, "kwargs": {"tenant": 1}}
        status, body = call(api, SECRET, body={"name": "tenant-1.report", "every": "2s", **good})
        assert status == 201, body
        once_at = (datetime.now(UTC) + timedelta(seconds=4)).replace(microsecond=0)
        status, body = call(
            api, SECRET, body={"name": "tenant-1.once", "at": once_at.isoformat(), **good}
        )
        assert status == 201, body
        # Whoever can write to the store skips the checks where the name is added; the
        # worker refuses them all the same, and an agreed schedule overwritten with a bad
        # task is refused from then on.
        status, body = call(api, SECRET, body={"name": "evil.overwritten", "every": "2s", **good})
        assert status == 201, body
        hostile["evil.overwritten"] = ("os.system", [f"touch {tmp_path}/pwned-overwritten"])
        for name, (task, args) in hostile.items():
            spec = ScheduleEntry(
                name=name,
                library=library,
                task=task,
                args=args,
                options={"every": "2s"},
                queue=queue,
            )
            store.put_control(GROUP, name, json.dumps(spec.to_json()))
            announce(store, name)  # as a writer of the store can: followed within a second

        def refused(name: str) -> bool:
            return any(r.reason == "refused" for r in store.history(name, 50))

        wait_for(lambda: all(refused(name) for name in hostile), 40, "every refusal recorded")
        wait_for(lambda: once_at.timestamp() + 3 < time.time(), 20, "the one-off's time")
        wait_for(lambda: len(_runs(path, "tenant-1.once")) == 1, 20, "the one-off run")
        wait_for(lambda: len(_runs(path, "tenant-1.report")) >= 3, 20, "three stored runs")
        histories = {name: store.history(name, 100) for name in hostile}

        # The audit looks at the last 15 s: wait until the worker (late on a loaded machine)
        # has recorded refusals of occurrences due in them.
        def refused_lately() -> int:
            """Refusals of occurrences due well inside the audit's window (past its grace)."""
            now = time.time()
            return sum(
                1
                for r in store.history("evil.system", 50)
                if r.reason == "refused"
                and now - 12 < Occurrence.parse(r.occurrence_id).scheduled_at.timestamp() < now - 4
            )

        wait_for(lambda: refused_lately() >= 2, 60, "recent refusals of evil.system recorded")
        audit = cli(
            "history",
            "evil.system",
            "--audit",
            "--since",
            "15s",
            "--grace",
            "3s",
            "--store",
            kit.url,
            "-A",
            app,
            env=env,
            cwd=tmp_path,
        )
        beat.terminate()
        worker.terminate()
    finally:
        for service in (beat, worker):
            service.ensure_stopped()
        store.close()
        kit.close()
    assert sorted(p.name for p in tmp_path.glob("pwned-*")) == []
    lines = journal.read(path)
    assert not [line for line in lines if line.get("occurrence_id") == "unmarked"], lines
    for name, records in histories.items():
        ran = [r for r in records if r.trigger == "queue"]
        assert ran and all(r.reason == "refused" for r in ran if r.outcome != "completed"), ran
        assert all("RefusedTask" in (r.error or "") for r in ran if r.reason == "refused")
        if name != "evil.overwritten":  # which ran the agreed task before it was overwritten
            assert {r.outcome for r in ran} == {"failed"}, (name, ran)
    assert "RefusedTask" in audit.stdout, audit
    for name in ("tenant-1.report", "tenant-1.once"):
        ran = _runs(path, name)
        assert set(Counter(line["occurrence_id"] for line in ran).values()) == {1}, ran
        assert all(line["decorated"] and line["trigger"] == "queue" for line in ran), ran
        assert all(line["kwargs"] == {"tenant": 1} for line in ran), ran
    assert _runs(path, "tenant-1.once")[0]["occurrence_id"] == (
        f"tenant-1.once@{once_at.replace(tzinfo=None).isoformat(timespec='milliseconds')}Z"
    )


def _runs(path: Path, job: str) -> list[dict[str, object]]:
    return [line for line in journal.read(path) if line.get("job") == job]


MISSING = {
    # A @cluster_task function of a module a plain `rq worker` (no -c) never loaded.
    "rq": (
        APPS["rq"][1],
        [
            f"{APPS['rq'][1]!r} is not loaded in this worker",
            "`rq worker -c tests.apps.rq_app`",
            ENV,
        ],
    ),
    # A task the worker's app does not have: its module is not imported there.
    "celery": (
        "cb.elsewhere",
        [
            "'cb.elsewhere' is not loaded in this worker",
            "this worker's app has no task 'cb.elsewhere'",
            "include",
        ],
    ),
    "dramatiq": (
        "cb.elsewhere",
        [
            "'cb.elsewhere' is not loaded in this worker",
            "this worker has no actor 'cb.elsewhere'",
            "`dramatiq MODULE cron_bridge_dramatiq.stored`",
        ],
    ),
}


@pytest.mark.parametrize("library", ["rq", "celery", "dramatiq"])
def test_a_worker_that_never_loaded_the_task_says_so_and_how_to_load_it(
    library: str, request: pytest.FixtureRequest, redis_server: RedisServer, tmp_path: Path
) -> None:
    """A stored schedule naming a task the worker never loaded (on RQ, a @cluster_task
    function, the worker started as docs/rq.md starts one): refused and recorded, and the
    record says the task is not loaded there and how to load it, never "declare it with
    @cluster_task" (it is declared)."""
    kit = make_kit("redis", request, tmp_path)
    queue = f"unloaded-{library}-{uuid.uuid4().hex[:6]}"
    app = APPS[library][0]
    task, expected = MISSING[library]
    env = command_env(
        tmp_path / "journal.jsonl",
        CRON_BRIDGE_STORE=kit.url,
        RQ_REDIS_URL=redis_server.url,
        CB_TEST_BROKER=redis_server.url,
        CB_TEST_QUEUE=queue,
        CB_TEST_SCENARIO="long",
        CB_TEST_JOB=f"cb.job-{queue}",
    )
    env.pop(ENV, None)
    beat = BeatProcess("b", tmp_path, env, app=app, store_url=kit.url)
    worker = Worker("w", tmp_path, env, library=library, queue=queue, broker=redis_server.url)
    store = store_from_url(kit.url)
    name = "tenant-2.report"
    spec = ScheduleEntry(
        name=name,
        library=library,
        task=task,
        kwargs={"tenant": 2},
        options={"every": "2s"},
        queue=queue,
    )
    store.put_control(GROUP, name, json.dumps(spec.to_json()))  # past the checks where added
    announce(store, name)
    try:
        worker.start()
        beat.start()

        def refused() -> list[RunRecord]:
            return [r for r in store.history(name, 20) if r.reason == "refused"]

        wait_for(lambda: bool(refused()), 60, "the refusal recorded")
        record = refused()[-1]
        beat.terminate()
        worker.terminate()
    finally:
        for service in (beat, worker):
            service.ensure_stopped()
        store.close()
        kit.close()
    assert (record.outcome, record.reason) == ("failed", "refused"), record
    said = record.error or ""
    assert all(text in said for text in expected), said
    assert "declare it with" not in said, said
    assert not _runs(tmp_path / "journal.jsonl", name)  # nothing ran
