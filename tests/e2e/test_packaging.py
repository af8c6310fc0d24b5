"""A fresh environment: ``celery beat -S cron_bridge`` without the Celery adapter says what to
install; with it, the adapter installs everything its transports need."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.e2e.processes import source_copy
from tests.servers import RedisServer

pytestmark = pytest.mark.slow

SEND = """
import sys
from celery import Celery
app = Celery("fresh", broker=sys.argv[1])
app.conf.update(task_serializer="json", accept_content=["json"])
app.send_task("fresh.task", kwargs={"n": 1}, queue="fresh-queue")
"""


BEAT_APP = """
from celery import Celery
app = Celery("proj", broker="memory://")
app.conf.beat_schedule = {"tick": {"task": "proj.tick", "schedule": 60}}
"""

RESOLVED = """
from celery.beat import Service
from proj import app
print(type(Service(app, scheduler_cls="cron_bridge").get_scheduler(lazy=True)).__module__)
"""


def _pip(python: Path, *args: str) -> None:
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]


def test_a_fresh_environment_with_the_celery_adapter_and_the_redis_extra_sends_over_redis(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """First the core and Celery alone: ``celery beat -S cron_bridge`` (and
    ``-S cron_bridge_django``) says in one line to install the adapter, exit 2, where Celery
    printed a 50-line traceback. Then the adapter and the core's redis extra, nothing else
    (``cron-bridge[celery,redis]``): ``-S cron_bridge`` builds the adapter's scheduler, and
    send_task over Redis works (kombu's Redis transport imports packaging without declaring
    it; the adapter does)."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    (tmp_path / "proj.py").write_text(BEAT_APP)
    _pip(python, str(source_copy(tmp_path / "core-only")), "celery")
    for name in ("cron_bridge", "cron_bridge_django"):
        beat = subprocess.run(
            [str(env_dir / "bin" / "celery"), "-A", "proj", "beat", "-S", name],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=tmp_path,
        )
        assert beat.returncode == 2, beat.stderr[-3000:]
        assert beat.stderr.strip().splitlines() == [
            f"cron-bridge: celery beat -S {name} needs the Celery adapter, which is not "
            "installed: pip install cron-bridge-celery"
        ], beat.stderr[-3000:]
    # The README's line from a checkout: pip install ".[redis]" ./adapters/celery
    checkout = source_copy(tmp_path / "checkout")
    _pip(python, f"{checkout}[redis]", str(checkout / "adapters" / "celery"))
    resolved = subprocess.run(
        [str(python), "-c", RESOLVED],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
        env={"CRON_BRIDGE_STORE": f"sqlite:///{tmp_path / 's.db'}", "PATH": ""},
    )
    assert resolved.stdout.strip() == "cron_bridge_celery.scheduler", resolved.stderr[-3000:]
    sent = subprocess.run(
        [str(python), "-c", SEND, redis_server.url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert sent.returncode == 0, sent.stderr[-3000:]
    import redis

    client = redis.Redis(port=redis_server.port)
    assert client.llen("fresh-queue") == 1
    client.close()
    assert sys.executable != str(python)
