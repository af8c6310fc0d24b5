"""The Celery adapter installs everything its transports need, in a fresh environment."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.e2e.processes import REPO
from tests.servers import RedisServer

pytestmark = pytest.mark.slow

SEND = """
import sys
from celery import Celery
app = Celery("fresh", broker=sys.argv[1])
app.conf.update(task_serializer="json", accept_content=["json"])
app.send_task("fresh.task", kwargs={"n": 1}, queue="fresh-queue")
"""


def test_a_fresh_environment_with_only_the_celery_adapter_sends_over_redis(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """pip install -e the core and adapters/celery, nothing else: send_task over Redis works
    (kombu's Redis transport imports packaging without declaring it; the adapter does)."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "-e", str(REPO),
         "-e", str(REPO / "adapters" / "celery")],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    sent = subprocess.run(
        [str(python), "-c", SEND, redis_server.url],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr[-3000:]
    import redis

    client = redis.Redis(port=redis_server.port)
    assert client.llen("fresh-queue") == 1
    client.close()
    assert sys.executable != str(python)
