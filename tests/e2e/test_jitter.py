"""A burst of 1,000 jobs due at the same second, spread by jitter over its window, on three
real beat replicas: every occurrence still runs once."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cron_bridge.jobs import Occurrence
from tests.apps import journal
from tests.conftest import make_kit
from tests.e2e.processes import BeatProcess, command_env
from tests.waiting import wait_for

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def test_jitter_spreads_a_burst_of_a_thousand_jobs_and_each_runs_once(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    kit = make_kit("redis", request, tmp_path)
    path = tmp_path / "journal.jsonl"
    env = command_env(path, CB_TEST_JOBS="1000")
    beats = [
        BeatProcess(f"b{i}", tmp_path, env, app="tests.apps.spread", store_url=kit.url)
        for i in range(3)
    ]
    try:
        for beat in beats:
            beat.start()
        wait_for(
            lambda: all("started with 1000 jobs" in beat.output() for beat in beats),
            60,
            "every beat up",
        )
        started = datetime.now(UTC)

        def bursts() -> dict[datetime, list[dict[str, object]]]:
            found = defaultdict(list)
            for line in journal.read(path):
                found[Occurrence.parse(str(line["occurrence_id"])).scheduled_at].append(line)
            return found

        # The first burst that began after every replica was up, whole.
        wait_for(
            lambda: any(t > started and len(runs) >= 1000 for t, runs in bursts().items()),
            90,
            "a whole burst",
        )
        for beat in beats:
            beat.terminate()
    finally:
        for beat in beats:
            beat.ensure_stopped()
        kit.close()
    burst_at, runs = min((t, r) for t, r in bursts().items() if t > started and len(r) >= 1000)
    counts = Counter(str(line["occurrence_id"]) for line in runs)
    assert len(counts) == 1000 and set(counts.values()) == {1}, "each occurrence once"
    delays = sorted(float(str(line["at"])) - burst_at.timestamp() for line in runs)
    per_second = Counter(int(d) for d in delays)
    record_property("runs per second of the 8 s window", dict(sorted(per_second.items())))
    assert delays[0] >= -0.05  # nothing before its scheduled time
    assert delays[-1] - delays[0] > 6, "spread over most of the 8 s window"
    assert max(per_second.values()) < 3 * 1000 / 8, per_second  # no second takes the burst
    assert len({line["replica"] for line in runs}) == 3  # every replica took a share
