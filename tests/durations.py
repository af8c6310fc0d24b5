"""How long the longest tests took (tests/durations.json), so that make test starts them
first: pytest-xdist hands out tests in collection order, and a two-minute test started last
holds the whole run up by its length. Figures are seconds (setup, call and teardown) from one
run of the two pytest stages of ``make test`` on an otherwise idle 2-core machine; tests of
8 s or less are left out (they fill the gaps at the end). A stale figure only changes the
order, never what runs.

To refresh: run the stages with ``--durations=0 -q``, keep their output, and run
``python -m tests.durations FILE...``, which rewrites tests/durations.json.

Where the CPU goes: run the stages with ``CB_TEST_CPU=FILE`` (tests/conftest.py appends each
test's CPU and wall seconds) and ``python -m tests.durations --cpu FILE`` prints the files
that cost most.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

FILE = Path(__file__).with_name("durations.json")
_LINE = re.compile(r"([0-9.]+)s (?:call|setup|teardown) +(.+)")


def read() -> dict[str, float]:
    """The recorded seconds by test id (empty when the file is missing or unreadable)."""
    try:
        found = json.loads(FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in found.items()} if isinstance(found, dict) else {}


def table(paths: list[str], least: float = 8) -> dict[str, int]:
    """The seconds of each test longer than ``least`` in pytest ``--durations`` reports."""
    took: defaultdict[str, float] = defaultdict(float)
    for path in paths:
        with open(path, encoding="utf-8") as report:
            for line in report:
                found = _LINE.fullmatch(line.strip())
                if found:
                    took[found[2]] += float(found[1])
    longest = sorted(((t, n) for n, t in took.items() if t > least), reverse=True)
    return {name: round(seconds) for seconds, name in longest}


def cpu_by_file(path: str) -> list[tuple[float, float, int, str]]:
    """CPU seconds, wall seconds and tests of each test file in a ``CB_TEST_CPU`` report,
    dearest first."""
    files: defaultdict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    with open(path, encoding="utf-8") as report:
        for line in report:
            cpu, wall, name = line.rstrip("\n").split("\t", 2)
            figures = files[name.partition("::")[0]]
            figures[0] += float(cpu)
            figures[1] += float(wall)
            figures[2] += 1
    return sorted(((c, w, int(n), f) for f, (c, w, n) in files.items()), reverse=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--cpu"]:
        rows = cpu_by_file(sys.argv[2])
        total = (sum(r[0] for r in rows), sum(r[1] for r in rows), sum(r[2] for r in rows), "all")
        for cpu, wall, count, name in [total, *rows[:40]]:
            sys.stdout.write(f"{cpu:8.0f} CPU-s {wall:8.0f} wall-s {count:4d}  {name}\n")
    else:
        FILE.write_text(json.dumps(table(sys.argv[1:]), indent=1) + "\n", encoding="utf-8")
