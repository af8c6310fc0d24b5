"""The short chaos runs of ``make test``: one seed per store, about a minute each, judged by
the checker.

Three beat replicas (one clock 3 s ahead, one 3 s behind) and two RQ workers on each store
(Redis with an append-only file, Postgres, NATS), through the seeded schedule of seed 3:
replica and worker SIGKILLs, replica SIGSTOPs, and the store's own faults (restarts, crashes,
connections cut). ``make chaos`` runs the long version.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable

import pytest

from tests.e2e.processes import REPO, command_env

pytestmark = [pytest.mark.slow, pytest.mark.alone]

ARGS = ["--seed", "3", "--duration", "40", "--replicas", "3", "--jobs", "6", "--queued", "2",
        "--workers", "2"]  # fmt: skip


@pytest.mark.parametrize("store", ["redis", "postgres", "nats"])
def test_a_short_chaos_run_finds_no_duplicate_no_overlap_and_no_loss_it_does_not_allow(
    store: str, request: pytest.FixtureRequest, record_property: Callable[[str, object], None]
) -> None:
    request.getfixturevalue(f"{store}_server")  # skips (or fails in CI) without its server
    request.getfixturevalue("redis_server")  # the RQ broker
    done = subprocess.run(
        [sys.executable, "-m", "chaos.run", *ARGS, "--store", store], cwd=REPO, env=command_env(),
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    summary = re.search(
        r"occurrences (\d+), ran once (\d+), duplicates (\d+), overlaps (\d+), "
        r"lost as the guarantee allows (\d+), lost otherwise (\d+)",
        output,
    )
    assert summary is not None, output
    occurrences, ran_once, duplicates, overlaps, allowed, not_allowed = map(int, summary.groups())
    record_property(f"chaos-{store}", summary.group(0))
    assert "SIGKILL worker" in output and "SIGSTOP beat" in output, output
    assert re.search(r"\d\d:\d\d:\d\d store (down|connections cut)", output), output
    assert (duplicates, overlaps, not_allowed) == (0, 0, 0), output
    assert done.returncode == 0, output
    assert occurrences == 8 * 40 and ran_once + allowed == occurrences
    assert ran_once > occurrences // 2, output  # the run did run, not lose everything allowably
