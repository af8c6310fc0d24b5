"""``cron-bridge list`` at tenant scale: 100,000 stored schedules on a Redis store.

The command as a user runs it, in a process of its own: how long until its first line and
its first page (``--limit 50``, and a page near the end, ``--offset 99000``), and until the
whole list is printed; and the same command against an empty store (Python starting and
importing the installed adapters and redis-py).

Python's bytecode is cached, as in an installed package (pip compiles it at install): this
machine sets ``PYTHONDONTWRITEBYTECODE``, which would have every run compile redis-py, RQ and
cron-bridge again (about 0.5 s), so the command runs without it, once before it is timed. One
row more is the first page timed as this machine runs it, compiling every run.

    make bench 'BENCH_ARGS=--only listing'
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from typing import Any

from bench.harness import TREE, env
from bench.tenants import _populate
from cron_bridge.stores import store_from_url
from tests.servers import RedisServer

COUNT = 100_000


def _timed(url: str, *args: str, cached: bool = True) -> dict[str, Any]:
    environ = env(CRON_BRIDGE_STORED_TASKS="bench.apps.*", BENCH_LIB="rq", BENCH_N="0")
    if cached:
        environ.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        environ["PYTHONDONTWRITEBYTECODE"] = "1"
        environ["PYTHONPYCACHEPREFIX"] = "/nonexistent-cron-bridge-bench"  # no cache read
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "cron_bridge", "list", "-A", "bench.apps", "--store", url, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=TREE,
        env=environ,
    )
    assert process.stdout is not None
    process.stdout.readline()
    first = time.perf_counter() - started
    lines = 1
    for _ in process.stdout:
        lines += 1
    process.wait(600)
    return {
        "bytecode": "cached" if cached else "compiled",
        "args": " ".join(args) or "(all)",
        "first_line_s": round(first, 2),
        "all_s": round(time.perf_counter() - started, 2),
        "lines": lines,
    }


def measure(count: int = COUNT) -> list[dict[str, Any]]:
    rows = []
    with contextlib.ExitStack() as stack:
        server = RedisServer()
        server.start()
        stack.callback(server.remove)
        empty = f"{server.url}?prefix=empty:"
        url = f"{server.url}?prefix=listing:"
        store = store_from_url(url)
        _populate(store, count)
        store.close()
        _timed(empty, "--limit", "1")  # the bytecode cached, as an installation has it
        for target, args in (
            (empty, ("--limit", "50")),
            (url, ("--limit", "50")),
            (url, ("--limit", "50", "--offset", str(count - 1_000))),
            (url, ("--limit", "50", "--json")),
            (url, ()),
        ):
            row = {"schedules": 0 if target == empty else count, **_timed(target, *args)}
            print("listing", row, flush=True)
            rows.append(row)
        row = {"schedules": count, **_timed(url, "--limit", "50", cached=False)}
        print("listing", row, flush=True)
        rows.append(row)
    return rows
