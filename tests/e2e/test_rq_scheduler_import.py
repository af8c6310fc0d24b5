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

from cron_bridge.control.schedules import Schedules
from cron_bridge.stores import store_from_url
from tests.conftest import unavailable
from tests.e2e.processes import REPO, cli, command_env
from tests.servers import RedisServer

pytestmark = pytest.mark.slow

QUEUE_FLOOR = REPO / ".venv-queue-floor" / "bin" / "python"  # it has rq-scheduler


def snapshot(client: redis.Redis) -> dict[bytes, object]:
    """Every key of the database with its value, to tell that nothing changed."""
    found: dict[bytes, object] = {}
    for key in client.scan_iter("*"):
        kind = client.type(key)
        found[key] = (client.hgetall(key) if kind == b"hash"
                      else client.zrange(key, 0, -1, withscores=True))  # fmt: skip
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
        unavailable("rq-scheduler (in the floor venv)", FileNotFoundError(
            f"{QUEUE_FLOOR} is missing: `make test` creates it"))  # fmt: skip
    made = subprocess.run([str(QUEUE_FLOOR), "-m", "tests.apps.rq_scheduler_jobs", url],
                          env=command_env(), cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert made.returncode == 0, made.stderr
    ids = json.loads(made.stdout)
    every_at = datetime.fromtimestamp(ids.pop("every_at"), UTC)
    cron, local, every, counted, once, opaque, meta, unagreed = (
        ids[k] for k in ("cron", "local", "every", "counted", "once", "opaque", "meta",
                         "unagreed"))  # fmt: skip
    env = command_env(CRON_BRIDGE_STORED_TASKS="tests.apps.rq_cron_tasks.*", TZ="Europe/Warsaw")
    base = ["import", "rq-scheduler", "-u", url, "--store", store_url]

    before = snapshot(client)
    dry = cli(*base, env=env, cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "6 of 8 job(s) would move; run again with --apply" in dry.stdout
    assert snapshot(client) == before  # a dry run changes nothing
    assert Schedules(store_from_url(store_url)).list() == {}

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
        name: spec.to_json() for name, spec in Schedules(store_from_url(store_url)).list().items()
    }
    assert stored["nightly-report"] == {
        "name": "nightly-report", "library": "rq", "task": "tests.apps.rq_cron_tasks.send_report",
        "options": {"cron": "*/10 * * * *", "tz": "Europe/Warsaw", "day_or": False,
                    "misfire": "run-once", "send": {"result_ttl": -1}}, "args": ["daily"],
        "kwargs": {"to": "team@example.com"}, "queue": "reports", "backoff": None,
    }  # fmt: skip
    (local_name,) = [n for n in stored if stored[n]["options"].get("cron") == "30 6 * * 1-5"]
    (meta_name,) = [n for n in stored if stored[n]["options"].get("cron") == "0 0 * * *"]
    assert stored[meta_name]["options"]["send"] == {"result_ttl": -1, "meta": {"owner": "ops"}}
    (once_name,) = [n for n in stored if "at" in stored[n]["options"]]
    assert stored[once_name]["task"] == "tests.apps.rq_cron_tasks.cleanup"
    assert stored[local_name]["options"] == {"cron": "30 6 * * 1-5", "tz": "Europe/Warsaw",
                                             "day_or": False, "misfire": "run-once",
                                             "send": {"result_ttl": -1}}  # fmt: skip
    by_region = {
        spec["args"][0]: spec for spec in stored.values() if spec["args"] in (["eu"], ["us"])
    }
    offset = f"{every_at.timestamp() % 120:g}s"
    assert by_region["eu"]["options"] == {
        "every": "120s",
        "offset": offset,
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
