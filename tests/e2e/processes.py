"""Real ``cron-bridge`` processes for the end-to-end tests, and what they left in the store."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from cron_bridge.control import lost_claims
from cron_bridge.stores import RunRecord, Store

REPO = Path(__file__).resolve().parents[2]


def command_env(journal: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of a child process: the repo importable, the journal file named."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("CB_TEST_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("CRON_BRIDGE_STORE", None)
    env.pop("CRON_BRIDGE_ENV", None)
    if journal is not None:
        env["CB_TEST_JOURNAL"] = str(journal)
    env.update(extra)
    return env


def cli(
    *args: str,
    env: dict[str, str],
    cwd: Path,
    timeout: float = 60,
    python: str = sys.executable,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``cron-bridge ARGS`` to completion (under ``python``: another venv's, for a floor),
    with ``stdin`` on its standard input."""
    return subprocess.run(
        [python, "-m", "cron_bridge", *args],
        env=env,
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# rq 3.0 with redis-py 8.2 can spend up to 60 s in its teardown, after its last job: rq sends
# UNSUBSCRIBE to its pubsub thread (which polls 60 s at a time), then redis-py's
# PubSubWorkerThread.stop() joins that thread with no timeout (8.2 added the join); a thread
# that read the reply before stop() cleared its flag waits out its 60 s poll. Its jobs are
# done by then; a container's stop grace ends it, and so do the tests, TEARDOWN_GRACE seconds
# after its log says it got there (what comes after takes milliseconds). Stuck anywhere else,
# it fails the test.
RQ_TEARDOWN = b"unsubscribing from channel"
TEARDOWN_GRACE = 5.0


@dataclass
class Service:
    """A long-running child process (a beat or a worker), its output in ``folder``."""

    name: str
    folder: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    log_start: int = 0  # the log's size when it last started: what it printed since is after
    python: str = sys.executable  # another venv's for the lowest versions an adapter declares

    @property
    def log(self) -> Path:
        return self.folder / f"{self.name}.log"

    def argv(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> Service:
        self.starts += 1
        self.log_start = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                self.argv(),
                env=self.env,
                cwd=self.folder,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def terminate(self) -> float:
        """SIGTERM, then wait; returns the seconds it took to exit. One that only its queue
        library's teardown holds up (``done``) is SIGKILLed ``TEARDOWN_GRACE`` seconds after
        it got there, as a container's stop grace would end it."""
        assert self.process is not None
        began = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        done_at: float | None = None
        while self.process.poll() is None:
            now = time.monotonic()
            if now - began > 60:
                raise subprocess.TimeoutExpired(self.argv(), 60)
            if done_at is None and self.done():
                done_at = now
            if done_at is not None and now - done_at > TEARDOWN_GRACE:
                self.kill_all()
                break
            time.sleep(0.1)
        return time.monotonic() - began

    def done(self) -> bool:
        """Whether the process did all its work and is only in its queue library's teardown:
        an ``rq worker`` whose log since it started says it unsubscribed (``RQ_TEARDOWN``) and
        that runs no process of its own any more (no work horse: no job)."""
        argv = self.argv()
        if Path(argv[0]).name != "rq" or argv[1:2] != ["worker"] or not self.log.exists():
            return False
        with open(self.log, "rb") as log:
            log.seek(self.log_start)
            if RQ_TEARDOWN not in log.read():
                return False
        # And nothing of its own still running: a work horse (a job), its scheduler.
        assert self.process is not None
        try:
            children = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return False
        running = []
        for child in children:
            with contextlib.suppress(psutil.NoSuchProcess):
                if child.status() != psutil.STATUS_ZOMBIE:
                    running.append(child)
        return not running

    def stuck(self) -> str:
        """What a process that did not exit was doing: SIGABRT to it and every process under
        it (with ``PYTHONFAULTHANDLER`` set, Python prints each thread's stack into the log as
        it dies), then the log's tail."""
        assert self.process is not None
        with contextlib.suppress(psutil.NoSuchProcess):
            family = [psutil.Process(self.process.pid)]
            family += family[0].children(recursive=True)
            for member in family:
                with contextlib.suppress(psutil.NoSuchProcess):
                    member.send_signal(signal.SIGABRT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)
        return self.output()[-6000:]

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(30)

    def kill_all(self) -> None:
        """SIGKILL the process and every process under it, as when a container is killed
        (RQ's work horse runs in a session of its own, so the process group is not enough)."""
        assert self.process is not None
        try:
            family = [psutil.Process(self.process.pid)]
            family += family[0].children(recursive=True)
        except psutil.NoSuchProcess:  # it exited by itself and was reaped (a beat at start
            family = []  # while the store was down: one line and exit 1)
        for member in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                member.kill()
        self.process.wait(30)

    def ensure_stopped(self) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def stop_together(
    services: Iterable[Service],
    grace: Callable[[Service], float] = lambda service: 60,
) -> dict[str, float | None]:
    """SIGTERM every service at once, as ``docker compose stop`` stops a project's services,
    and wait for each to exit; the seconds each took. A service still running at the end of
    its ``grace`` is SIGKILLed, as compose kills it then, if it is ``done`` (its time is
    None); any other fails the test with what it was doing (``Service.stuck``)."""
    began = time.monotonic()
    running = list(services)
    for service in running:
        assert service.process is not None
        service.process.send_signal(signal.SIGTERM)
    took: dict[str, float | None] = {}
    while running:
        for service in list(running):
            assert service.process is not None
            if service.process.poll() is not None:
                took[service.name] = time.monotonic() - began
                running.remove(service)
            elif time.monotonic() - began > grace(service) and service.done():
                service.kill_all()
                took[service.name] = None
                running.remove(service)
        late = [s for s in running if time.monotonic() - began > grace(s)]
        if late:
            stuck = "\n".join(f"--- {s.name}\n{s.stuck()}" for s in late)
            raise AssertionError(f"still running at the end of its grace after SIGTERM:\n{stuck}")
        time.sleep(0.1)
    return took


@dataclass
class BeatProcess(Service):
    """One ``cron-bridge beat`` process; its replica id is ``<name>-<start count>``."""

    app: str = ""
    store_url: str = ""
    extra: list[str] = field(default_factory=list)

    def argv(self) -> list[str]:
        return [
            self.python,
            "-m",
            "cron_bridge",
            "beat",
            "-A",
            self.app,
            "--store",
            self.store_url,
            "--replica-id",
            f"{self.name}-{self.starts}",
            *self.extra,
        ]


# What each library's worker prints once it takes messages.
WORKER_READY = {"celery": b" ready.", "rq": b"Listening on", "dramatiq": b"Worker process is ready"}


@dataclass
class Worker(Service):
    """A worker of one queue library for one of the tests/apps apps."""

    library: str = ""
    queue: str = ""
    broker: str = ""
    # RQ: a module the worker imports before it forks its work horses (``rq worker -c``, where
    # RQ reads its settings), as a project does so that its tasks are loaded there.
    preload: str = ""
    concurrency: int = 1  # Celery's -c
    threads: int | None = 2  # Dramatiq's --threads; None for its default (8)
    app: str = ""  # the Celery app or Dramatiq module; default: tests/apps' own

    def up(self) -> bool:
        """Whether the worker has said it is ready for messages (since it last started)."""
        with open(self.log, "rb") as log:
            log.seek(self.log_start)
            return WORKER_READY[self.library] in log.read()

    def argv(self) -> list[str]:
        bin_dir = Path(self.python).parent
        if self.library == "celery":
            return [
                self.python,
                "-m",
                "celery",
                "-A",
                self.app or "tests.apps.celery_app",
                "worker",
                "-P",
                "prefork",
                "-c",
                str(self.concurrency),
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-n",
                f"{self.name}@%h",
                "-Q",
                self.queue,
                "-l",
                "INFO",
            ]
        if self.library == "rq":
            return [
                str(bin_dir / "rq"),
                "worker",
                self.queue,
                "--url",
                self.broker,
                # RQ worker names are global in the broker's Redis, and a killed worker's
                # stays registered for minutes: the queue (unique per test) keeps them apart.
                "--with-scheduler",
                "--name",
                f"{self.name}-{self.queue}-{self.starts}",
                "--serializer",
                "rq.serializers.JSONSerializer",
                *(["-c", self.preload] if self.preload else []),
            ]
        if self.library == "dramatiq":
            threads = [] if self.threads is None else ["--threads", str(self.threads)]
            return [
                str(bin_dir / "dramatiq"),
                self.app or "tests.apps.dramatiq_app",
                "--processes",
                "1",
                *threads,
                "--queues",
                self.queue,
            ]
        raise ValueError(self.library)


class Command(Service):
    """Any long-running command, as given (a stock scheduler beside cron-bridge's replicas)."""

    def __init__(self, name: str, folder: Path, env: dict[str, str], *argv: str) -> None:
        super().__init__(name, folder, env)
        self._argv = list(argv)

    def argv(self) -> list[str]:
        return self._argv


class CeleryProcess(Service):
    """``celery -A APP ARGS``: a beat or a worker of one of the tests/apps projects."""

    def __init__(
        self,
        name: str,
        folder: Path,
        env: dict[str, str],
        *args: str,
        app: str = "tests.apps.celery_beat_app",
    ) -> None:
        super().__init__(name, folder, env)
        self.app = app
        self.args = list(args)

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "celery", "-A", self.app, *self.args]


def outcomes_by_occurrence(store: Store, jobs: Iterable[str]) -> dict[str, Counter[str]]:
    """For every occurrence of these jobs in the store's history: how many of each outcome."""
    found: dict[str, Counter[str]] = defaultdict(Counter)
    for job in jobs:
        for record in lost_claims.history(store, job, 1000):  # as `history` shows them
            found[record.occurrence_id][record.outcome] += 1
    return dict(found)


def records_of(store: Store, jobs: Iterable[str]) -> list[RunRecord]:
    return [record for job in jobs for record in store.history(job, 1000)]


def source_copy(into: Path) -> Path:
    """The files the distributions are built from (the core, the adapters, their metadata),
    copied into ``into``: a build or a ``pip install .`` writes its by-products there, not in
    the repository other tests are reading."""
    ignore = shutil.ignore_patterns("*.egg-info", "__pycache__", "build", "dist")
    into.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy2(REPO / name, into / name)
    for folder in ("cron_bridge", "adapters"):
        shutil.copytree(REPO / folder, into / folder, ignore=ignore)
    return into
