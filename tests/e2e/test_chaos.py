"""The short chaos runs of ``make test``: one run per store, each with another queue library,
about a minute and a half each, judged by the checker.

Three beat replicas (one clock 3 s ahead, one 3 s behind) and two workers on each store: RQ on
Redis (with an append-only file), Celery on Postgres, Dramatiq on NATS, through the seeded
schedule of seed 60: replica and worker SIGKILLs, a replica SIGSTOP, the store's own fault (a
restart, or Postgres's connections cut) and the broker's (its Redis SIGKILLed and restarted,
and SIGSTOPped). ``make chaos`` runs the long version.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable

import pytest

from tests.e2e.processes import REPO, command_env

pytestmark = [pytest.mark.slow, pytest.mark.alone]

SECONDS = 50
ARGS = ["--seed", "60", "--duration", str(SECONDS), "--replicas", "3", "--jobs", "6",
        "--queued", "2", "--workers", "2"]  # fmt: skip


@pytest.mark.parametrize(("store", "queue"), [("redis", "rq"), ("postgres", "celery"),
                                              ("nats", "dramatiq")])  # fmt: skip
def test_a_short_chaos_run_finds_no_duplicate_no_overlap_and_no_loss_it_does_not_allow(
    store: str, queue: str, request: pytest.FixtureRequest,
    record_property: Callable[[str, object], None],
) -> None:  # fmt: skip
    request.getfixturevalue(f"{store}_server")  # skips (or fails in CI) without its server
    request.getfixturevalue("redis_server")  # the broker's redis-server
    done = subprocess.run(
        [sys.executable, "-m", "chaos.run", *ARGS, "--store", store, "--queue", queue],
        cwd=REPO, env=command_env(), capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    summary = re.search(
        r"occurrences (\d+), ran once (\d+), duplicates (\d+), overlaps (\d+), "
        r"lost as the guarantee allows (\d+), lost otherwise (\d+), "
        r"run again after their worker died in them (\d+)",
        output,
    )
    assert summary is not None, output
    occurrences, ran_once, duplicates, overlaps, allowed, not_allowed, rerun = map(
        int, summary.groups()
    )
    record_property(f"chaos-{store}-{queue}", summary.group(0))
    assert "SIGKILL worker" in output and "SIGSTOP beat" in output, output
    assert re.search(r"\d\d:\d\d:\d\d store (down|connections cut)", output), output
    assert "broker SIGKILLed" in output and "broker SIGSTOPped" in output, output
    assert (duplicates, overlaps, not_allowed) == (0, 0, 0), output
    assert done.returncode == 0, output
    assert occurrences == 8 * SECONDS and ran_once + allowed + rerun == occurrences
    assert ran_once > occurrences // 2, output  # the run did run, not lose everything allowably
