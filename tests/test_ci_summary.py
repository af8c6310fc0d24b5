"""`.ci/run`'s last screen on a failure (.ci/summary.py): the stage, the failing tests with
their first error lines, the lint and type errors, and the venvs' drift from the lock."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

spec = importlib.util.spec_from_file_location("ci_summary", REPO / ".ci" / "summary.py")
assert spec and spec.loader
summary = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = summary
spec.loader.exec_module(summary)

LOG = """\
.venv/bin/mypy
cron_bridge/stores/redis_connect.py:103: error: Unused "type: ignore" comment  [unused-ignore]
Found 1 error in 1 file (checked 140 source files)
........F....
=========================== short test summary info ============================
FAILED tests/test_reference.py::test_messages - AssertionError: ('is missing: a claim', 'x')
ERROR tests/e2e/test_queues.py::test_three[rq-redis] - tests.servers.ServerUnavailable: no
======================== 1 failed, 641 passed in 48.75s ========================
make: *** [Makefile:95: typecheck] Error 1
make: *** [Makefile:113: unit] Error 2
"""


def test_a_failed_run_says_its_stage_its_tests_and_its_errors(tmp_path: Path) -> None:
    """The first stage make stopped at, each failing test with its first error line, each
    type error; a venv not built is said so."""
    out = summary.summarize(LOG, root=tmp_path)
    assert out[0] == "make test failed at the stage `typecheck` (Makefile:95, exit 1)"
    assert "failing tests (2):" in out
    assert "  FAILED tests/test_reference.py::test_messages" in out
    assert "      AssertionError: ('is missing: a claim', 'x')" in out
    assert "  ERROR tests/e2e/test_queues.py::test_three[rq-redis]" in out
    assert any("redis_connect.py:103: error: Unused" in line for line in out)
    assert "  .venv: not built" in out and "  .venv-queue-floor: not built" in out


def test_a_log_with_no_stage_says_so(tmp_path: Path) -> None:
    """A run cut off before make said which stage failed (an install, a signal) says so."""
    out = summary.summarize("Killed\n", root=tmp_path)
    assert out[0].startswith("make test failed before any stage said so")
    assert not any(line.startswith("failing tests") for line in out)
