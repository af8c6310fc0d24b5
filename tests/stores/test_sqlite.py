"""SQLite: processes on one host opening the same new file at the same moment."""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cron_bridge.jobs import Occurrence
from cron_bridge.stores import RunRecord, SQLiteStore


def test_sixteen_stores_opening_one_new_file_at_once_all_answer(tmp_path: Path) -> None:
    """Switching a new file to WAL does not wait for SQLite's busy handler: without asking
    again, some of 16 stores opened at once failed with "database is locked" (9 rounds in
    150 before the fix). 40 rounds: every store answers and exactly one claim wins."""
    occurrence = Occurrence(job="j", scheduled_at=datetime(2026, 1, 1, tzinfo=UTC))
    for round_ in range(40):
        stores = [SQLiteStore(tmp_path / f"round{round_}.db") for _ in range(16)]
        barrier = threading.Barrier(16)
        won: list[bool] = []
        errors: list[Exception] = []

        def claim(
            store: SQLiteStore,
            barrier: threading.Barrier,
            won: list[bool],
            errors: list[Exception],
        ) -> None:
            barrier.wait()
            try:
                won.append(store.claim(occurrence, "someone"))
            except Exception as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=claim, args=(store, barrier, won, errors)) for store in stores
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        for store in stores:
            store.close()
        assert errors == [], (round_, errors[:1])
        assert won.count(True) == 1, round_


def test_a_file_made_before_tracebacks_were_kept_is_brought_up_to_date(tmp_path: Path) -> None:
    """A store file of schema 1 (runs without a traceback column, one record in it) gets the
    column when opened; the old record reads back and a new one keeps its traceback."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.executescript("""
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('schema_version', '1');
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, occurrence_id TEXT NOT NULL,
    outcome TEXT NOT NULL, reason TEXT, trigger TEXT NOT NULL, attempt INTEGER NOT NULL,
    replica TEXT NOT NULL, started_at TEXT NOT NULL, duration_ms REAL, error TEXT);
INSERT INTO runs (job, occurrence_id, outcome, trigger, attempt, replica, started_at, error)
VALUES ('j', 'j@2026-01-01T00:00:00Z', 'failed', 'schedule', 1, 'r1',
        '2026-01-01T00:00:00+00:00', 'ValueError: old');
""")
    conn.close()
    store = SQLiteStore(path)
    (old,) = store.history("j")
    assert (old.error, old.traceback) == ("ValueError: old", None)
    at = datetime(2026, 1, 1, 0, 1, tzinfo=UTC)
    store.record(
        RunRecord(
            job="j",
            occurrence_id="j@2026-01-01T00:01:00Z",
            outcome="failed",
            trigger="schedule",
            replica="r1",
            started_at=at,
            error="ValueError: new",
            traceback="Traceback ...\nValueError: new",
        )
    )
    assert [r.traceback for r in store.history("j")] == ["Traceback ...\nValueError: new", None]
    store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone() == (
            "2",
        )
    conn.close()


def test_pending_rows_another_program_wrote_are_dropped_not_taken_for_ever(
    tmp_path: Path,
) -> None:
    """A pending row whose key is a BLOB (matched by nothing that names it as text) and a
    thousand whose keys are not UTF-8 ran out long ago: a takeover drops them, never takes
    them again, and still takes the real one behind them."""
    path = tmp_path / "pending.db"
    store = SQLiteStore(path)
    real = Occurrence(job="real.job", scheduled_at=datetime(2026, 1, 1, tzinfo=UTC))
    assert store.claim_many([real], "dead", pending=[True], lease=timedelta(0))
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO pending VALUES (CAST(? AS BLOB), 'dead', 0, 0)",
            ("occ:blob.job:1767225600000",),
        )
        conn.executemany(
            "INSERT INTO pending VALUES (CAST(? AS TEXT), 'dead', 0, 0)",
            [(b"occ:bad:\xff" + str(n).encode(),) for n in range(1000)],
        )
    taken = store.take_over("taker", most=1000)
    assert taken == []  # the oldest thousand were all unreadable: dropped
    assert store.take_over("taker", most=1000) == [(real.claim_key, "dead")]
    assert store.take_over("taker", most=1000) == []
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM pending").fetchone() == (1,)
