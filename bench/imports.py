"""What importing an adapter package costs a worker: the ``cron_bridge*`` modules it loads,
whether click comes with it, and the milliseconds, each in a fresh process (median of
``RUNS``). ``cron_bridge.run.delivery`` (what a worker's delivery needs) is the floor.

    make bench 'BENCH_ARGS=--only imports'
    python bench/imports.py [--tree CHECKOUT] [--against CHECKOUT]   # as JSON, for any checkout
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RUNS = 5
_MARK = "-- cron-bridge bench: the import --"
PACKAGES = (
    "cron_bridge_celery",
    "cron_bridge_rq",
    "cron_bridge_dramatiq",
    "cron_bridge.run.delivery",
)
# The measured process: the mark (importtime's lines after it are the import's), the import
# timed in CPU seconds, then what it loaded.
CODE = """\
import json, sys, time
sys.stderr.write({mark!r} + "\\n")
began = time.process_time()
import {package}
cpu = time.process_time() - began
print(json.dumps({{
    "cron_bridge": sum(m.split(".")[0] == "cron_bridge" for m in sys.modules),
    "modules": len(sys.modules),
    "click": "click" in sys.modules,
    "cli": "cron_bridge.cli" in sys.modules,
    "http": "cron_bridge.http" in sys.modules,
    "cpu_s": cpu,
}}))
"""


def _path(tree: Path) -> str:
    """The checkout's core and its adapters, ahead of what is installed."""
    return os.pathsep.join(
        str(tree / p) for p in ("", *(f"adapters/{a}" for a in ("celery", "rq", "dramatiq")))
    )


def _once(package: str, tree: Path) -> dict[str, Any]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("BENCH_", "CRON_BRIDGE_"))}
    environ["PYTHONPATH"] = _path(tree)
    code = CODE.format(mark=_MARK, package=package)
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        env=environ,
        cwd=tree,  # -c puts the working directory first on sys.path
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - began
    # What ``import package`` took: importtime's cumulative microseconds of each module it
    # imported at the top level (a dotted name imports its parents first), after the mark.
    after = done.stderr.partition(_MARK)[2]
    own = sum(int(m[1]) for m in re.finditer(r"^import time:\s+\d+ \|\s+(\d+) \| \S", after, re.M))
    return {**json.loads(done.stdout), "import_us": own, "process_s": wall}


def measure(tree: Path = REPO, runs: int = RUNS) -> list[dict[str, Any]]:
    """Per package: modules loaded, whether click is among them, and the medians of the
    package's import (``-X importtime``'s cumulative wall time, and the process's CPU time
    over it: on a shared machine the steadier figure) and of the whole process's wall time."""
    return compare([tree], runs)[0]


def compare(trees: list[Path], runs: int = RUNS) -> list[list[dict[str, Any]]]:
    """``measure`` for each checkout, their runs interleaved (one of each in turn), so that
    what else loads the machine weighs on each alike."""
    found: list[list[dict[str, Any]]] = [[] for _ in trees]
    for package in PACKAGES:
        seen: list[list[dict[str, Any]]] = [[] for _ in trees]
        for _ in range(runs):
            for index, tree in enumerate(trees):
                seen[index].append(_once(package, tree))
        for index, runs_of_tree in enumerate(seen):
            found[index].append(_row(package, runs_of_tree))
            print("imports", trees[index], found[index][-1], flush=True)
    return found


def _row(package: str, seen: list[dict[str, Any]]) -> dict[str, Any]:
    last = seen[-1]
    return {
        "package": package,
        "cron_bridge_modules": last["cron_bridge"],
        "modules": last["modules"],
        "click": last["click"],
        "cli_or_http": last["cli"] or last["http"],
        "import_ms": round(statistics.median(s["import_us"] for s in seen) / 1000, 1),
        "import_cpu_ms": round(statistics.median(s["cpu_s"] for s in seen) * 1000, 1),
        "process_ms": round(statistics.median(s["process_s"] for s in seen) * 1000),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout to measure")
    parser.add_argument(
        "--against", type=Path, help="another checkout, measured interleaved with it"
    )
    args = parser.parse_args()
    if args.against is None:
        print(json.dumps(measure(args.tree)))
    else:
        now, before = compare([args.tree, args.against])
        print(json.dumps({"rows": now, "before": before}))
