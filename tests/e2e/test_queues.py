"""Queue targets with real workers: Celery, RQ and Dramatiq on Redis; Celery and Dramatiq on
RabbitMQ. The beat claims and enqueues; the worker runs under the guard with the queue's own
retries."""

from __future__ import annotations

import itertools
import math
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from packaging.version import Version

from cron_bridge.jobs import Occurrence
from cron_bridge.stores import Store, store_from_url
from tests.apps import journal
from tests.conftest import unavailable
from tests.e2e.processes import REPO, BeatProcess, Worker, cli, command_env, outcomes_by_occurrence
from tests.servers import RedisServer, ServerUnavailable, free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

COMBOS = [
    ("celery", "redis"),
    ("rq", "redis"),
    ("dramatiq", "redis"),
    ("celery", "rabbitmq"),
    ("dramatiq", "rabbitmq"),
    # The lowest RQ and Dramatiq the adapters declare (.venv-queue-floor, made by make test);
    # this environment has the newest. The Celery floor runs the celery beat twin test.
    ("rq", "redis-floor"),
    ("dramatiq", "redis-floor"),
]
QUEUE_FLOOR = REPO / ".venv-queue-floor" / "bin" / "python"
DISTRIBUTION = {"rq": "rq", "dramatiq": "dramatiq"}


def declared_floor(library: str) -> str:
    """The lowest version of the library the adapter's pyproject.toml declares."""
    text = (REPO / "adapters" / library / "pyproject.toml").read_text()
    found = re.search(rf'"{DISTRIBUTION[library]}>=([0-9.]+)"', text)
    assert found, f"adapters/{library}/pyproject.toml declares no floor for {library}"
    return found.group(1)


