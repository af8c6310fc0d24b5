"""The README's quick start, run as written: its files written where it says, its commands run
in order from the folder that holds them, against a throwaway Redis in place of the one it
starts. The commands it starts in the background (``&``) are stopped at the end."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.e2e.processes import REPO, command_env
from tests.servers import RedisServer
from tests.waiting import wait_for, waited

pytestmark = pytest.mark.slow

SECTION = "## Quick start"
TITLED = re.compile(r'^```(\w+) title="([^"]+)"\n(.*?)^```', re.MULTILINE | re.DOTALL)
SHELL = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)


# What a command the quick start runs in the background prints once it is up.
READY = {"celery": " ready.", "cron-bridge": "started with"}


def quick_start() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start:end]


def test_the_readme_quick_start_runs_as_written(tmp_path: Path, redis_server: RedisServer) -> None:
    section = quick_start()
    files = TITLED.findall(section)
    assert [path for _, path, _ in files] == ["proj/__init__.py", "proj/tasks.py"]
    for _, path, code in files:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(
            code.replace("localhost:6379", f"127.0.0.1:{redis_server.port}")
        )
    start_redis, commands = SHELL.findall(section)
    assert start_redis.strip().startswith("redis-server"), start_redis  # the test runs its own
    env = command_env()
    bin_dir = str(Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin")
    env["PATH"] = os.pathsep.join([bin_dir, env["PATH"]])
    env.pop("PYTHONPATH", None)  # as a user runs it: from the folder that holds proj/
    background: list[subprocess.Popen[str]] = []
    said: dict[str, str] = {}
    try:
        for line in commands.splitlines():
            words = shlex.split(line, comments=True)
            if not words:
                continue
            words = [w.replace("localhost:6379", f"127.0.0.1:{redis_server.port}") for w in words]
            if words[0] == "export":
                name, _, value = words[1].partition("=")
                env[name] = value
                continue
            if words[-1] == "&":
                log = tmp_path / f"background-{len(background)}.log"
                with open(log, "w") as out:
                    background.append(
                        subprocess.Popen(
                            words[:-1], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT
                        )
                    )
                # As a user does before the next command: see that it is up.
                up = READY[words[0]]
                wait_for(
                    lambda up=up, log=log: up in log.read_text(errors="replace"),
                    60,
                    f"{words[0]}: {up!r}",
                )
                continue
            said[words[1]] = _until(words, tmp_path, env)
        listed = said["list"].splitlines()
        assert listed[0].split()[:3] == ["NAME", "SCHEDULE", "TIMEZONE"], said["list"]
        row = next(r for r in listed if r.startswith("proj.tasks.close_day"))
        assert "Europe/Warsaw" in row and re.search(r"T03:00:00\+0[12]:00", row), row
        assert '"outcome": "enqueued"' in said["run"], said["run"]
        history = said["history"]
        assert "enqueued" in history and "completed" in history, history
    finally:
        for process in background:
            process.terminate()
        for process in background:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def _until(words: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Run a command to completion; ``history`` again until the worker's run is in it (the
    README says it shows both, a moment after ``run``)."""
    said: list[str] = []

    def shown() -> bool:
        done = subprocess.run(
            words, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, f"{words}: {done.stdout}\n{done.stderr}"
        said.append(done.stdout)
        return words[1] != "history" or "completed" in done.stdout

    waited(shown, 60, every=0.5)  # the caller asserts on what the last one printed
    return said[-1]
