"""A one-off run (at=) and a bounded schedule on three real beat replicas: once each."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cron_bridge.control import lost_claims
from cron_bridge.stores import store_from_url
from tests.apps import journal
from tests.e2e.processes import BeatProcess, cli, command_env
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

LEAD = 20  # seconds from the test's start to the window's


def test_a_one_off_runs_exactly_once_across_three_replicas(tmp_path: Path) -> None:
    # Far enough ahead for three beats to start on a loaded machine (checked below): a
    # beat that comes up after an occurrence is due does not run it.
    now = datetime.now(UTC).replace(microsecond=0)
    at, start, end = (
        now + timedelta(seconds=LEAD + 1),
        now + timedelta(seconds=LEAD),
        now + timedelta(seconds=LEAD + 3),
    )
    path = tmp_path / "journal.jsonl"
    url = f"sqlite:///{tmp_path / 'store.db'}"
    env = command_env(
        path,
        CB_TEST_AT=at.isoformat(),
        CB_TEST_START=start.isoformat(),
        CB_TEST_END=end.isoformat(),
    )
    beats = [
        BeatProcess(f"b{i}", tmp_path, env, app="tests.apps.once", store_url=url) for i in range(3)
    ]
    try:
        for beat in beats:
            beat.start()
        up = start - datetime.now(UTC) - timedelta(seconds=1)
        wait_for(
            lambda: all("started with" in beat.output() for beat in beats),
            up.total_seconds(),
            "the three beats to start before the window",
        )
        wait_for(lambda: datetime.now(UTC) > end + timedelta(seconds=3), 60, "the window")
        for beat in beats:
            beat.terminate()
    finally:
        for beat in beats:
            beat.ensure_stopped()
    runs = Counter(line["occurrence_id"] for line in journal.read(path))
    assert runs[f"once.report@{at.strftime('%Y-%m-%dT%H:%M:%S')}.000Z"] == 1
    window = sorted(o for o in runs if o.startswith("once.window@"))
    assert window == [
        f"once.window@{(start + timedelta(seconds=n)).strftime('%Y-%m-%dT%H:%M:%S')}.000Z"
        for n in range(4)
    ]
    assert set(runs.values()) == {1}
    store = store_from_url(url)
    try:
        outcomes = Counter(r.outcome for r in lost_claims.history(store, "once.report", 100))
    finally:
        store.close()
    assert outcomes == Counter({"completed": 1, "skipped-claimed": 2})
    listed = json.loads(
        cli("list", "-A", "tests.apps.once", "--json", "--store", url, env=env, cwd=tmp_path).stdout
    )
    # Nothing left to run: no next time for either.
    assert {row["name"]: row["next"] for row in listed} == {
        "once.report": None,
        "once.window": None,
    }
