"""Traces across the queue hop and metrics scraped from running beats, with real processes."""

from __future__ import annotations

import json
import re
import urllib.request
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.processes import BeatProcess, command_env
from tests.e2e.test_cluster import wait_until_live
from tests.e2e.test_queues import Stack
from tests.servers import RedisServer, free_port
from tests.waiting import wait_for, waited

pytestmark = pytest.mark.slow

ATTRIBUTES = {"job", "scope", "trigger", "occurrence", "replica", "attempt", "outcome"}


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("library", ["celery", "rq", "dramatiq"])
def test_the_worker_span_is_a_child_of_the_beat_span(
    library: str, tmp_path: Path, redis_server: RedisServer
) -> None:
    """A beat and a worker with the OpenTelemetry SDK, on Redis: for every occurrence the
    worker ran, its span has the beat's enqueue span as parent, in the same trace."""
    name = uuid.uuid4().hex[:8]
    stack = Stack(
        library=library,
        broker=redis_server.url,
        queue=f"q-{name}",
        job=f"job.{name}",
        store_url=f"{redis_server.url}?prefix=ot{name}:",
        redis_port=redis_server.port,
        folder=tmp_path,
        notes=tmp_path / "journal.jsonl",
    )
    spans_file = tmp_path / "spans.jsonl"
    (beat,) = stack.beats("every", 1, CB_TEST_SPANS=str(spans_file))
    (worker,) = stack.workers("every", 1, CB_TEST_SPANS=str(spans_file))
    try:
        beat.start()
        worker.start()

        def worker_spans() -> list[dict[str, Any]]:
            return [s for s in read_lines(spans_file) if s["attributes"].get("trigger") == "queue"]

        wait_for(lambda: len(worker_spans()) >= 3, 90, "three runs traced on the worker")
        beat.terminate()
        worker.terminate()
    finally:
        beat.ensure_stopped()
        worker.ensure_stopped()
    spans = read_lines(spans_file)
    beat_spans = {
        s["attributes"]["occurrence"]: s for s in spans if s["attributes"]["trigger"] == "schedule"
    }
    ran = worker_spans()
    assert ran, spans
    for span in ran:
        parent = beat_spans[span["attributes"]["occurrence"]]
        assert span["name"] == parent["name"] == f"scheduler.run {stack.job}"
        assert span["trace_id"] == parent["trace_id"]
        assert span["parent_id"] == parent["span_id"]
        assert (parent["kind"], span["kind"]) == ("PRODUCER", "CONSUMER")
        assert set(span["attributes"]) >= ATTRIBUTES and set(parent["attributes"]) >= ATTRIBUTES
        assert parent["attributes"]["outcome"] == "enqueued"
        assert span["attributes"]["outcome"] == "completed"
        assert span["attributes"]["scope"] == "cluster"
        assert span["attributes"]["attempt"] == 1
        assert span["attributes"]["replica"] != parent["attributes"]["replica"]
        assert parent["pid"] != span["pid"]


def scrape(port: int) -> tuple[dict[tuple[str, str], float], str]:
    """cron_bridge_runs_total by (job, outcome) from one beat's /metrics, and the page."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    found: dict[tuple[str, str], float] = {}
    pattern = r'^cron_bridge_runs_total\{job="([^"]+)",outcome="([^"]+)"\} (\S+)$'
    for job, outcome, value in re.findall(pattern, text, re.MULTILINE):
        found[job, outcome] = float(value)
    return found, text


def test_metrics_scraped_from_running_beats_count_runs_by_outcome(tmp_path: Path) -> None:
    """3 beats with --metrics, 3 inline jobs every second on SQLite: each replica's /metrics
    counts the runs it won as completed and the others' as skipped-claimed, and across the
    three every occurrence is one completed and two skipped-claimed."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    ports = [free_port() for _ in range(3)]
    env = command_env(CB_TEST_JOBS="3")
    beats = [
        BeatProcess(
            f"beat{i}",
            tmp_path,
            env,
            app="tests.apps.many",
            store_url=url,
            extra=["--metrics", f"127.0.0.1:{port}"],
        ).start()
        for i, port in enumerate(ports)
    ]
    try:
        wait_until_live(url, 3)

        scraped: list[Any] = []

        def counted() -> bool:
            """Each replica lost a claim and the three completed 5 runs of each job (a
            replica ahead of the others on a loaded machine may win every claim for a
            while), in scrapes a moment apart: one replica behind the others (a slow
            scrape, a beat that has not asked for the latest claims yet) is scraped again."""
            scraped[:] = [scrape(port) for port in ports]
            done: Counter[str] = Counter()
            lost: Counter[str] = Counter()
            for replica, _ in scraped:
                for (job, outcome), value in replica.items():
                    done[job] += int(value) if outcome == "completed" else 0
                    lost[job] += int(value) if outcome == "skipped-claimed" else 0
            each = all(any(o == "skipped-claimed" for _, o in r) for r, _ in scraped)
            apart = all(abs(lost[job] - 2 * done[job]) <= 3 for job in done)
            return each and apart and len(done) == 3 and min(done.values()) >= 5

        waited(counted, 60, every=0.5)  # asserted on below, from the last scrapes
        for beat in beats:
            beat.terminate()
    finally:
        for beat in beats:
            beat.ensure_stopped()
    totals: dict[str, Counter[str]] = defaultdict(Counter)
    # The replicas that ran something also timed it and measured how late it started.
    assert any("cron_bridge_lag_ms_count{" in text for _, text in scraped)
    assert any("cron_bridge_duration_ms_count{" in text for _, text in scraped)
    for replica, _ in scraped:
        assert any(outcome == "skipped-claimed" for _, outcome in replica), replica
        for (job, outcome), value in replica.items():
            totals[job][outcome] += int(value)
    assert set(totals) == {"tick.00", "tick.01", "tick.02"}
    for job, counts in totals.items():
        assert set(counts) == {"completed", "skipped-claimed"}, (job, counts)
        assert counts["completed"] >= 5, (job, counts)
        # Scrapes are a moment apart: at most one occurrence per replica in between.
        assert abs(counts["skipped-claimed"] - 2 * counts["completed"]) <= 3, (job, counts)
