"""``cron-bridge import rq-scheduler`` on jobs the real rq-scheduler created: a dry run that
changes nothing, then --apply, which writes the stored schedules and leaves nothing of a
moved job in Redis; what cannot move stays, with the reason."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis

from cron_bridge.control.schedules import StoredSchedules
from cron_bridge.stores import store_from_url
from tests.conftest import unavailable
from tests.e2e.processes import REPO, BeatProcess, Command, Worker, cli, command_env
from tests.servers import RedisServer
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

QUEUE_FLOOR = REPO / ".venv-queue-floor" / "bin" / "python"  # it has rq-scheduler


def snapshot(client: redis.Redis) -> dict[bytes, object]:
    """Every key of the database with its value, to tell that nothing changed."""
    found: dict[bytes, object] = {}
    for key in client.scan_iter("*"):
        kind = client.type(key)
        found[key] = (
            client.hgetall(key) if kind == b"hash" else client.zrange(key, 0, -1, withscores=True)
        )
    return found


def test_rq_scheduler_jobs_move_into_stored_schedules(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    db = 13
    client = redis.Redis(port=redis_server.port, db=db)
    client.flushdb()
    url = f"{redis_server.url.rsplit('/', 1)[0]}/{db}"
    store_url = f"{redis_server.url.rsplit('/', 1)[0]}/14?prefix=imp{uuid.uuid4().hex[:8]}:"
    if not QUEUE_FLOOR.exists():
        unavailable(
            "rq-scheduler (in the floor venv)",
            FileNotFoundError(f"{QUEUE_FLOOR} is missing: `make test` creates it"),
        )
    made = subprocess.run(
        [str(QUEUE_FLOOR), "-m", "tests.apps.rq_scheduler_jobs", url],
        env=command_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    ids = json.loads(made.stdout)
    every_at = datetime.fromtimestamp(ids.pop("every_at"), UTC)
    cron, local, every, counted, once, opaque, meta, unagreed = (
        ids[k] for k in ("cron", "local", "every", "counted", "once", "opaque", "meta", "unagreed")
    )
    env = command_env(CRON_BRIDGE_STORED_TASKS="tests.apps.rq_cron_tasks.*", TZ="Europe/Warsaw")
    base = ["import", "rq-scheduler", "-u", url, "--store", store_url]

    before = snapshot(client)
    dry = cli(*base, env=env, cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "6 of 8 job(s) would move; run again with --apply" in dry.stdout
    assert snapshot(client) == before  # a dry run changes nothing
    assert StoredSchedules(store_from_url(store_url)).list() == {}

    alive = "rq:scheduler_instance:still-running"  # as rqscheduler registers its birth
    client.hset(alive, "birth", time.time())
    refused = cli(*base, "--apply", env=env, cwd=tmp_path)
    assert refused.returncode == 2 and "rqscheduler is running" in refused.stderr
    now = snapshot(client)
    assert {k: v for k, v in now.items() if not k.startswith(b"rq:scheduler_instance:")} == before
    client.hset(alive, "death", time.time())  # as it registers its death

    done = cli(*base, "--apply", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "6 of 8 job(s) moved" in done.stdout
    lines = {line.split()[0]: line for line in done.stdout.splitlines()[1:-2]}
    assert "not plain data" in lines[opaque]
    assert "moved" in lines[meta] and "moved" in lines[once]
    assert "CRON_BRIDGE_STORED_TASKS" in lines[unagreed]
    assert "serve its queue(s) default with an `rq worker` without --serializer" in done.stdout

    stored = {
        name: spec.to_json()
        for name, spec in StoredSchedules(store_from_url(store_url)).list().items()
    }
    assert stored["nightly-report"] == {
        "name": "nightly-report",
        "library": "rq",
        "task": "tests.apps.rq_cron_tasks.send_report",
        "options": {
            "cron": "*/10 * * * *",
            "tz": "Europe/Warsaw",
            "day_or": False,
            "misfire": "run-once",
            "send": {"result_ttl": -1},
        },
        "args": ["daily"],
        "kwargs": {"to": "team@example.com"},
        "queue": "reports",
        "backoff": None,
    }
    (local_name,) = [n for n in stored if stored[n]["options"].get("cron") == "30 6 * * 1-5"]
    (meta_name,) = [n for n in stored if stored[n]["options"].get("cron") == "0 0 * * *"]
    assert stored[meta_name]["options"]["send"] == {"result_ttl": -1, "meta": {"owner": "ops"}}
    (once_name,) = [n for n in stored if "at" in stored[n]["options"]]
    assert stored[once_name]["task"] == "tests.apps.rq_cron_tasks.cleanup"
    assert stored[local_name]["options"] == {
        "cron": "30 6 * * 1-5",
        "tz": "Europe/Warsaw",
        "day_or": False,
        "misfire": "run-once",
        "send": {"result_ttl": -1},
    }
    by_region = {
        spec["args"][0]: spec for spec in stored.values() if spec["args"] in (["eu"], ["us"])
    }
    # The phase rq-scheduler keeps: an offset, left out when it is none (an every_at on a
    # multiple of 120 s, one run in 120).
    phase = every_at.timestamp() % 120
    assert by_region["eu"]["options"] == {
        "every": "120s",
        **({"offset": f"{phase:g}s"} if phase else {}),
        "start": every_at.isoformat(),
        "misfire": "run-once",
        "send": {"result_ttl": -1},
    }
    last = every_at + timedelta(seconds=2 * 60)  # repeat=3: the next run and two more
    assert by_region["us"]["options"]["end"] == (last + timedelta(seconds=1)).isoformat()

    # Nothing of a moved job is left; what stays is untouched.
    remaining = {member.decode() for member in client.zrange("rq:scheduler:scheduled_jobs", 0, -1)}
    assert remaining == {opaque, unagreed}
    for job_id in (cron, local, every, counted, once, meta):
        assert not client.exists(f"rq:job:{job_id}")
    for job_id in (opaque, unagreed):
        assert client.exists(f"rq:job:{job_id}")

    again = cli(*base, "--apply", env=env, cwd=tmp_path)
    assert again.returncode == 0 and "0 of 2 job(s) moved" in again.stdout


def _side(redis_server: RedisServer, db: int, tmp_path: Path) -> tuple[redis.Redis, str, dict]:
    """A database of its own with the twin jobs rq-scheduler made in it."""
    client = redis.Redis(port=redis_server.port, db=db)
    client.flushdb()
    url = f"{redis_server.url.rsplit('/', 1)[0]}/{db}"
    made = subprocess.run(
        [str(QUEUE_FLOOR), "-m", "tests.apps.rq_scheduler_jobs", url, "twin"],
        env=command_env(TZ="Europe/Warsaw"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    return client, url, json.loads(made.stdout)


def _seen(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _outcome(client: redis.Redis, path: Path) -> dict[str, object]:
    """What each twin job did, as RQ and the task itself tell it."""
    events = _seen(path)
    by_label: dict[str, list[dict]] = {}
    for event in events:
        by_label.setdefault(event["label"], []).append(event)
    slow_id = by_label["slow"][0]["job_id"]
    slow = client.hgetall(f"rq:job:{slow_id}")
    kept_id = by_label["kept"][0]["job_id"]
    ttl_id = by_label["ttl"][0]["job_id"]
    return {
        "slow ended": any(e["event"] == "end" for e in by_label["slow"]),
        "slow status": slow.get(b"status"),
        "kept owner": by_label["kept"][0]["owner"],
        "kept result_ttl": client.hget(f"rq:job:{kept_id}", "result_ttl"),
        "kept expires": client.ttl(f"rq:job:{kept_id}"),
        "ttl": client.hget(f"rq:job:{ttl_id}", "ttl"),
        "once runs": len(by_label["once"]),
    }


def test_twin_rqscheduler_and_the_imported_schedules_run_the_jobs_alike(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """The same jobs made by rq-scheduler twice: one set run by its own ``rqscheduler`` and a
    pickle ``rq worker``, the other moved by ``import rq-scheduler --apply`` and run by a
    beat and a JSON-serializer worker. RQ kills the 12 s job at its 5 s timeout on both sides,
    keeps the periodic job's result for ever (``result_ttl`` -1), keeps ``ttl`` and ``meta``,
    and runs ``repeat=0`` once; the ``0 2 * * *`` job, scored by rq-scheduler under
    TZ=Europe/Warsaw, comes next at the same instant; ``--apply`` without a store is
    refused."""
    if not QUEUE_FLOOR.exists():
        unavailable(
            "rq-scheduler (in the floor venv)",
            FileNotFoundError(f"{QUEUE_FLOOR} is missing: `make test` creates it"),
        )
    floor_bin = QUEUE_FLOOR.parent
    stock_client, stock_url, _ = _side(redis_server, 11, tmp_path)
    ours_client, ours_url, ours_ids = _side(redis_server, 12, tmp_path)
    store_url = f"{redis_server.url.rsplit('/', 1)[0]}/14?prefix=twin{uuid.uuid4().hex[:8]}:"
    stock_journal, ours_journal = tmp_path / "stock.jsonl", tmp_path / "ours.jsonl"
    tasks = "tests.apps.rq_scheduler_tasks.*"
    env = command_env(TZ="Europe/Warsaw", CRON_BRIDGE_STORED_TASKS=tasks)
    base = ["import", "rq-scheduler", "-u", ours_url]

    stock_env = command_env(stock_journal)
    ours_env = command_env(
        ours_journal,
        CRON_BRIDGE_STORE=store_url,
        RQ_REDIS_URL=ours_url,
        CRON_BRIDGE_STORED_TASKS=tasks,
    )
    services = [
        Command(
            "rqscheduler",
            tmp_path,
            stock_env,
            str(floor_bin / "rqscheduler"),
            "-u",
            stock_url,
            "-i",
            "1",
        ),
        Command(
            "stock-worker",
            tmp_path,
            stock_env,
            str(floor_bin / "rq"),
            "worker",
            "default",
            "--url",
            stock_url,
            "--name",
            f"stock-{uuid.uuid4().hex[:6]}",
        ),
        BeatProcess(
            "beat", tmp_path, ours_env, app="tests.apps.rq_scheduler_tasks", store_url=store_url
        ),
        Worker("ours-worker", tmp_path, ours_env, library="rq", queue="default", broker=ours_url),
    ]
    try:
        for service in services:
            service.start()
        # The beats run before the move, as docs/migrating.md says: each loads a stored
        # schedule within a second of its writing.
        refused = cli(*base, "--apply", env=env, cwd=tmp_path)
        assert refused.returncode != 0 and "--apply needs the store" in refused.stderr
        assert ours_client.zcard("rq:scheduler:scheduled_jobs") == 5
        done = cli(*base, "--store", store_url, "--apply", env=env, cwd=tmp_path)
        assert done.returncode == 0 and "5 of 5 job(s) moved" in done.stdout, (
            done.stdout + done.stderr
        )
        (nightly,) = [
            s
            for s in StoredSchedules(store_from_url(store_url)).list().values()
            if s.args == ["nightly"]
        ]
        next_at = nightly.job().schedule.next_after(datetime.now(UTC))
        assert next_at.timestamp() == ours_ids["nightly_at"]  # rq-scheduler's own score

        def settled(path: Path, client: redis.Redis) -> bool:
            labels = {e["label"] for e in _seen(path)}
            if not {"slow", "kept", "ttl", "once"} <= labels:
                return False
            slow_id = next(e["job_id"] for e in _seen(path) if e["label"] == "slow")
            return client.hget(f"rq:job:{slow_id}", "status") in (b"failed", b"finished")

        wait_for(lambda: settled(stock_journal, stock_client), 60, "rq-scheduler's runs")
        wait_for(lambda: settled(ours_journal, ours_client), 60, "the imported runs")
        time.sleep(9)  # two more periods of the repeat=0 job (every 4 s), and the 12 s nap
        stock, ours = _outcome(stock_client, stock_journal), _outcome(ours_client, ours_journal)
    finally:
        for service in services:
            service.ensure_stopped()
    assert stock == {
        "slow ended": False,
        "slow status": b"failed",
        "kept owner": "ops",
        "kept result_ttl": b"-1",
        "kept expires": -1,
        "ttl": b"600",
        "once runs": 1,
    }, stock
    assert ours == stock, (ours, stock)
