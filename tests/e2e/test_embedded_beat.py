"""The beat inside every worker: ``celery worker --beat --scheduler cron_bridge`` on three
workers through a SIGKILL, the trap (``celery worker --beat -S cron_bridge``) refused, and an
embedded beat whose store is down at start that lives on, says so and claims once it answers."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis
import rq as rq_lib
from rq.serializers import JSONSerializer

from cron_bridge.jobs import Occurrence
from cron_bridge.stores import store_from_url
from cron_bridge_celery.scheduler import job_name
from tests.apps import journal
from tests.e2e.processes import (
    CeleryProcess,
    Command,
    Service,
    cli,
    command_env,
    stop_together,
)
from tests.servers import RedisServer, free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

SECRET = "embedded-beat-test-secret-0123456789"
BEAT_FORK = "cron_bridge_dramatiq.beat:run_beat"
WORKER = ("worker", "--without-gossip", "--without-mingle", "-c", "2", "-l", "INFO")


def healthz(port: int) -> dict[str, object]:
    url = f"http://127.0.0.1:{port}/_scheduler/healthz"
    with urllib.request.urlopen(url, timeout=5) as response:
        found: dict[str, object] = json.loads(response.read())
        return found


def judge(
    lines: list[dict[str, Any]],
    store_url: str,
    every: dict[str, int],
    began: float,
    killed: float,
    ended: float,
) -> None:
    """Each occurrence ran at most once, and every occurrence of each job (``every`` its
    period in seconds) due in the window ran, but what the killed worker's beat
    (``embedded-0``) had claimed and not sent when it died, which docs/guarantee.md says a
    replica killed between its claim and its send loses."""
    counts = Counter(line["occurrence_id"] for line in lines)
    assert max(counts.values()) == 1, counts.most_common(3)
    by_job: defaultdict[str, set[str]] = defaultdict(set)
    for line in lines:
        by_job[line["job"]].add(line["occurrence_id"])
    store = store_from_url(store_url)
    try:
        missing = []
        for at in range(math.ceil(began + 1), math.floor(ended - 1) + 1):
            when = datetime.fromtimestamp(at, UTC)
            for job, period in every.items():
                occurrence = Occurrence(job=job, scheduled_at=when)
                if at % period == 0 and occurrence.id not in by_job[job]:
                    claimer = store.claimed_by(occurrence)
                    if not (killed - 2 <= at <= killed and claimer == "embedded-0"):
                        missing.append((occurrence.id, claimer))
        assert missing == [], (missing, killed)
    finally:
        store.close()


def through_a_kill(workers: list[Service], notes: Path, says: str) -> tuple[float, float, float]:
    """Start the workers; once each beat said ``says`` and runs were written down, 12 s of
    wall time, the first worker's whole process group SIGKILLed, 12 s more, then SIGTERM to
    the others at once, each of which must exit within 25 s (its shutdown timeout): when the
    window began, the kill, and the window's end."""
    for worker in workers:
        worker.start()
    try:
        wait_for(lambda: all(says in w.output() for w in workers), 90, "3 beats")
        wait_for(lambda: len(journal.read(notes)) >= 3, 60, "the first runs")
        began = time.time()
        time.sleep(12)  # a window of wall time: occurrences every second go on through it
        workers[0].kill_all()
        killed = time.time()
        time.sleep(12)
        ended = time.time()
        # Within 25 s, or done and only in rq 3.0's teardown with redis-py 8.2 (None: see
        # tests/e2e/processes.py, docs/rq.md), where a stop grace ends it.
        took = stop_together(workers[1:], grace=lambda _: 25)
    finally:
        for worker in workers:
            worker.ensure_stopped()
    assert all(seconds is None or seconds < 25 for seconds in took.values()), took
    return began, killed, ended


