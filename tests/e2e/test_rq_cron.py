"""Twin test: stock ``rq cron`` (one process) and three ``cron-bridge rq-cron`` replicas on the
same config (tests/apps/rq_cron_config.py), side by side, each enqueueing into its own Redis
database; the jobs that reach Redis are compared field by field, registration by
registration, and counted over the same window."""

from __future__ import annotations

import sys
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
import redis
from rq import Queue
from rq.cron import CronScheduler
from rq.job import Job

from tests.e2e.processes import REPO, Command, cli, command_env
from tests.e2e.twins import logs_say, side_by_side
from tests.servers import RedisServer

pytestmark = pytest.mark.slow

CONFIG = "tests/apps/rq_cron_config.py"
QUEUES = ("default", "reports", "sync")
WINDOW = 62.0  # seconds: covers a minute boundary for the crontab registration
# Differ between any two sends, whoever sends them (the intended differences, in
# docs/migrating.md: the job id is the occurrence's; the times are compared apart).
VOLATILE = {"id", "enqueued_at", "created_at", "last_heartbeat", "worker_name"}


def jobs_in(client: redis.Redis) -> list[Job]:
    """Every job waiting in the queues, as RQ reads it (no worker runs here)."""
    found = []
    for name in QUEUES:
        found += Queue(name, connection=client).get_jobs()
    return found


def shape(job: Job, client: redis.Redis) -> dict[str, Any]:
    """What a worker would see of a job, and how long Redis keeps it."""
    key_ttl = client.ttl(job.key)
    enqueued = job.enqueued_at.timestamp() if job.enqueued_at else time.time()
    return {
        "func_name": job.func_name,
        "args": job.args,
        "kwargs": job.kwargs,
        "origin": job.origin,
        "timeout": job.timeout,
        "result_ttl": job.result_ttl,
        "ttl": job.ttl,
        "failure_ttl": job.failure_ttl,
        "meta": job.meta,
        "serializer": getattr(job.serializer, "__name__", repr(job.serializer)),
        "description": job.description,
        "status": job.get_status(refresh=False),
        "retries_left": job.retries_left,
        "depends_on": job._dependency_ids,
        # How long after its enqueue Redis drops the key (ttl=300 sets it), to 10 s.
        "key_expires": None if key_ttl < 0 else round(time.time() + key_ttl - enqueued, -1),
    }


def registration(job: Job) -> tuple[str, str, str]:
    return (job.func_name, repr(job.args), job.origin)


def test_stock_rq_cron_and_three_cron_bridge_replicas_enqueue_the_same_jobs(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """Every registration reaches Redis with the same function, args, kwargs, queue, timeout,
    result_ttl, ttl, failure_ttl, meta and serializer from both, as often (±1), each of our
    occurrences once; RQ's cron scheduler registry lists the replicas with the same jobs."""
    stock_db, ours_db = 1, 2
    prefix = f"rc{uuid.uuid4().hex[:8]}:"
    env = command_env(tmp_path / "journal.jsonl")
    server = redis_server.url.rsplit("/", 1)[0]
    stock = Command(
        "stock",
        tmp_path,
        env,
        str(Path(sys.executable).parent / "rq"),
        "cron",
        "-u",
        f"{server}/{stock_db}",
        CONFIG,
    )
    forms = [CONFIG, "tests.apps.rq_cron_config", str(REPO / CONFIG)]  # file, dotted, absolute
    store_url = f"{server}/3?prefix={prefix}"
    argv = [
        sys.executable,
        "-m",
        "cron_bridge",
        "rq-cron",
        "-u",
        f"{server}/{ours_db}",
        "--store",
        store_url,
    ]
    ours = [
        Command(f"replica{i}", tmp_path, env, *argv, "--replica-id", f"replica{i}", form)
        for i, form in enumerate(forms)
    ]
    stock_client = redis.Redis(port=redis_server.port, db=stock_db)
    ours_client = redis.Redis(port=redis_server.port, db=ours_db)
    ready = logs_say("starting", "started with 5 jobs")
    with side_by_side(stock, ours, ready=ready, what="rq cron and three replicas") as twins:
        window = twins.watch(WINDOW)
        schedulers = {
            "stock": CronScheduler.all(stock_client),
            "ours": CronScheduler.all(ours_client),
        }
        for process in twins.processes:
            process.terminate()
    stock_jobs = jobs_in(stock_client)
    our_jobs = jobs_in(ours_client)

    # Field by field, registration by registration: one shape per registration on each side.
    def shapes(jobs: list[Job], client: redis.Redis) -> dict[tuple[str, str, str], list[Any]]:
        found: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
        for job in jobs:
            if (found_shape := shape(job, client)) not in found[registration(job)]:
                found[registration(job)].append(found_shape)
        return dict(found)

    assert shapes(our_jobs, ours_client) == shapes(stock_jobs, stock_client)
    assert len(shapes(stock_jobs, stock_client)) == 5

    # Every interval registration is sent at start, all together, then every interval: stock
    # at its start, ours at the moment the cluster first saw them (the first replica's).
    intervals = [
        ("tests.apps.rq_cron_tasks.cleanup", "()", "default"),
        ("tests.apps.rq_cron_tasks.sync_accounts", "('eu',)", "sync"),
        ("tests.apps.rq_cron_tasks.sync_accounts", "('us',)", "sync"),
        ("tests.apps.rq_cron_tasks.send_report", "('hourly',)", "reports"),
    ]
    for side, jobs in (("stock", stock_jobs), ("ours", our_jobs)):
        firsts = [
            min(j.enqueued_at.timestamp() for j in jobs if registration(j) == key and j.enqueued_at)
            for key in intervals
        ]
        assert max(firsts) - min(firsts) < 1.0, (side, firsts)
        assert max(firsts) < window.began, (side, firsts, window)
        # The hourly one: once, at start, and not again within the window.
        assert [registration(j) for j in jobs].count(intervals[-1]) == 1, side

    # As often over the same window (the first interval sends came at the start, before it).
    def counts(jobs: list[Job]) -> Counter[tuple[str, str, str]]:
        return Counter(
            registration(j) for j in jobs if j.enqueued_at and j.enqueued_at.timestamp() in window
        )

    stock_counts, our_counts = counts(stock_jobs), counts(our_jobs)
    assert set(stock_counts) == set(our_counts)
    for key, count in stock_counts.items():
        assert abs(our_counts[key] - count) <= 1, (key, count, our_counts[key])
    assert stock_counts[("tests.apps.rq_cron_tasks.cleanup", "()", "default")] >= 19
    reports = [k for k in stock_counts if k[1] == "('minutely',)"]
    assert reports and stock_counts[reports[0]] >= 1

    # Each occurrence once: one RQ job per occurrence the store says was enqueued.
    assert len({job.id for job in our_jobs}) == len(our_jobs)
    store = cli(
        "history",
        "minutely-report",
        "--json",
        "-n",
        "50",
        "--store",
        store_url,
        env=env,
        cwd=tmp_path,
    )
    assert store.returncode == 0, store.stderr
    assert store.stdout.count('"enqueued"') == len(
        [j for j in our_jobs if j.meta.get("owner") == "ops"]
    )

    # RQ's registry of cron schedulers: the three replicas, each with the config's jobs.
    def listed(scheduler: CronScheduler) -> list[tuple[str, str, Any, Any]]:
        return sorted((j.name, j.queue_name, j.interval, j.cron) for j in scheduler.get_jobs())

    assert len(schedulers["stock"]) == 1 and len(schedulers["ours"]) == 3
    for scheduler in schedulers["ours"]:
        assert listed(scheduler) == listed(schedulers["stock"][0])
