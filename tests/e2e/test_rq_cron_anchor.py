"""An ``rq cron`` interval registration on replicas started apart and then restarted: it is
sent at the first deploy, once, then every interval from there, as stock's first start
sends it; a replica that starts later, inside or well past the first send's grace, and a
restart of every replica send nothing again. Real Redis, real ``cron-bridge rq-cron``
processes; every wait is on a condition, bounded in time."""

from __future__ import annotations

import json
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from rq import Queue

from cron_bridge import Occurrence
from cron_bridge.stores import store_from_url
from cron_bridge_rq.rq_cron import ANCHORS, job_name
from tests.e2e.processes import Command, command_env
from tests.servers import RedisServer
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

INTERVAL = 10  # seconds
GRACE = 30  # seconds: a job's default misfire_grace, inside which a replica arms from the anchor
SHOWN = "nightly report (EU)"  # RQ takes any text as a name; the job is job_name(SHOWN)


def test_interval_registration_sent_at_first_deploy_then_every_interval_only(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    queue = f"q{uuid.uuid4().hex[:8]}"
    prefix = f"ra{uuid.uuid4().hex[:8]}:"
    server = redis_server.url.rsplit("/", 1)[0]
    store_url = f"{server}/3?prefix={prefix}"
    config = tmp_path / "cron_config.py"
    config.write_text(
        "from rq import cron\n"
        "from tests.apps.rq_cron_tasks import send_report\n"
        f"cron.register(send_report, queue_name={queue!r}, interval={INTERVAL}, "
        f"args=('nightly',), name={SHOWN!r})\n"
    )
    env = command_env(tmp_path / "journal.jsonl")
    argv = [
        sys.executable,
        "-m",
        "cron_bridge",
        "rq-cron",
        "-u",
        f"{server}/4",
        "--store",
        store_url,
    ]

    def replica(name: str) -> Command:
        return Command(name, tmp_path, env, *argv, "--replica-id", name, str(config))

    client = redis.Redis(port=redis_server.port, db=4)
    rq_queue = Queue(queue, connection=client)
    store = store_from_url(store_url)
    name = job_name(SHOWN)

    def sent() -> list[datetime]:
        """When each job in the queue was enqueued (no worker takes them)."""
        return sorted(
            j.enqueued_at.replace(tzinfo=UTC) for j in rq_queue.get_jobs() if j.enqueued_at
        )

    def started(process: Command) -> bool:
        return process.output().count("started with 1 job") >= process.starts

    first, soon, late = replica("first"), replica("soon"), replica("late")
    restarted = [replica("first-again"), replica("late-again")]
    everyone = [first, soon, late, *restarted]
    try:
        first.start()
        wait_for(lambda: started(first), 60, "the first replica")
        wait_for(lambda: len(sent()) == 1, 10, "the send at the first deploy")
        kept = store.control(ANCHORS, f"{name}:{INTERVAL * 1000}")
        assert kept is not None
        anchor = datetime.fromisoformat(json.loads(kept)["at"])
        # Sent at the first deploy: within a second of the moment the cluster first saw it.
        assert timedelta(0) <= sent()[0] - anchor < timedelta(seconds=1), (sent(), anchor)

        # A replica that starts within the grace of that first send arms from it: the
        # occurrence is claimed already, so it is not sent again.
        soon.start()
        wait_for(lambda: started(soon), 60, "the replica started soon after")
        assert datetime.now(UTC) - anchor < timedelta(seconds=GRACE)

        # One started well after the first (past the grace) arms from its own start.
        wait_for(
            lambda: datetime.now(UTC) - anchor > timedelta(seconds=GRACE + 2),
            GRACE + 20,
            "the grace of the first send to pass",
        )
        late.start()
        wait_for(lambda: started(late), 60, "the replica started late")
        late_at = datetime.now(UTC)

        # Every replica restarted, in turn: none sends at its start.
        sends = len(sent())
        wait_for(lambda: len(sent()) == sends + 1, INTERVAL + 5, "a send after the late start")
        for stopping in (first, soon, late):
            stopping.terminate()
        for process in restarted:
            process.start()
        wait_for(lambda: all(started(p) for p in restarted), 60, "the restarted replicas")
        restart_at = datetime.now(UTC)
        sends = len(sent())
        wait_for(lambda: len(sent()) == sends + 2, 2 * INTERVAL + 5, "two sends after restarts")
        ended = datetime.now(UTC)
        for process in restarted:
            process.terminate()
        records = [r for r in store.history(name, 1000) if r.outcome == "enqueued"]
    finally:
        for process in everyone:
            process.ensure_stopped()
        store.close()

    times = sent()
    step = timedelta(seconds=INTERVAL)
    # Once at the anchor, then once every interval from it, to the end: none missing, none
    # twice, none at a later start or a restart (each send is within 2 s of its slot).
    slots = [anchor + k * step for k in range(len(times))]
    off = [(t, s) for t, s in zip(times, slots, strict=True) if abs(t - s) >= timedelta(seconds=2)]
    assert not off, (anchor, times)
    assert ended - slots[-1] < step  # the next slot had not come: nothing is missing
    # Slots came after the late start and after the restart, and were sent once each.
    assert [s for s in slots if s > late_at] and [s for s in slots if s > restart_at]
    # The store says the same: one claimed occurrence per slot, scheduled exactly there.
    scheduled = sorted(Occurrence.parse(r.occurrence_id).scheduled_at for r in records)
    assert scheduled == [s.replace(microsecond=s.microsecond // 1000 * 1000) for s in slots]