def test_three_workers_carry_the_beat_and_send_each_occurrence_once_through_a_kill(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """``celery worker --beat --scheduler cron_bridge`` on 3 workers for about 24 s, one
    worker's whole process group SIGKILLed after 12 s: every occurrence of the 1 s and 2 s
    entries runs exactly once, with no gap but what the killed worker's beat had claimed and
    not sent; the two others exit on SIGTERM within their shutdown timeout."""
    name = uuid.uuid4().hex[:8]
    notes = tmp_path / "journal.jsonl"
    queue = f"embedded-{name}"
    base = command_env(
        notes,
        CB_TEST_BROKER=redis_server.url,
        CB_TEST_QUEUE=queue,
        CRON_BRIDGE_STORE=f"{redis_server.url}?prefix=cb{name}:",
    )
    workers = []
    for i in range(3):
        env = dict(base, CRON_BRIDGE_REPLICA_ID=f"embedded-{i}")
        # The worker killed takes no tasks: a SIGKILLed Celery worker loses the messages it
        # had reserved (Celery acknowledges them on receipt), which is Celery's to say
        # (docs/celery.md: acks_late); what is judged here is its beat.
        queues = f"idle-{name}" if i == 0 else queue
        args = (*WORKER, "-Q", queues, "--beat", "--scheduler", "cron_bridge")
        workers.append(CeleryProcess(f"worker{i}", tmp_path, env, *args))
    began, killed, ended = through_a_kill(workers, notes, "as replica embedded-")
    lines = journal.read(notes)
    second, two = job_name("every second"), job_name("every two seconds")
    judge(lines, f"{redis_server.url}?prefix=cb{name}:", {second: 1, two: 2}, began, killed, ended)
    assert {line["replica"] for line in lines} >= {"embedded-1", "embedded-2"}
    assert not list(tmp_path.glob("celerybeat-schedule*")), "no shelve file is needed"


def test_three_rq_workers_carry_the_beat_and_run_each_occurrence_once_through_a_kill(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """``rq worker -w cron_bridge_rq.BeatWorker`` on 3 workers, a @cluster_task every second
    (its module from CRON_BRIDGE_APP), one worker's process group SIGKILLed mid-run: every
    occurrence runs exactly once but what the killed beat had claimed and not sent; the others
    exit on SIGTERM (warm shutdown) within their shutdown timeout."""
    name = uuid.uuid4().hex[:8]
    notes = tmp_path / "journal.jsonl"
    queue = f"embedded-{name}"
    base = command_env(
        notes,
        CB_TEST_SCENARIO="every",
        CB_TEST_QUEUE=queue,
        CB_TEST_JOB=f"cb.embedded.{name}",  # RQ job ids are global in the broker's Redis
        RQ_REDIS_URL=redis_server.url,
        CRON_BRIDGE_APP="tests.apps.rq_app",
        CRON_BRIDGE_STORE=f"{redis_server.url}?prefix=cb{name}:",
    )
    rq = str(Path(sys.executable).parent / "rq")
    workers: list[Service] = []
    for i in range(3):
        env = dict(base, CRON_BRIDGE_REPLICA_ID=f"embedded-{i}")
        # The killed worker takes no jobs: RQ marks a job whose worker died abandoned, which
        # is RQ's to say; what is judged here is its beat.
        listens = f"idle-{name}" if i == 0 else queue
        argv = (rq, "worker", "-w", "cron_bridge_rq.BeatWorker", listens, "--url")
        argv += (redis_server.url, "--name", f"w{i}-{name}")
        argv += ("--serializer", "rq.serializers.JSONSerializer")
        workers.append(Command(f"worker{i}", tmp_path, env, *argv))
    began, killed, ended = through_a_kill(workers, notes, "carries beat embedded-")
    lines = [line for line in journal.read(notes) if line["event"] == "ran"]
    judge(
        lines,
        f"{redis_server.url}?prefix=cb{name}:",
        {f"cb.embedded.{name}": 1},
        began,
        killed,
        ended,
    )
    for worker in workers:
        assert "Traceback" not in worker.output(), worker.output()[-3000:]


def test_an_rq_beat_worker_honours_warm_then_cold_shutdown(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """RQ's two stops: on the first SIGTERM the beat stops claiming at once while the worker
    finishes its job (it is still running, its job too); on the second the worker kills its
    work horse and exits, the beat already stopped."""
    name = uuid.uuid4().hex[:8]
    queue = f"shutdown-{name}"
    env = command_env(
        CB_TEST_SCENARIO="every",
        CB_TEST_QUEUE=queue,
        CB_TEST_JOB=f"cb.shutdown.{name}",
        CRON_BRIDGE_APP="tests.apps.rq_app",
        CRON_BRIDGE_STORE=f"{redis_server.url}?prefix=cb{name}:",
        CRON_BRIDGE_REPLICA_ID=f"stops-{name}",
    )
    rq = str(Path(sys.executable).parent / "rq")
    argv = (rq, "worker", "-w", "cron_bridge_rq.BeatWorker", f"slow-{name}", queue, "--url")
    argv += (redis_server.url, "--name", f"stops-{name}")
    argv += ("--serializer", "rq.serializers.JSONSerializer")
    worker = Command("worker", tmp_path, env, *argv)
    worker.start()
    try:
        wait_for(lambda: f"carries beat stops-{name}" in worker.output(), 90, "the beat")
        connection = redis.Redis.from_url(redis_server.url)
        slow = rq_lib.Queue(f"slow-{name}", connection=connection, serializer=JSONSerializer)
        slow.enqueue("time.sleep", 60)
        assert worker.process is not None
        # Running in its work horse (the log's line comes before the fork, and a SIGTERM
        # before it would find the worker idle and stop it at once).
        horse = psutil.Process(worker.process.pid)
        wait_for(lambda: "time.sleep(60)" in worker.output() and horse.children(), 60, "a horse")
        worker.process.send_signal(signal.SIGTERM)
        wait_for(lambda: f"beat stops-{name} stopped" in worker.output(), 30, "the beat's stop")
        assert worker.process.poll() is None, "warm: the worker waits for its job"
        time.sleep(1.5)  # RQ ignores a second signal within a second of the first
        worker.process.send_signal(signal.SIGTERM)
        # Exited, or done and only in rq 3.0's teardown with redis-py 8.2 (tests/e2e/
        # processes.py: RQ_TEARDOWN), which a stop grace ends.
        process = worker.process
        wait_for(lambda: process.poll() is not None or worker.done(), 30, "the cold stop")
    finally:
        worker.ensure_stopped()
    said = worker.output()
    assert "cold shut down" in said and "killed horse" in said, said[-3000:]
    assert "Traceback" not in said, said[-3000:]


def test_three_dramatiq_trees_carry_one_beat_each_and_run_each_occurrence_once_through_a_kill(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """``BeatMiddleware`` on 3 ``dramatiq`` process trees of 2 worker processes each: one beat
    per tree (its fork process), a @cluster_task every second, one tree SIGKILLed whole
    mid-run: every occurrence runs exactly once but what the killed beat had claimed and not
    sent; the others stop on SIGTERM within their shutdown timeout."""
    name = uuid.uuid4().hex[:8]
    notes = tmp_path / "journal.jsonl"
    queue = f"embedded-{name}"
    base = command_env(
        notes,
        CB_TEST_SCENARIO="every",
        CB_TEST_QUEUE=queue,
        CB_TEST_BROKER=redis_server.url,
        CB_TEST_DRAMATIQ_BEAT="1",
        CRON_BRIDGE_STORE=f"{redis_server.url}?prefix=cb{name}:",
    )
    dramatiq = str(Path(sys.executable).parent / "dramatiq")
    workers: list[Service] = []
    for i in range(3):
        env = dict(base, CRON_BRIDGE_REPLICA_ID=f"embedded-{i}")
        # The killed tree takes no messages (its workers listen elsewhere): what is judged
        # here is its beat.
        listens = f"idle-{name}" if i == 0 else queue
        argv = (dramatiq, "tests.apps.dramatiq_app", "--processes", "2", "--threads", "2")
        workers.append(Command(f"tree{i}", tmp_path, env, *argv, "--queues", listens))
    began, killed, ended = through_a_kill(workers, notes, "carries beat embedded-")
    for worker in workers:
        assert worker.output().count("carries beat embedded-") == 1, "one beat per tree"
    lines = [line for line in journal.read(notes) if line["event"] == "ran"]
    judge(lines, f"{redis_server.url}?prefix=cb{name}:", {"cb.job": 1}, began, killed, ended)
    for worker in workers[1:]:
        assert "Traceback" not in worker.output(), worker.output()[-3000:]


def test_a_dramatiq_tree_carries_one_beat_and_stops_when_its_beat_cannot_start(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """Given both BeatMiddleware and --fork-function, a tree still carries one beat (the
    second stands aside); and a beat that cannot start (a bad setting) stops its tree, which
    dramatiq alone would leave running without it."""
    name = uuid.uuid4().hex[:8]
    base = command_env(
        CB_TEST_SCENARIO="every",
        CB_TEST_QUEUE=f"one-{name}",
        CB_TEST_BROKER=redis_server.url,
        CB_TEST_DRAMATIQ_BEAT="1",
        CRON_BRIDGE_STORE=f"{redis_server.url}?prefix=cb{name}:",
        CRON_BRIDGE_REPLICA_ID=f"one-{name}",
    )
    dramatiq = str(Path(sys.executable).parent / "dramatiq")
    argv = (dramatiq, "tests.apps.dramatiq_app", "--processes", "2", "--threads", "1")
    both = Command("both", tmp_path, base, *argv, "--fork-function", f"{BEAT_FORK}")
    both.start()
    try:
        wait_for(lambda: "stands aside" in both.output(), 90, "the second beat to stand aside")
        wait_for(lambda: f"carries beat one-{name}" in both.output(), 30, "the first beat")
        assert stop_together([both], grace=lambda _: 25)["both"] is not None
    finally:
        both.ensure_stopped()
    assert both.output().count("carries beat") == 1
    bad = Command("bad", tmp_path, dict(base, CRON_BRIDGE_HTTP="nonsense"), *argv)
    bad.start()
    try:
        assert bad.process is not None
        bad.process.wait(60)  # stopped by its beat, not by the test
    finally:
        bad.ensure_stopped()
    said = bad.output()
    assert "CRON_BRIDGE_HTTP expects HOST:PORT" in said and "stopping the tree" in said, said


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--beat", "-S", "cron_bridge"), "-S cron_bridge is --statedb on celery worker"),
        (("-B",), "runs celery.beat:PersistentScheduler"),
        (("-S", "cron_bridge_django"), "-S cron_bridge_django is --statedb"),
    ],
)
def test_the_trap_is_refused_before_the_worker_starts(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    """``celery worker --beat -S cron_bridge`` (on a worker, -S is the state file) and a stock
    embedded beat where cron-bridge is set up: one line naming the fix, exit 2, no state file,
    no beat; the broker is never reached (it is not even there)."""
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tests.apps.celery_beat_app", *WORKER, *args],
        env=command_env(
            CB_TEST_BROKER=f"redis://127.0.0.1:{free_port()}/0",
            CRON_BRIDGE_STORE="sqlite:///cron-bridge.db",
        ),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr
    assert "--beat --scheduler cron_bridge" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "no state file, no store file"


def test_an_embedded_beat_whose_store_is_down_at_start_waits_for_it_and_says_so(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """The store is not there when the worker starts: the worker serves, its beat lives,
    says so at WARNING and on /healthz (claiming false), and claims once the store answers;
    the replica id, the HTTP address and the secret come from the environment variables
    ``cron-bridge beat`` reads."""
    name = uuid.uuid4().hex[:8]
    notes = tmp_path / "journal.jsonl"
    store = RedisServer()  # its port reserved; started later
    port = free_port()
    env = command_env(
        notes,
        CB_TEST_BROKER=redis_server.url,
        CB_TEST_QUEUE=f"late-{name}",
        CRON_BRIDGE_STORE=f"{store.url}?prefix=cb{name}:",
        CRON_BRIDGE_REPLICA_ID="waits-for-its-store",
        CRON_BRIDGE_HTTP=f"127.0.0.1:{port}",
        CRON_BRIDGE_SECRET=SECRET,
    )
    args = (*WORKER, "-Q", f"late-{name}", "--beat", "--scheduler", "cron_bridge")
    worker = CeleryProcess("worker", tmp_path, env, *args)
    worker.start()
    try:
        wait_for(lambda: "the store does not answer" in worker.output(), 90, "the warning")

        def says_not_claiming() -> bool:
            try:
                health = healthz(port)
            except OSError:
                return False
            return health["claiming"] is False and health["store_reachable"] is False

        wait_for(says_not_claiming, 60, "/healthz saying the beat does not claim")
        assert healthz(port)["replica"] == "waits-for-its-store"
        assert worker.process is not None and worker.process.poll() is None
        assert journal.read(notes) == []
        store.start()
        wait_for(lambda: healthz(port)["claiming"] is True, 60, "claiming once it answers")
        wait_for(lambda: len(journal.read(notes)) >= 2, 60, "sends once the store answers")
        answered = time.time()
        # The audit of a plain beat_schedule entry, found by the name `list -A` shows, while
        # the beat runs: its occurrences were sent and no worker records a plain task's run,
        # so they are "sent (plain task)", not "never completed", and the audit exits 0. Its
        # window starts once the store answered (what was due while it was down was never
        # claimed, as the audit rightly says) and ends --grace before now.
        wait_for(lambda: time.time() - answered > 15, 30, "some seconds of beat")
        every_second = job_name("every second")
        audit_env = command_env(CRON_BRIDGE_STORE=f"{store.url}?prefix=cb{name}:")
        app = ("-A", "tests.apps.celery_beat_app")
        audited = cli(
            "history",
            every_second,
            "--audit",
            "--since",
            f"{int(time.time() - answered)}s",
            "--grace",
            "5s",
            *app,
            env=audit_env,
            cwd=tmp_path,
        )
        listed = cli("list", *app, env=audit_env, cwd=tmp_path)
        took = stop_together([worker])
    finally:
        worker.ensure_stopped()
        store.remove()
    assert every_second in listed.stdout, listed.stdout + listed.stderr
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert "SENT (PLAIN TASK)" in audited.stdout and "never completed:" not in audited.stdout
    assert "completion not recorded (plain task" in audited.stdout
    assert took["worker"] is not None and took["worker"] < 25, took
    assert {line["replica"] for line in journal.read(notes)} == {"waits-for-its-store"}
    assert "Traceback" not in worker.output()
