"""A real beat whose pings go to a peer that trickles its answer one byte a second: its
jobs still run every second, pinged or not, and SIGTERM ends it within its shutdown timeout
plus a few seconds (before the fix, 8 such jobs filled the dispatch pool and the beat never
exited)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cron_bridge.stores import store_from_url
from tests.e2e.processes import BeatProcess, command_env, wait_for
from tests.peers import trickling

pytestmark = pytest.mark.slow

SHUTDOWN = 3.0


def test_a_trickling_ping_peer_holds_up_no_job_and_no_exit(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    with trickling(every=1.0) as peer:
        env = command_env(tmp_path / "journal.jsonl", CB_TEST_PING_URL=f"{peer.url}/ping/x")
        beat = BeatProcess(
            name="slow",
            folder=tmp_path,
            env=env,
            app="tests.apps.slow_pings",
            store_url=store_url,
            extra=["--shutdown-timeout", f"{SHUTDOWN:g}s"],
        )
        beat.start()
        try:
            store = store_from_url(store_url)
            try:
                began = time.monotonic()
                # 8 s of runs: each job every second, however long its pings take.
                wait_for(lambda: len(store.history("plain.job", 100)) >= 8, 60, "8 plain runs")
                wait_for(
                    lambda: all(len(store.history(f"pinged.{n}", 100)) >= 8 for n in range(8)),
                    30,
                    "8 runs of each pinged job",
                )
                elapsed = time.monotonic() - began
                plain = store.history("plain.job", 100)
                pinged = [r for n in range(8) for r in store.history(f"pinged.{n}", 100)]
            finally:
                store.close()
            assert len(peer.heads) >= 8, "the pings reached the peer"
            took = beat.terminate()
        finally:
            beat.ensure_stopped()
    assert {record.outcome for record in plain + pinged} == {"completed"}, beat.output()
    assert elapsed < 30, f"8 runs of each job took {elapsed:.1f}s"
    assert took < SHUTDOWN + 5, f"SIGTERM took {took:.1f}s to end the beat"
