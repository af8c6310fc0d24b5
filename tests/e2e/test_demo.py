"""``cron-bridge demo``: the newcomer's first command, on SQLite and a filesystem broker."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e.processes import REPO, cli, command_env

pytestmark = pytest.mark.slow


def test_the_demo_prints_each_occurrence_and_clean_totals(tmp_path: Path) -> None:
    """3 replicas and a worker for 12 s: per-occurrence lines, 0 duplicates, 0 missed."""
    done = cli("demo", "--duration", "12", env=command_env(), cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    runs = [line for line in lines if "enqueued by replica-" in line]
    assert len(runs) >= 4, done.stdout
    assert all("skipped by 2" in line and "completed on" in line for line in runs), runs
    (totals,) = [line for line in lines if line.startswith("totals: ")]
    # It ends saying what to read and run next, each of which exists.
    after = "\n".join(lines[lines.index(totals) + 1 :])
    assert after.lstrip().startswith("Next:") and "make test" in after, after
    for path in re.findall(r"(?:README|docs/\w+)\.md", after):
        assert (REPO / path).is_file(), path
    match = re.fullmatch(
        r"totals: (\d+) occurrences, (\d+) runs, 0 duplicates, 0 missed, 0 failed", totals
    )
    assert match, totals
    assert int(match[1]) == int(match[2]) == len(runs)
