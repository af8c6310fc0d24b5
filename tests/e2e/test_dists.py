"""The four distributions as a user gets them: built as ``make dists`` builds them, checked as
the registry checks them, and installed from the wheels alone into a new environment outside
the tree, where the commands a newcomer runs first work."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from tests.e2e.processes import REPO, source_copy
from tests.servers import RabbitMQServer
from tests.waiting import waited

pytestmark = pytest.mark.slow

PROJECTS = {
    "cron-bridge": REPO,
    "cron-bridge-celery": REPO / "adapters" / "celery",
    "cron-bridge-rq": REPO / "adapters" / "rq",
    "cron-bridge-dramatiq": REPO / "adapters" / "dramatiq",
}

JOBS = """
from pathlib import Path

from cron_bridge import cluster_task


@cluster_task(every="1s", name="heartbeat.file", target="inline")
def beat_file(ctx):
    with open(Path(__file__).with_name("ran.txt"), "a") as out:
        out.write(ctx.occurrence_id + "\\n")
"""

CELERY_APP = """
from celery import Celery

app = Celery("proj", broker="filesystem://")
app.conf.broker_transport_options = {"data_folder_in": "box", "data_folder_out": "box"}
app.conf.beat_schedule = {"tick": {"task": "proj.tick", "schedule": 1.0}}
"""

SEND_AMQP = """
import sys
from celery import Celery
app = Celery("fresh", broker=sys.argv[1])
app.send_task("fresh.task", queue="dists-amqp-queue")
with app.connection_for_write() as conn:
    name, count, consumers = conn.default_channel.queue_declare("dists-amqp-queue", passive=True)
assert count == 1, count
"""


def run(
    *argv: str | Path, cwd: Path, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )
    assert done.returncode == 0, f"{argv}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_built_checked_and_installed_from_the_wheels_alone(
    tmp_path: Path, rabbitmq_server: RabbitMQServer
) -> None:
    dist = tmp_path / "dist"
    source = source_copy(tmp_path / "source")
    for folder in PROJECTS.values():
        built = source / folder.relative_to(REPO)
        run(sys.executable, "-m", "build", "--quiet", "--outdir", dist, built, cwd=tmp_path)
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    assert len(wheels) == len(sdists) == 4, sorted(dist.iterdir())
    run(sys.executable, "-m", "twine", "check", "--strict", *wheels, *sdists, cwd=tmp_path)
    run(Path(sys.executable).with_name("check-wheel-contents"), *wheels, cwd=tmp_path)
    for wheel in wheels:
        names = zipfile.ZipFile(wheel).namelist()
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), wheel
        assert not any(n.startswith("tests/") for n in names), wheel
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        text = zipfile.ZipFile(wheel).read(metadata).decode()
        assert "Provides-Extra: dev" not in text, wheel  # development tools are not published
        assert "Classifier: " in text and "Project-URL: " in text and "Keywords: " in text
    for sdist in sdists:
        with tarfile.open(sdist) as archive:
            names = archive.getnames()
            assert any(n.endswith("/LICENSE") for n in names), sdist
            assert not any("/tests/" in n for n in names), sdist  # not shipped half

    # A new environment outside the tree, from the core's and the Celery adapter's wheels
    # alone: no Redis client, so the Celery adapter must work on RabbitMQ without it.
    where = tmp_path / "user"
    where.mkdir()
    venv.create(where / "venv", with_pip=True)
    bin_dir = where / "venv" / "bin"
    core = next(w for w in wheels if w.name.startswith("cron_bridge-"))
    celery = next(w for w in wheels if w.name.startswith("cron_bridge_celery-"))
    run(bin_dir / "python", "-m", "pip", "install", "--quiet", core, celery, cwd=where)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "HOME": str(where)}
    version = run(bin_dir / "cron-bridge", "--version", cwd=where, env=env).stdout
    assert "cron-bridge 0.1.0" in version and "cron-bridge-celery 0.1.0 (celery " in version
    lacking = subprocess.run(
        [bin_dir / "python", "-c", "import redis"], capture_output=True, check=False, cwd=where
    )
    assert lacking.returncode != 0, "the Celery adapter brought the Redis client along"
    run(bin_dir / "python", "-c", SEND_AMQP, rabbitmq_server.url, cwd=where, env=env)

    # A beat on SQLite with a job.
    (where / "jobs.py").write_text(JOBS)
    beat = subprocess.Popen(
        [bin_dir / "cron-bridge", "beat", "-A", "jobs", "--store", f"sqlite:///{where}/s.db"],
        cwd=where,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        ran = where / "ran.txt"
        waited(lambda: len(_lines(ran)) >= 2, 60)
        assert len(_lines(ran)) >= 2, "the beat ran nothing"
        assert all(line.startswith("heartbeat.file@") for line in _lines(ran))
    finally:
        beat.terminate()
        out, _ = beat.communicate(timeout=30)
    assert beat.returncode == 0, out[-3000:]

    # celery beat -S cron_bridge, on kombu's filesystem broker and the SQLite store.
    (where / "proj.py").write_text(CELERY_APP)
    (where / "box").mkdir()
    celery_env = {**env, "CRON_BRIDGE_STORE": f"sqlite:///{where}/celery.db"}
    stock = subprocess.Popen(
        [bin_dir / "celery", "-A", "proj", "beat", "-S", "cron_bridge", "-l", "INFO"],
        cwd=where,
        env=celery_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        waited(lambda: len(list((where / "box").iterdir())) >= 2, 60)
        assert len(list((where / "box").iterdir())) >= 2, "celery beat sent nothing"
    finally:
        stock.terminate()
        out, _ = stock.communicate(timeout=30)
    assert "cron_bridge_celery.scheduler.ClusterScheduler" in out, out[-3000:]

    # make demo needs nothing more than these two wheels.
    demo = run(bin_dir / "cron-bridge", "demo", "--duration", "8", cwd=where, env=env, timeout=180)
    assert "0 duplicates, 0 missed" in demo.stdout, demo.stdout[-3000:]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_the_four_distributions_move_in_lockstep() -> None:
    """One version for all four; each adapter requires the core of exactly that version and
    the core's extras the adapters of it; the same licence, authors and home everywhere."""
    projects = {
        name: tomllib.loads((folder / "pyproject.toml").read_text())["project"]
        for name, folder in PROJECTS.items()
    }
    version = projects["cron-bridge"]["version"]
    assert {p["version"] for p in projects.values()} == {version}
    from cron_bridge import __version__

    assert __version__ == version
    for name in ("cron-bridge-celery", "cron-bridge-rq", "cron-bridge-dramatiq"):
        assert f"cron-bridge=={version}" in [
            d.split(" ")[0] for d in projects[name]["dependencies"]
        ]
        extra = name.removeprefix("cron-bridge-")
        assert projects["cron-bridge"]["optional-dependencies"][extra] == [f"{name}=={version}"]
    for key in ("license", "license-files", "authors", "urls", "requires-python"):
        assert len({repr(p[key]) for p in projects.values()}) == 1, key
    licence = (REPO / "LICENSE").read_text()
    for folder in list(PROJECTS.values())[1:]:
        assert (folder / "LICENSE").read_text() == licence, folder
        assert (folder / "README.md").is_file(), folder
    assert "dev" not in projects["cron-bridge"]["optional-dependencies"]
    groups = tomllib.loads((REPO / "pyproject.toml").read_text())["dependency-groups"]
    # The test tools are their own group (make check installs it with the core alone); the
    # development group takes them in whole.
    assert any(entry.startswith("pytest>=8") for entry in groups["test"])
    assert {"include-group": "test"} in groups["dev"]