def floor_python(library: str) -> str:
    """The floor venv's interpreter, checked to hold exactly the declared lowest version."""
    if not QUEUE_FLOOR.exists():
        unavailable(
            "the lowest RQ and Dramatiq the adapters declare",
            FileNotFoundError(f"{QUEUE_FLOOR} is missing: `make test` creates it"),
        )
    code = f"import importlib.metadata as m; print(m.version({DISTRIBUTION[library]!r}))"
    done = subprocess.run(
        [str(QUEUE_FLOOR), "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert Version(done.stdout.strip()) == Version(declared_floor(library)), done.stdout
    return str(QUEUE_FLOOR)


@dataclass
class Stack:
    """One library on one broker, with a store, a queue and a journal of its own."""

    library: str
    broker: str
    queue: str
    job: str
    store_url: str
    redis_port: int
    folder: Path
    notes: Path
    python: str = sys.executable  # the floor venv's for the lowest declared versions

    @property
    def app(self) -> str:
        return f"tests.apps.{self.library}_app"

    def env(self, scenario: str, **extra: str) -> dict[str, str]:
        values = {
            "CB_TEST_SCENARIO": scenario,
            "CB_TEST_BROKER": self.broker,
            "CB_TEST_QUEUE": self.queue,
            "CB_TEST_JOB": self.job,
            "CRON_BRIDGE_STORE": self.store_url,
            "RQ_REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
        }
        return command_env(self.notes, **{**values, **extra})

    def beats(self, scenario: str, count: int, **extra: str) -> list[BeatProcess]:
        env = self.env(scenario, **extra)
        return [
            BeatProcess(
                f"beat{i}",
                self.folder,
                env,
                app=self.app,
                store_url=self.store_url,
                python=self.python,
            )
            for i in range(count)
        ]

    def workers(self, scenario: str, count: int, **extra: str) -> list[Worker]:
        env = self.env(scenario, **extra)
        return [
            Worker(
                f"worker{i}",
                self.folder,
                env,
                library=self.library,
                queue=self.queue,
                broker=self.broker,
                python=self.python,
            )
            for i in range(count)
        ]

    def store(self) -> Store:
        return store_from_url(self.store_url)

    def lines(self, event: str) -> list[dict[str, Any]]:
        return [line for line in journal.read(self.notes) if line["event"] == event]


@pytest.fixture(params=COMBOS, ids=[f"{lib}-{broker}" for lib, broker in COMBOS])
def stack(request: pytest.FixtureRequest, tmp_path: Path, redis_server: RedisServer) -> Stack:
    library, kind = request.param
    name = uuid.uuid4().hex[:8]
    broker = redis_server.url
    python = floor_python(library) if kind == "redis-floor" else sys.executable
    if kind == "rabbitmq":
        broker = request.getfixturevalue("rabbitmq_server").url
    return Stack(
        library=library,
        broker=broker,
        queue=f"q-{name}",
        job=f"job.{name}",
        store_url=f"{redis_server.url}?prefix=qt{name}:",
        redis_port=redis_server.port,
        folder=tmp_path,
        notes=tmp_path / "journal.jsonl",
        python=python,
    )


def running(*groups: list[Any]) -> list[Any]:
    started = [service.start() for service in itertools.chain(*groups)]
    return started


def stop_all(services: list[Any]) -> None:
    for service in services:
        if service.process is not None and service.process.poll() is None:
            try:
                service.terminate()
            except Exception:
                service.ensure_stopped()
    for service in services:
        service.ensure_stopped()


def test_three_beats_and_two_workers_run_each_occurrence_once(stack: Stack) -> None:
    """A job every second for 20 s: each occurrence ran exactly once on a worker (no duplicate,
    no gap), and the store shows one enqueued and two skipped-claimed per occurrence."""
    services = running(stack.workers("every", 2), stack.beats("every", 3))
    try:
        store = stack.store()
        wait_for(lambda: len(store.replicas()) >= 3, 60, "three beats")
        wait_for(lambda: bool(stack.lines("ran")), 60, "the first run on a worker")
        began = time.time()
        time.sleep(20)
        ended = time.time()
        alive = [s.name for s in services if s.process and s.process.poll() is None]
        assert len(alive) == 5, [s.output()[-2000:] for s in services]
        for beat in services[2:]:
            beat.terminate()
        judged = [
            Occurrence(job=stack.job, scheduled_at=_at(second)).id
            for second in range(math.ceil(began + 1), math.floor(ended - 1) + 1)
        ]

        def finished() -> bool:
            done = outcomes_by_occurrence(store, [stack.job])
            return all(done.get(occurrence, Counter())["completed"] for occurrence in judged)

        wait_for(finished, 30, "the workers to finish what was enqueued last")
    finally:
        stop_all(services)
    ran = Counter(line["occurrence_id"] for line in stack.lines("ran"))
    assert max(ran.values()) == 1, ran.most_common(3)
    assert {line["trigger"] for line in stack.lines("ran")} == {"queue"}
    assert {str(line["kwargs"]) for line in stack.lines("ran")} == {"{'source': 'beat'}"}
    outcomes = outcomes_by_occurrence(store, [stack.job])
    for second in range(math.ceil(began + 1), math.floor(ended - 1) + 1):
        occurrence = Occurrence(job=stack.job, scheduled_at=_at(second)).id
        assert ran[occurrence] == 1, (occurrence, "gap")
        assert outcomes[occurrence] == Counter(
            {"enqueued": 1, "skipped-claimed": 2, "completed": 1}
        ), (occurrence, outcomes[occurrence])


@pytest.mark.parametrize("backoff", ["fixed", "exponential"])
def test_failures_go_to_the_queues_own_retries(stack: Stack, backoff: str) -> None:
    """attempts=3 on a handler that always fails: attempts 1, 2, 3 at least 1 s apart (the
    second wait at least 2 s with exponential backoff), each recorded, the last one failed."""
    services = running(stack.workers("fail", 1, CB_TEST_BACKOFF=backoff))
    try:
        env = stack.env("fail", CB_TEST_BACKOFF=backoff)
        sent = cli(
            "run", stack.job, "-A", stack.app, env=env, cwd=stack.folder, python=stack.python
        )
        assert sent.returncode == 0, sent.stderr
        assert '"outcome": "enqueued"' in sent.stdout
        wait_for(lambda: len(stack.lines("attempt")) >= 3, 60, "three attempts")
        time.sleep(4)  # a fourth attempt would come within this
    finally:
        stop_all(services)
    attempts = stack.lines("attempt")
    assert [line["attempt"] for line in attempts] == [1, 2, 3]
    assert {line["attempts"] for line in attempts} == {3}
    assert len({line["occurrence_id"] for line in attempts}) == 1
    gaps = [b["at"] - a["at"] for a, b in itertools.pairwise(attempts)]
    # Lower bounds only: a loaded machine makes waits longer, never shorter than the backoff.
    assert all(gap >= 1.0 for gap in gaps), gaps
    if backoff == "exponential":
        assert gaps[1] >= 2.0, gaps  # 1 s, then 2 s
    records = [r for r in stack.store().history(stack.job, 20) if r.outcome != "enqueued"]
    assert [(r.attempt, r.outcome) for r in records] == [
        (3, "failed"),
        (2, "failed"),
        (1, "failed"),
    ]
    assert "attempt 3 fails" in (records[0].error or "")


def test_a_job_of_one_attempt_is_not_retried_by_the_queue(stack: Stack) -> None:
    """attempts=1 on a handler that fails: one attempt, recorded failed, and the queue's own
    default retries (Dramatiq: 20) never bring it back."""
    services = running(stack.workers("fail", 1, CB_TEST_ATTEMPTS="1"))
    try:
        env = stack.env("fail", CB_TEST_ATTEMPTS="1")
        sent = cli(
            "run", stack.job, "-A", stack.app, env=env, cwd=stack.folder, python=stack.python
        )
        assert sent.returncode == 0, sent.stderr
        wait_for(lambda: len(stack.lines("attempt")) >= 1, 60, "the attempt")
        time.sleep(5)  # a retry would come within this (after about 1 s: the job's backoff)
    finally:
        stop_all(services)
    assert [(line["attempt"], line["attempts"]) for line in stack.lines("attempt")] == [(1, 1)]
    records = [r for r in stack.store().history(stack.job, 20) if r.outcome != "enqueued"]
    assert [(r.attempt, r.outcome) for r in records] == [(1, "failed")]


def test_overlapping_runs_on_two_workers_are_skipped_not_retried(stack: Stack) -> None:
    """A 2.5 s job every second on 2 workers: no two runs overlap; the rest are recorded
    skipped-overlap on their first attempt and never retried."""
    services = running(stack.workers("overlap", 2), stack.beats("overlap", 1))
    try:
        wait_for(lambda: len(stack.lines("end")) >= 3, 60, "three runs")
        for beat in services[2:]:
            beat.terminate()

        store = stack.store()

        def ended() -> bool:
            """Every occurrence sent has reached a worker (run or skipped), and every run that
            began has ended."""
            outcomes = outcomes_by_occurrence(store, [stack.job])
            sent = {o for o, c in outcomes.items() if c["enqueued"]}
            met = {o for o, c in outcomes.items() if c["completed"] or c["skipped-overlap"]}
            begun = {line["occurrence_id"] for line in stack.lines("start")}
            return sent <= met and begun <= {line["occurrence_id"] for line in stack.lines("end")}

        wait_for(ended, 30, "what was sent to reach a worker, and the runs in flight to end")
    finally:
        stop_all(services)
    starts = {line["occurrence_id"]: line["at"] for line in stack.lines("start")}
    ends = {line["occurrence_id"]: line["at"] for line in stack.lines("end")}
    runs = sorted((starts[o], ends.get(o, math.inf)) for o in starts)
    for (_, previous_end), (next_start, _) in itertools.pairwise(runs):
        assert next_start >= previous_end, runs
    records = [
        r for r in stack.store().history(stack.job, 500) if r.replica.startswith("beat") is False
    ]
    worker_records = [r for r in records if r.outcome in ("completed", "skipped-overlap")]
    skipped = [r for r in worker_records if r.outcome == "skipped-overlap"]
    assert skipped, "some occurrences reach a worker while the lock is held"
    assert all(r.attempt == 1 for r in worker_records)
    per_occurrence = Counter(r.occurrence_id for r in worker_records)
    assert max(per_occurrence.values()) == 1, per_occurrence.most_common(3)


def test_a_deleted_lock_aborts_the_worker_run_with_lock_lost(stack: Stack) -> None:
    """Deleting the overlap lock during a worker run aborts ctx.signal with lock-lost."""
    services = running(stack.workers("long", 1))
    client = redis.Redis(port=stack.redis_port)
    try:
        sent = cli(
            "run",
            stack.job,
            "-A",
            stack.app,
            env=stack.env("long"),
            cwd=stack.folder,
            python=stack.python,
        )
        assert sent.returncode == 0, sent.stderr
        wait_for(lambda: bool(stack.lines("start")), 60, "the run to start")
        prefix = stack.store_url.rpartition("prefix=")[2]
        assert client.delete(f"{prefix}active:{stack.job}") == 1
        wait_for(lambda: bool(stack.lines("aborted")), 10, "the abort")
    finally:
        stop_all(services)
        client.close()
    (aborted,) = stack.lines("aborted")
    assert aborted["reason"] == "lock-lost"
    assert aborted["trigger"] == "queue"


def test_a_broker_that_is_down_fails_the_occurrence_after_the_grace(stack: Stack) -> None:
    """Broker unreachable when occurrences are due: the beat retries within misfire_grace (3 s),
    records failed with the broker's error, and keeps running."""
    stack.broker = (
        f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F"
        if stack.broker.startswith("amqp")
        else f"redis://127.0.0.1:{free_port()}/0"
    )
    env_extra = {"CB_TEST_GRACE": "3s", "RQ_REDIS_URL": stack.broker}
    (beat,) = stack.beats("every", 1, **env_extra)
    beat.start()
    try:
        store = stack.store()
        failed = lambda: [r for r in store.history(stack.job, 50) if r.outcome == "failed"]  # noqa: E731
        wait_for(lambda: len(failed()) >= 2, 60, "failed records")
        assert beat.process is not None and beat.process.poll() is None, beat.output()[-2000:]
        beat.terminate()
    finally:
        beat.ensure_stopped()
    records = failed()
    assert all(r.error for r in records)
    assert all("Error" in (r.error or "") or "refused" in (r.error or "") for r in records), records
    assert "enqueue of 1 occurrence(s) failed, trying again" in beat.output()


def test_calling_the_task_directly_still_works_with_a_manual_trigger(stack: Stack) -> None:
    """``.delay()``, ``.send()`` or ``queue.enqueue()`` outside the beat: the handler runs with
    ctx.trigger == "manual" and a fresh occurrence."""
    services = running(stack.workers("every", 1))
    try:
        called = cli_python(stack, MANUAL_CALL[stack.library])
        assert called.returncode == 0, called.stderr
        wait_for(lambda: bool(stack.lines("ran")), 60, "the manual run")
    finally:
        stop_all(services)
    (line,) = stack.lines("ran")
    assert line["trigger"] == "manual"
    assert line["kwargs"] == {"source": "test"}
    (record,) = stack.store().history(stack.job, 10)
    assert (record.outcome, record.trigger) == ("completed", "manual")


# What happens to an occurrence whose worker is SIGKILLed mid-run, with these settings:
# Celery acks_late + reject_on_worker_lost (visibility_timeout 10 s on Redis), Dramatiq's
# defaults (heartbeat_timeout 5 s on Redis), RQ's defaults.
REDELIVERED = {
    ("celery", "redis"): True,
    ("celery", "rabbitmq"): True,
    ("dramatiq", "redis"): True,
    ("dramatiq", "rabbitmq"): True,
    ("rq", "redis"): False,
}


def test_a_worker_killed_mid_run(stack: Stack) -> None:
    """SIGKILL the worker during a run: its overlap lock expires after lock_ttl (3 s) instead of
    blocking the job, and the occurrence is redelivered and run once more where the queue
    redelivers unacknowledged messages (Celery acks_late, Dramatiq), or lost (RQ, no retries)."""
    first = stack.workers("long", 1)
    services = running(first)
    client = redis.Redis(port=stack.redis_port)
    prefix = stack.store_url.rpartition("prefix=")[2]
    try:
        sent = cli(
            "run",
            stack.job,
            "-A",
            stack.app,
            env=stack.env("long"),
            cwd=stack.folder,
            python=stack.python,
        )
        assert sent.returncode == 0, sent.stderr
        wait_for(lambda: bool(stack.lines("start")), 60, "the run to start")
        assert client.exists(f"{prefix}active:{stack.job}") == 1
        first[0].kill_all()
        killed = time.monotonic()
        wait_for(lambda: client.exists(f"{prefix}active:{stack.job}") == 0, 10, "lock expiry")
        assert time.monotonic() - killed <= 3 + 1
        second = stack.workers("long", 1)
        second[0].name = "worker-after"
        services += running(second)
        redelivered = REDELIVERED[
            (stack.library, "rabbitmq" if "amqp" in stack.broker else "redis")
        ]
        if redelivered:
            wait_for(lambda: len(stack.lines("start")) == 2, 45, "the redelivered run")
        else:
            time.sleep(20)
    finally:
        for service in services:
            service.ensure_stopped()
        client.close()
    starts = stack.lines("start")
    assert len({line["occurrence_id"] for line in starts}) == 1
    assert len(starts) == (2 if redelivered else 1), starts
    if redelivered:
        assert starts[0]["pid"] != starts[1]["pid"]
        assert starts[1]["trigger"] == "queue"


MANUAL_CALL = {
    "celery": "from tests.apps.celery_app import job; job.delay(source='test')",
    "dramatiq": "from tests.apps.dramatiq_app import job; job.send(source='test')",
    "rq": (
        "import os; from redis import Redis; from rq import Queue; "
        "from rq.serializers import JSONSerializer; from tests.apps import rq_app, scenarios; "
        "Queue(scenarios.QUEUE, connection=Redis.from_url(os.environ['RQ_REDIS_URL']), "
        "serializer=JSONSerializer).enqueue(rq_app.job, source='test')"
    ),
}


def cli_python(stack: Stack, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [stack.python, "-c", code],
        env=stack.env("every"),
        cwd=stack.folder,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _at(second: int) -> Any:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(second, UTC)


@pytest.mark.parametrize("library", ["celery", "dramatiq"])
def test_a_redelivered_message_of_a_completed_occurrence_never_runs_again(
    library: str, tmp_path: Path, redis_server: RedisServer
) -> None:
    """The same occurrence reaches a real worker twice (the second time as a redelivery after
    a lost ack would): the handler runs once, the second delivery is recorded
    skipped-completed and acknowledged."""
    name = uuid.uuid4().hex[:8]
    stack = Stack(
        library=library,
        broker=redis_server.url,
        queue=f"q-{name}",
        job=f"job.{name}",
        store_url=f"{redis_server.url}?prefix=rd{name}:",
        redis_port=redis_server.port,
        folder=tmp_path,
        notes=tmp_path / "journal.jsonl",
    )
    at = "2026-01-01T12:00:00+00:00"  # no beat runs here: only these two messages
    occurrence = Occurrence(job=stack.job, scheduled_at=datetime.fromisoformat(at))
    env = stack.env("every")
    store = stack.store()

    def outcomes() -> list[str]:
        return sorted(r.outcome for r in store.history(stack.job, 10))

    services = running(stack.workers("every", 1))
    try:
        for wanted in (["completed"], ["completed", "skipped-completed"]):
            sent = subprocess.run(
                [sys.executable, "-m", "tests.apps.resend", stack.app, at],
                env=env,
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert sent.returncode == 0, sent.stderr
            wait_for(lambda wanted=wanted: outcomes() == wanted, 60, f"the outcomes {wanted}")
    finally:
        stop_all(services)
    assert [line["occurrence_id"] for line in stack.lines("ran")] == [occurrence.id]


@pytest.mark.parametrize("library", ["celery", "rq", "dramatiq"])
def test_a_worker_that_finds_the_store_down_runs_the_occurrence_once_it_is_back(
    library: str, tmp_path: Path, redis_server: RedisServer
) -> None:
    """The store is down when the message reaches the worker and back 4 s later, well within
    misfire_grace: the worker asks again and runs the occurrence once (before, it failed at
    once with StoreUnavailable and the occurrence was lost)."""
    store_server = RedisServer()
    try:
        store_server.start()
    except ServerUnavailable as exc:
        unavailable("redis-server", exc)
    name = uuid.uuid4().hex[:8]
    stack = Stack(
        library=library,
        broker=redis_server.url,
        queue=f"q-{name}",
        job=f"job.{name}",
        store_url=f"{store_server.url}?prefix=blip{name}:&connect_timeout=1",
        redis_port=redis_server.port,
        folder=tmp_path,
        notes=tmp_path / "journal.jsonl",
    )
    at = "2026-01-01T12:00:00+00:00"  # no beat runs here: only this message
    services = running(stack.workers("every", 1))
    try:
        wait_for(services[0].up, 60, "the worker up and waiting")
        store_server.stop()
        sent = subprocess.run(
            [sys.executable, "-m", "tests.apps.resend", stack.app, at],
            env=stack.env("every"),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert sent.returncode == 0, sent.stderr
        time.sleep(4)
        store_server.start()
        wait_for(lambda: bool(stack.lines("ran")), 60, "the run once the store is back")
        store = stack.store()
        wait_for(
            lambda: [r.outcome for r in store.history(stack.job, 10)] == ["completed"],
            30,
            "the record",
        )
    finally:
        stop_all(services)
        store_server.remove()
    assert len(stack.lines("ran")) == 1


@pytest.mark.parametrize("library", ["celery", "rq", "dramatiq", "dramatiq+asyncio"])
def test_an_async_task_runs_on_a_real_worker_under_the_guard(
    library: str, tmp_path: Path, redis_server: RedisServer
) -> None:
    """An ``async def`` task under @cluster_task, on the library's own worker process: awaited
    on cron-bridge's loop thread (on Dramatiq's own when its AsyncIO middleware is there), each
    occurrence completed once, ``ctx.signal`` usable."""
    library, _, middleware = library.partition("+")
    name = uuid.uuid4().hex[:8]
    stack = Stack(
        library=library,
        broker=redis_server.url,
        queue=f"q-{name}",
        job=f"job.{name}",
        store_url=f"{redis_server.url}?prefix=as{name}:",
        redis_port=redis_server.port,
        folder=tmp_path,
        notes=tmp_path / "journal.jsonl",
    )
    extra = {"CB_TEST_DRAMATIQ_ASYNCIO": "1"} if middleware else {}
    services = running(stack.beats("async", 1), stack.workers("async", 1, **extra))
    try:
        wait_for(lambda: len(stack.lines("ran")) >= 3, 60, "three awaited runs")
    finally:
        stop_all(services)
    lines = stack.lines("ran")
    assert all(line["awaited"] and line["aborted"] is False for line in lines), lines
    ours = {line["thread"] == "cron-bridge-asyncio" for line in lines}
    assert ours == ({False} if middleware else {True}), lines
    assert max(Counter(line["occurrence_id"] for line in lines).values()) == 1
    outcomes = outcomes_by_occurrence(stack.store(), [stack.job])
    done = [o for o in outcomes.values() if o.get("completed")]
    assert len(done) >= 3 and all(o["completed"] == 1 for o in done), outcomes


@pytest.mark.parametrize("library", ["celery", "rq", "dramatiq"])
def test_a_retry_that_meets_the_next_occurrences_lock_waits_and_runs(
    library: str, tmp_path: Path, redis_server: RedisServer
) -> None:
    """A job every 6 s, attempts=3, whose first attempt takes 3 s and fails: its retry comes
    back 4.5 s later (RQ: 4 s, which its scheduler's poll makes 4 to 5), 1.5 s into the next
    occurrence's first attempt, which holds the lock. On workers that run several at once
    (Dramatiq's default 8 threads, Celery -c 2, two RQ workers) the retry waits for the lock
    and runs: every occurrence completes on attempt 2. (Before, the retry was recorded
    skipped-overlap and never tried again: half the occurrences were lost.)

    The timeline leaves 1.5 s on each side of the retry's arrival and 2.5 s after its run:
    with 0.5 s (every 4 s, retry after 1.5 s) a loaded machine's late send let the retry
    take the lock first, and the next occurrence was skipped behind it, as overlap="skip"
    says it must be."""
    name = uuid.uuid4().hex[:8]
    stack = Stack(
        library=library,
        broker=redis_server.url,
        queue=f"q-{name}",
        job=f"job.{name}",
        store_url=f"{redis_server.url}?prefix=rt{name}:",
        redis_port=redis_server.port,
        folder=tmp_path,
        notes=tmp_path / "journal.jsonl",
    )
    env = stack.env("retry", CB_TEST_RETRY_AFTER="4" if library == "rq" else "4.5")
    several = {"concurrency": 2, "threads": None}  # Celery -c 2; Dramatiq's default threads
    workers = [
        Worker(
            f"worker{i}",
            tmp_path,
            env,
            library=library,
            queue=stack.queue,
            broker=stack.broker,
            **several,
        )  # type: ignore[arg-type]
        for i in range(2 if library == "rq" else 1)
    ]
    services = running(workers, stack.beats("retry", 2))
    store = stack.store()
    try:
        wait_for(lambda: len(stack.lines("attempt")) >= 1, 60, "the first attempt")
        began = time.time()
        time.sleep(26)  # four occurrences or more
        ended = time.time()
        for beat in services[len(workers) :]:
            beat.terminate()
        due = [s for s in range(math.ceil(began), math.floor(ended) + 1) if s % 6 == 0]
        second_attempts = {Occurrence(job=stack.job, scheduled_at=_at(second)).id for second in due}

        def retried() -> bool:
            seen = {
                line["occurrence_id"] for line in stack.lines("attempt") if line["attempt"] == 2
            }
            return second_attempts <= seen

        wait_for(retried, 60, "every due occurrence's second attempt")
    finally:
        stop_all(services)
    attempts = Counter((line["occurrence_id"], line["attempt"]) for line in stack.lines("attempt"))
    assert max(attempts.values()) == 1, attempts.most_common(3)
    outcomes = outcomes_by_occurrence(store, [stack.job])
    assert len(due) >= 4, due
    waited = 0
    for second in due:
        occurrence = Occurrence(job=stack.job, scheduled_at=_at(second)).id
        assert (occurrence, 1) in attempts and (occurrence, 2) in attempts, (occurrence, attempts)
        assert outcomes[occurrence]["completed"] == 1, (occurrence, outcomes[occurrence])
        assert not outcomes[occurrence]["skipped-overlap"], (occurrence, outcomes[occurrence])
        retried_at = _line(stack, "attempt", occurrence, 2)["at"]
        later = Occurrence(job=stack.job, scheduled_at=_at(second + 6)).id
        let_go = _line(stack, "failed", later, 1).get("at", math.inf)
        waited += retried_at >= let_go  # it ran once the next occurrence's first attempt let go
    assert waited >= len(due) - 1, "the retries met the next occurrence's lock and waited"


def _line(stack: Stack, event: str, occurrence: str, attempt: int) -> dict[str, Any]:
    found = [
        line
        for line in stack.lines(event)
        if line["occurrence_id"] == occurrence and line["attempt"] == attempt
    ]
    return found[0] if found else {}
