"""``cron-bridge demo``: beat replicas and a Celery worker on the embedded default.

Everything runs as real processes in one temporary folder: an ``sqlite:///`` store and kombu's
filesystem transport, so nothing needs installing. The demo prints one line per occurrence
as the worker finishes it (who enqueued it, how many replicas skipped it, which worker ran it)
and ends with the totals.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click

from cron_bridge.cli.common import EXIT_FAILED, FiniteRange, fail
from cron_bridge.control import lost_claims
from cron_bridge.jobs import Job, Occurrence
from cron_bridge.registry import default_registry
from cron_bridge.stores import RunRecord, store_from_url

__all__ = ["DemoTotals", "demo", "run_demo"]

DEMO_APP = "cron_bridge_celery.demo"  # lives in the Celery adapter: the core imports no Celery
WORKER_OUTCOMES = ("completed", "failed", "aborted", "skipped-overlap", "skipped-completed")
STARTUP_LIMIT = 120.0  # seconds for every replica to come up before the duration starts
SETTLED = timedelta(seconds=1)  # after every replica is up, before its occurrences count
# A losing replica writes where its ledger reached at its heartbeat: an occurrence is shown
# once every other replica's stand-aside is written, or this long after it was due.
ASIDE_WRITTEN = lost_claims.FLUSH_INTERVAL + timedelta(seconds=2)


@dataclass
class DemoTotals:
    """What the demo saw: every number comes from the store."""

    occurrences: int = 0
    runs: int = 0
    duplicates: int = 0
    missed: int = 0
    failed: int = 0
    complete: bool = True  # every replica came up and no process exited early
    lines: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.complete and self.duplicates == 0 and self.missed == 0


def run_demo(
    *, replicas: int, duration: float, keep: bool, echo: Callable[[str], None]
) -> DemoTotals:
    """Start the processes, run the demo for ``duration`` seconds from when every replica is
    up (within ``STARTUP_LIMIT``), and return its totals."""
    jobs = _demo_jobs()
    folder = Path(tempfile.mkdtemp(prefix="cron-bridge-demo-"))
    store_url = f"sqlite:///{folder / 'store.db'}"
    env = {**os.environ, "CRON_BRIDGE_DEMO_DIR": str(folder), "CRON_BRIDGE_STORE": store_url}
    env.pop("CRON_BRIDGE_ENV", None)
    echo(f"cron-bridge demo: {replicas} beat replicas and 1 Celery worker in {folder}")
    echo(
        f"store {store_url}, broker filesystem://, jobs: "
        + ", ".join(f"{j.name} ({j.schedule.describe()})" for j in jobs)
    )
    worker = _start(
        folder,
        "worker-1",
        env,
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            DEMO_APP,
            "worker",
            "-c",
            "2",
            "-Q",
            "demo",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-n",
            "worker-1@%h",
            "-l",
            "WARNING",
        ],
    )
    beats = [
        _start(
            folder,
            f"replica-{n}",
            env,
            [
                sys.executable,
                "-m",
                "cron_bridge",
                "--log-level",
                "WARNING",
                "beat",
                "-A",
                DEMO_APP,
                "--store",
                store_url,
                "--replica-id",
                f"replica-{n}",
            ],
        )
        for n in range(1, replicas + 1)
    ]
    store = store_from_url(store_url)
    history = functools.partial(lost_claims.history, store)  # with the replicas that stood aside
    shown: set[str] = set()
    ready: datetime | None = None  # once every replica has said it is alive
    exited = False
    try:
        # The duration counts from when every replica is up: on a busy machine starting
        # them can take longer than the whole run.
        deadline = time.monotonic() + STARTUP_LIMIT
        while time.monotonic() < deadline:
            time.sleep(0.5)
            if ready is None and len(store.replicas()) >= replicas:
                ready = datetime.now(UTC)
                deadline = time.monotonic() + duration
                echo(f"all {replicas} replicas are up; from now on each occurrence:")
            if ready is not None:
                _show_new(history, jobs, shown, echo, ready, replicas)
            if any(p.poll() is not None for p in [worker, *beats]):
                echo("a demo process exited early; see the logs in the folder")
                exited = True
                break
        if ready is None and not exited:
            echo(
                f"the replicas were not all up within {STARTUP_LIMIT:.0f} s; "
                "see the logs in the folder"
            )
        ended = datetime.now(UTC)
        for beat in beats:
            beat.send_signal(signal.SIGTERM)
        for beat in beats:
            beat.wait(60)
        # The worker finishes what the last ticks enqueued before it stops.
        drain_by = time.monotonic() + 20
        while time.monotonic() < drain_by and not _drained(store.history, jobs):
            time.sleep(0.5)
        if ready is not None:  # the beats have stopped: every ledger is written
            _show_new(history, jobs, shown, echo, ready, replicas, final=True)
    finally:
        for process in [worker, *beats]:
            if process.poll() is None:
                process.terminate()
                process.wait(30)
    totals = _totals(store.history, jobs, ready or ended, ended)
    totals.complete = ready is not None and not exited
    store.close()
    echo(
        f"totals: {totals.occurrences} occurrences, {totals.runs} runs, "
        f"{totals.duplicates} duplicates, {totals.missed} missed, {totals.failed} failed"
    )
    if keep:
        echo(
            f"kept {folder} (store.db, logs); inspect it with: cron-bridge history "
            f"demo.heartbeat --store {store_url}"
        )
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return totals


def _demo_jobs() -> list[Job]:
    importlib.import_module(DEMO_APP)
    return [job for job in default_registry.jobs() if job.name.startswith("demo.")]


def _start(
    folder: Path, name: str, env: dict[str, str], argv: list[str]
) -> subprocess.Popen[bytes]:
    with open(folder / f"{name}.log", "wb") as log:
        return subprocess.Popen(argv, env=env, cwd=folder, stdout=log, stderr=subprocess.STDOUT)


def _by_occurrence(
    history: Callable[[str, int], list[RunRecord]], jobs: list[Job]
) -> dict[str, list[RunRecord]]:
    grouped: defaultdict[str, list[RunRecord]] = defaultdict(list)
    for job in jobs:
        for record in history(job.name, 1000):
            grouped[record.occurrence_id].append(record)
    return grouped


def _drained(history: Callable[[str, int], list[RunRecord]], jobs: list[Job]) -> bool:
    """Every enqueued occurrence has an outcome from the worker."""
    for records in _by_occurrence(history, jobs).values():
        outcomes = {r.outcome for r in records}
        if "enqueued" in outcomes and not outcomes & set(WORKER_OUTCOMES):
            return False
    return True


def _show_new(
    history: Callable[[str, int], list[RunRecord]],
    jobs: list[Job],
    shown: set[str],
    echo: Callable[[str], None],
    ready: datetime,
    replicas: int,
    *,
    final: bool = False,
) -> None:
    """One line per occurrence due once every replica was up that a worker has run, once the
    other replicas' stand-asides are written (``final``: the beats stopped, all are)."""
    grouped = _by_occurrence(history, jobs)
    unsettled = datetime.now(UTC) - ASIDE_WRITTEN
    for occurrence_id in sorted(grouped, key=lambda o: Occurrence.parse(o).scheduled_at):
        due = Occurrence.parse(occurrence_id).scheduled_at
        if due < ready + SETTLED:
            continue
        records = grouped[occurrence_id]
        ran = [r for r in records if r.outcome in WORKER_OUTCOMES]
        if occurrence_id in shown or not ran:
            continue
        skipped = sum(r.outcome == "skipped-claimed" for r in records)
        if skipped < replicas - 1 and due > unsettled and not final:
            continue  # shown at a later look
        shown.add(occurrence_id)
        sent = [r.replica for r in records if r.outcome == "enqueued"]
        last = max(ran, key=lambda r: r.attempt)
        at = Occurrence.parse(occurrence_id).scheduled_at.strftime("%H:%M:%S")
        job = occurrence_id.rpartition("@")[0]
        took = "" if last.duration_ms is None else f", {last.duration_ms:.0f} ms"
        echo(
            f"{at}  {job:<15} enqueued by {', '.join(sent) or '?'}, skipped by {skipped}, "
            f"{last.outcome} on {last.replica} (attempt {last.attempt}{took})"
        )


