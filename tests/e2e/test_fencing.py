"""Fencing tokens against a real freeze: a run's process is stopped (SIGSTOP) inside its
handler, its lock runs out, the next run takes the lock and writes; the frozen one is woken
and writes after it, with the pattern of docs/jobs.md (``UPDATE ... WHERE fence < token``),
on a real PostgreSQL: its write is refused and the later run's stays."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cron_bridge import JobContext, declare
from cron_bridge.jobs import Occurrence
from cron_bridge.plumbing.keys import lock_key
from cron_bridge.run.guard import Guard
from cron_bridge.stores import store_from_url
from tests.e2e.processes import command_env
from tests.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

JOB = "ledger.settle"
LOCK_TTL = "2s"

# The run that freezes: its handler notes its token, waits to be let go, then writes as
# docs/jobs.md shows, without looking at ctx.signal first (a freeze between the look and the
# write is what no look can see).
FROZEN = """
import json, sys, time
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from cron_bridge import declare
from cron_bridge.jobs import Occurrence
from cron_bridge.run.guard import Guard
from cron_bridge.stores import store_from_url

store_url, dsn, table, folder = sys.argv[1:5]
folder = Path(folder)


def handler(ctx):
    (folder / "took").write_text(str(ctx.fencing_token))
    while not (folder / "go").exists():
        time.sleep(0.02)
    with psycopg.connect(dsn) as conn:
        updated = conn.execute(
            f"UPDATE {table} SET totals = %s, fence = %s WHERE account = 'acme' AND fence < %s",
            (json.dumps({"by": "frozen"}), ctx.fencing_token, ctx.fencing_token),
        ).rowcount
    (folder / "updated").write_text(str(updated))


job = declare("ledger.settle", every="1m", target="inline", handler=handler, lock_ttl="2s")
at = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
with store_from_url(store_url) as store:
    Guard(store, "frozen").run(job, Occurrence(job=job.name, scheduled_at=at), trigger="schedule")
"""


def test_a_frozen_runs_write_after_the_next_runs_is_refused_by_its_fencing_token(
    postgres_server: Any, tmp_path: Path
) -> None:
    name = uuid.uuid4().hex[:8]
    store_url = f"{postgres_server.url}?schema=t_fence_{name}"
    dsn, table = postgres_server.url, f"ledger_totals_{name}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE {table} (account text PRIMARY KEY, totals text NOT NULL,"
            " fence bigint NOT NULL DEFAULT 0)"
        )
        conn.execute(f"INSERT INTO {table} (account, totals) VALUES ('acme', '{{}}')")
    log = tmp_path / "frozen.log"
    with open(log, "wb") as out:
        frozen = subprocess.Popen(
            [sys.executable, "-c", FROZEN, store_url, dsn, table, str(tmp_path)],
            env=command_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    store = store_from_url(store_url)
    try:
        took = tmp_path / "took"
        wait_for(took.exists, 60, "the frozen run's handler starting")
        frozen_token = int(took.read_text())
        os.kill(frozen.pid, signal.SIGSTOP)
        # Frozen with its heartbeat: the lock runs out in the store.
        wait_for(lambda: store.holder(lock_key(JOB)) is None, 30, "the frozen run's lock expiring")

        written: dict[str, Any] = {}

        def later_run(ctx: JobContext) -> None:
            written["token"] = ctx.fencing_token
            with psycopg.connect(dsn) as conn:
                written["updated"] = conn.execute(
                    f"UPDATE {table} SET totals = %s, fence = %s"
                    " WHERE account = 'acme' AND fence < %s",
                    (json.dumps({"by": "later"}), ctx.fencing_token, ctx.fencing_token),
                ).rowcount

        job = declare(JOB, every="1m", target="inline", handler=later_run, lock_ttl=LOCK_TTL)
        at = datetime(2026, 12, 4, 9, 1, tzinfo=UTC)
        record = Guard(store, "awake").run(
            job, Occurrence(job=JOB, scheduled_at=at), trigger="schedule"
        )
        assert record.outcome == "completed", record
        assert written["updated"] == 1 and written["token"] > frozen_token, written

        (tmp_path / "go").touch()
        os.kill(frozen.pid, signal.SIGCONT)
        updated = tmp_path / "updated"
        wait_for(updated.exists, 60, "the woken run's write")
        assert updated.read_text() == "0"  # refused: its token is the smaller
        with psycopg.connect(dsn) as conn:
            row = conn.execute(f"SELECT totals, fence FROM {table}").fetchone()
        assert row == (json.dumps({"by": "later"}), written["token"])
        assert frozen.wait(30) == 0, log.read_text()
    finally:
        if frozen.poll() is None:
            os.kill(frozen.pid, signal.SIGCONT)
            frozen.kill()
            frozen.wait(10)
        store.close()
