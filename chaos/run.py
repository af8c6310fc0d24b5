"""``make chaos``: beat replicas on a Redis store (append-only, fsync always) through a seeded
schedule of SIGKILLs and restarts, SIGSTOPs of 3 to 10 s, and store restarts from the
append-only file; then a check of what the handlers wrote against what the store kept.

    python -m chaos.run --seed 7 --duration 120 --replicas 5

Exits 1 on any duplicate run, any overlap of two runs of one job, or any lost occurrence the
guarantee (docs/guarantee.md) does not allow. Loopback only, bounded in time.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

from chaos.check import Findings, check
from cron_bridge.stores import store_from_url
from tests.e2e.processes import BeatProcess, command_env
from tests.servers import RedisServer

WARM_UP = 8.0  # seconds before the window: every replica up
COOL_DOWN = 6.0  # seconds after the window before the replicas stop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.run", description=__doc__)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--replicas", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=12)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    folder = Path(tempfile.mkdtemp(prefix="cron-bridge-chaos-"))
    journal = folder / "journal.jsonl"
    server = RedisServer(extra=["--appendonly", "yes", "--appendfsync", "always"])
    server.start()
    url = f"{server.url}?prefix=chaos{args.seed}:&connect_timeout=1"
    env = command_env(CHAOS_JOURNAL=str(journal), CHAOS_JOBS=str(args.jobs))
    beats = [BeatProcess(f"beat{i}", folder, env, app="chaos.app", store_url=url)
             for i in range(args.replicas)]  # fmt: skip
    disrupted: set[str] = set()
    killed: dict[str, float] = {}
    print(f"chaos: seed {args.seed}, {args.replicas} replicas, {args.jobs} jobs every second, "
          f"{args.duration:.0f} s; logs in {folder}")  # fmt: skip
    try:
        for beat in beats:
            beat.start()
        time.sleep(WARM_UP)
        start = time.time()
        end = start + args.duration
        while time.time() < end - 5:
            time.sleep(rng.uniform(2.0, 6.0))
            disrupted |= disrupt(rng, beats, server, killed)
        time.sleep(max(0.0, end - time.time()) + COOL_DOWN)
    finally:
        for beat in beats:
            if beat.process is not None and beat.process.poll() is None:
                beat.process.send_signal(signal.SIGCONT)
                beat.terminate()
    store = store_from_url(url)
    try:
        found = check(journal, store, [f"chaos.job{n:02d}" for n in range(args.jobs)], start,
                      end, disrupted=disrupted, killed=killed)  # fmt: skip
    finally:
        store.close()
        server.remove()
    report(found)
    return 0 if found.ok else 1


def disrupt(
    rng: random.Random, beats: list[BeatProcess], server: RedisServer, killed: dict[str, float]
) -> set[str]:
    """One event of the schedule; the replicas it touched (and when the killed ones died)."""
    kind = rng.choice(["kill", "kill", "stop", "stop", "store"])
    beat = rng.choice(beats)
    replica = f"{beat.name}-{beat.starts}"
    if kind == "kill":
        print(f"  {time.strftime('%H:%M:%S')} SIGKILL {replica}, restart in 1-3 s")
        beat.kill_all()
        killed[replica] = time.time()
        time.sleep(rng.uniform(1.0, 3.0))
        beat.start()
        return {replica}
    if kind == "stop":
        pause = rng.uniform(3.0, 10.0)
        print(f"  {time.strftime('%H:%M:%S')} SIGSTOP {replica} for {pause:.1f} s")
        assert beat.process is not None
        os.kill(beat.process.pid, signal.SIGSTOP)
        time.sleep(pause)
        os.kill(beat.process.pid, signal.SIGCONT)
        return {replica}
    down = rng.uniform(2.0, 5.0)
    print(f"  {time.strftime('%H:%M:%S')} store down for {down:.1f} s, back from its AOF")
    server.stop()
    time.sleep(down)
    server.start()
    return set()


def report(found: Findings) -> None:
    print(f"occurrences {found.occurrences}, ran once {found.ran_once}, "
          f"duplicates {len(found.duplicates)}, overlaps {len(found.overlaps)}, "
          f"lost as the guarantee allows {len(found.allowed)}, "
          f"lost otherwise {len(found.not_allowed)}")  # fmt: skip
    kinds: dict[str, int] = {}
    for why in found.allowed.values():
        kind = why.split(":")[0].split(" on ")[0].split(",")[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    for kind, count in sorted(kinds.items()):
        print(f"  allowed: {count} {kind}")
    for occurrence_id, why in list(found.allowed.items())[:: max(1, len(found.allowed) // 8)]:
        print(f"    e.g. {occurrence_id}: {why}")
    for occurrence_id, count in list(found.duplicates.items())[:20]:
        print(f"  DUPLICATE {occurrence_id} ran {count} times")
    for first, second in found.overlaps[:20]:
        print(f"  OVERLAP {first} and {second}")
    for occurrence_id, why in list(found.not_allowed.items())[:20]:
        print(f"  LOST {occurrence_id}: {why}")


if __name__ == "__main__":
    sys.exit(main())