def _totals(
    history: Callable[[str, int], list[RunRecord]],
    jobs: list[Job],
    began: datetime,
    ended: datetime,
) -> DemoTotals:
    grouped = _by_occurrence(history, jobs)
    totals = DemoTotals()
    # Occurrences that fell while every replica was up must all have been enqueued.
    start, end = began + SETTLED, ended - timedelta(seconds=2)
    for job in jobs:
        for at in job.schedule.occurrences(start, end):
            if not any(r.outcome == "enqueued" for r in grouped.get(job.occurrence(at).id, [])):
                totals.missed += 1
    for occurrence_id, records in grouped.items():
        if Occurrence.parse(occurrence_id).scheduled_at < start:
            continue  # shown neither: not every replica was up yet
        enqueued = sum(r.outcome == "enqueued" for r in records)
        completed = sum(r.outcome == "completed" for r in records)
        if enqueued:
            totals.occurrences += 1
        totals.runs += completed
        totals.failed += any(r.outcome == "failed" for r in records) and not completed
        if enqueued > 1 or completed > 1:
            totals.duplicates += 1
    return totals


@click.command()
@click.option(
    "--replicas",
    default=3,
    show_default=True,
    type=click.IntRange(1, 20),
    help="How many beat replicas to start.",
)
@click.option(
    "--duration",
    default=30,
    show_default=True,
    type=FiniteRange(5, 3600),
    help="Seconds to run, counted from when every replica is up.",
)
@click.option("--keep", is_flag=True, help="Keep the folder with the store and the logs.")
def demo(replicas: int, duration: float, keep: bool) -> None:
    """Run beat replicas and a Celery worker on SQLite and a filesystem broker, no server."""
    if importlib.util.find_spec("cron_bridge_celery") is None:
        fail('the demo runs Celery: pip install "cron-bridge[celery]"')
    totals = run_demo(replicas=replicas, duration=duration, keep=keep, echo=click.echo)
    click.echo(NEXT_STEPS)
    sys.exit(0 if totals.ok else EXIT_FAILED)


NEXT_STEPS = """
Next:
  read   README.md "Quick start": your own task on Redis, from install to a run now
         docs/guarantee.md: what "once" means here, and its edges
  try    cron-bridge demo --replicas 5 --duration 60 --keep   (the store and logs are kept)
         make test                                            (every check, with test tools)"""
