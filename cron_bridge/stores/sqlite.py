"""``SQLiteStore``: one file shared by the processes of one host.

WAL lets readers go on while one writer holds the file; every claim batch is one
``BEGIN IMMEDIATE`` transaction, so two processes never both win a key. Expiry reads this
host's clock, which every process on the host shares.

Text is read as bytes (``text_factory``) and decoded by ``inbound.text``: SQLite keeps
whatever bytes another program stored as text, and its own decoding fails the whole query.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar

from cron_bridge.clock import Clock, SystemClock
from cron_bridge.errors import FenceUnreadable, StoreUnavailable
from cron_bridge.jobs import CLAIM_TTL, Occurrence
from cron_bridge.plumbing import inbound
from cron_bridge.schedules import EPOCH
from cron_bridge.stores import run_summary
from cron_bridge.stores.base import PENDING_LEASE, TAKE_OVER_MOST, Store, ttl_ms
from cron_bridge.stores.records import (
    REPLICA_TTL_MAX,
    ReplicaInfo,
    RunRecord,
    last_claimed_times,
    live_replica,
    readable,
)
from cron_bridge.stores.rows import RUN_COLUMNS, record_from_row, record_to_row
from cron_bridge.stores.sqlite_controls import SQLiteControls, raise_on

__all__ = ["SQLiteStore"]

log = logging.getLogger(__name__)
T = TypeVar("T")
_ONE_MS = timedelta(milliseconds=1)
_PARAMETERS = 500  # bound parameters per statement (SQLite before 3.32 allows 999)

SCHEMA_VERSION = 2  # 2: runs.traceback
_DDL = f"""
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT OR IGNORE INTO meta VALUES ('schema_version', '{SCHEMA_VERSION}');
CREATE TABLE IF NOT EXISTS claims (
    key TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS last_claimed (job TEXT PRIMARY KEY, scheduled_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, occurrence_id TEXT NOT NULL,
    outcome TEXT NOT NULL, reason TEXT, trigger TEXT NOT NULL, attempt INTEGER NOT NULL,
    replica TEXT NOT NULL, started_at TEXT NOT NULL, duration_ms REAL, error TEXT,
    traceback TEXT);
CREATE INDEX IF NOT EXISTS runs_job_id ON runs (job, id);
CREATE TABLE IF NOT EXISTS replicas (id TEXT PRIMARY KEY, expires_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS controls (
    grp TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (grp, key));
CREATE TABLE IF NOT EXISTS fences (key TEXT PRIMARY KEY, token INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS pending (
    key TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_ms INTEGER NOT NULL,
    settled INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS pending_expires ON pending (expires_ms);
"""

# A control group within a reader's bounds (records.control_records): the keys of at most
# :key_max bytes, each value while it and the values so far stay within their bounds, and how
# many rows there are.
_TAKE = """
INSERT INTO claims (key, owner, expires_ms) VALUES (?, ?, ?)
ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, expires_ms = excluded.expires_ms
WHERE claims.expires_ms <= ?
RETURNING key
"""

# The next fencing token of a lock just taken, in the transaction that took it.
_FENCE = """
INSERT INTO fences (key, token) VALUES (?, 1)
ON CONFLICT (key) DO UPDATE SET token = fences.token + 1
WHERE typeof(fences.token) = 'integer' AND fences.token BETWEEN 1 AND 9223372036854775806
RETURNING token
"""


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring a file made by an earlier version up to ``SCHEMA_VERSION``, in one transaction
    (the replicas opening it at once: the first adds the column, the others see it)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        columns = {bytes(row[1]).decode() for row in conn.execute("PRAGMA table_info(runs)")}
        if "traceback" not in columns:
            conn.execute("ALTER TABLE runs ADD COLUMN traceback TEXT")
        conn.execute(
            "UPDATE meta SET value = ? WHERE name = 'schema_version' AND value < ?",
            (str(SCHEMA_VERSION), str(SCHEMA_VERSION)),
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


class SQLiteStore(SQLiteControls, Store):
    """A store in one SQLite file.

    Args:
        path: the database file (created with its tables when missing).
        clock: where expiry reads the time.
        connect_timeout: seconds a writer waits for the file lock before giving up.
        history_limit: run records kept per job.
    """

    distributed = False
    atomic_batches = True

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Clock | None = None,
        connect_timeout: float = 5.0,
        history_limit: int = 1000,
    ) -> None:
        super().__init__()
        self.path = str(path)
        self._clock = clock or SystemClock()
        self._timeout = connect_timeout
        self.history_limit = history_limit
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    @property
    def url(self) -> str:
        return f"sqlite:///{self.path}"

    def _now_ms(self) -> int:
        return (self._clock.now() - EPOCH) // _ONE_MS

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(
                self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False
            )
            conn.text_factory = bytes  # decoded by inbound.text, never by sqlite3
            conn.execute(f"PRAGMA busy_timeout={int(self._timeout * 1000)}")
            # Switching a new file to WAL takes an exclusive lock without waiting for it (SQLite
            # skips the busy handler there), so processes opening the same new file at once
            # (replicas starting together) ask again until the timeout.
            deadline = time.monotonic() + self._timeout
            while True:
                try:
                    conn.execute("PRAGMA journal_mode=WAL")
                    conn.execute("PRAGMA synchronous=NORMAL")
                    conn.executescript(_DDL)
                    _migrate(conn)
                    break
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) or time.monotonic() > deadline:
                        conn.close()
                        raise
                    time.sleep(0.02)
            self._conn = conn
        return self._conn

    @contextmanager
    def _transaction(self, *, write: bool = True) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                conn = self._connect()
                self.stats.add()
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    yield conn
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                raise StoreUnavailable(f"sqlite: {exc}", host=self.path) from exc

    def _run(self, work: Callable[[sqlite3.Connection], T], *, write: bool = True) -> T:
        with self._transaction(write=write) as conn:
            return work(conn)

    def ping(self) -> None:
        self._run(lambda conn: conn.execute("SELECT 1").fetchone(), write=False)

    def claim_many(
        self,
        occurrences: Sequence[Occurrence],
        owner: str,
        *,
        ttl: timedelta = CLAIM_TTL,
        pending: Sequence[bool] | None = None,
        lease: timedelta = PENDING_LEASE,
    ) -> list[bool]:
        now = self._now_ms()
        expires = now + ttl_ms(ttl)
        keys = list(dict.fromkeys(o.claim_key for o in occurrences))
        flagged = {o.claim_key for o, flag in zip(occurrences, pending or (), strict=False) if flag}
        latest: dict[str, int] = {}
        for occurrence in occurrences:
            latest[occurrence.job] = max(latest.get(occurrence.job, 0), occurrence.epoch_ms)

        def work(conn: sqlite3.Connection) -> set[str]:
            won = {
                bytes(row[0]).decode()  # a key this call wrote
                for key in keys
                for row in conn.execute(_TAKE, (key, owner, expires, now)).fetchall()
            }
            conn.executemany(
                "INSERT INTO last_claimed VALUES (?, ?) ON CONFLICT (job) DO UPDATE"
                " SET scheduled_ms = max(scheduled_ms, excluded.scheduled_ms)",
                sorted(latest.items()),
            )
            conn.executemany(
                "INSERT OR REPLACE INTO pending VALUES (?, ?, ?, 0)",
                [(key, owner, now + ttl_ms(lease)) for key in sorted(won & flagged)],
            )
            return won

        won = self._run(work)
        # A key listed twice in one call is won once: by its first mention.
        first: set[str] = set()
        answers = []
        for occurrence in occurrences:
            key = occurrence.claim_key
            answers.append(key in won and key not in first)
            first.add(key)
        return answers

    def settle_many(
        self, occurrences: Sequence[Occurrence], owner: str, *, keep: timedelta | None = None
    ) -> list[bool]:
        keys = list(dict.fromkeys(o.claim_key for o in occurrences))
        now = self._now_ms()
        if keep is None:  # a marker of who settled it, kept as long as the claim
            statement = "UPDATE pending SET settled = 1, expires_ms = ?"
            until = now + ttl_ms(CLAIM_TTL)
        else:
            statement = "UPDATE pending SET expires_ms = ?"
            until = now + ttl_ms(keep)

        def work(conn: sqlite3.Connection) -> set[str]:
            others = set()
            for key in keys:
                row = conn.execute("SELECT owner FROM pending WHERE key = ?", (key,)).fetchone()
                if row is not None and inbound.text(row[0], "pending", key) != owner:
                    others.add(key)  # another replica's (or unreadable: not this one's)
            conn.executemany(
                statement + " WHERE key = ? AND owner = ? AND settled = 0",
                [(until, key, owner) for key in keys if key not in others],
            )
            return others

        others = self._run(work) if keys else set()
        return self._first_of(occurrences, others, held=False)

    def take_over(
        self, owner: str, *, lease: timedelta = PENDING_LEASE, most: int = TAKE_OVER_MOST
    ) -> list[tuple[str, str]]:
        now = self._now_ms()

        def work(conn: sqlite3.Connection) -> list[tuple[str, str]]:
            conn.execute("DELETE FROM pending WHERE settled != 0 AND expires_ms <= ?", (now,))
            # By rowid: a row another program wrote with a key of another type (a BLOB) is
            # matched by nothing that names it as text.
            ran_out = conn.execute(
                "SELECT rowid, key, owner, typeof(key) = 'text' AND typeof(owner) = 'text'"
                " FROM pending WHERE settled = 0 AND expires_ms <= ? ORDER BY expires_ms LIMIT ?",
                (now, most),
            ).fetchall()
            taken, rows, bad = [], [], []
            for rowid, raw_key, raw_owner, texts in ran_out:
                key = inbound.text(raw_key, "pending", raw_key) if texts else None
                held = inbound.text(raw_owner, "pending", raw_key) if texts else None
                if key is None or held is None:
                    bad.append((rowid,))  # dropped, never taken again
                else:
                    taken.append((key, held))
                    rows.append((owner, now + ttl_ms(lease), rowid))
            odd = sum(1 for *_, texts in ran_out if not texts)  # the others were warned of
            if odd:
                log.warning("dropped %d pending send(s) whose key or owner is not text", odd)
            conn.executemany("DELETE FROM pending WHERE rowid = ?", bad)
            conn.executemany("UPDATE pending SET owner = ?, expires_ms = ? WHERE rowid = ?", rows)
            return taken

        # Read first, without the write lock: most looks find nothing, and every replica looks
        # at every tick.
        due = self._run(
            lambda conn: conn.execute(
                "SELECT 1 FROM pending WHERE expires_ms <= ? LIMIT 1", (now,)
            ).fetchone(),
            write=False,
        )
        if due is None:
            return []
        return self._run(work)  # one write transaction: no other taker sees them meanwhile

    def holder(self, key: str) -> str | None:
        now = self._now_ms()
        rows = self._run(
            lambda conn: conn.execute(
                "SELECT owner FROM claims WHERE key = ? AND expires_ms > ?",
                (key, now),
            ).fetchall(),
            write=False,
        )
        return inbound.text(rows[0][0], "claims and locks", key) if rows else None

    def holders(self, keys: Sequence[str]) -> list[str | None]:
        keys = list(keys)
        now = self._now_ms()

        def work(conn: sqlite3.Connection) -> dict[str, str | None]:
            owners: dict[str, str | None] = {}
            for start in range(0, len(keys), _PARAMETERS):
                part = keys[start : start + _PARAMETERS]
                rows = conn.execute(
                    f"SELECT key, owner FROM claims WHERE key IN ({','.join('?' * len(part))})"
                    " AND expires_ms > ?",
                    [*part, now],
                ).fetchall()
                for key, owner in rows:
                    name = bytes(key).decode()  # one of the keys asked for
                    owners[name] = inbound.text(owner, "claims and locks", name)
            return owners

        owners = self._run(work, write=False) if keys else {}
        return [owners.get(key) for key in keys]

    def latest_runs(self, jobs: Sequence[str]) -> dict[str, RunRecord]:
        wanted = list(dict.fromkeys(jobs))

        def work(conn: sqlite3.Connection) -> list[tuple[object, ...]]:
            rows: list[tuple[object, ...]] = []
            for start in range(0, len(wanted), _PARAMETERS):  # each job's newest, by the index
                part = wanted[start : start + _PARAMETERS]
                rows += conn.execute(
                    f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE id IN (SELECT MAX(id)"
                    f" FROM runs WHERE job IN ({','.join('?' * len(part))}) GROUP BY job)",
                    part,
                ).fetchall()
            return rows

        found = readable(self._run(work, write=False) if wanted else [], record_from_row, "runs")
        return {record.job: record for record in found}

    def last_claimed(self, jobs: Sequence[str]) -> dict[str, datetime]:
        def work(conn: sqlite3.Connection) -> dict[str, datetime]:
            marks = ",".join("?" * len(jobs))
            rows = conn.execute(
                f"SELECT job, scheduled_ms FROM last_claimed WHERE job IN ({marks})", list(jobs)
            ).fetchall()
            pairs = ((bytes(job).decode(), ms) for job, ms in rows)  # the jobs asked for
            return last_claimed_times(pairs, "last claimed")

        return self._run(work, write=False) if jobs else {}

    def acquire(self, key: str, owner: str, ttl: timedelta) -> bool:
        now = self._now_ms()
        return self._run(
            lambda conn: bool(conn.execute(_TAKE, (key, owner, now + ttl_ms(ttl), now)).fetchall())
        )

    def acquire_fenced(self, key: str, owner: str, ttl: timedelta) -> int | None:
        now = self._now_ms()

        def work(conn: sqlite3.Connection) -> int | None:
            if not conn.execute(_TAKE, (key, owner, now + ttl_ms(ttl), now)).fetchall():
                return None
            row = conn.execute(_FENCE, (key,)).fetchone()
            if row is None:  # raised inside the transaction: the lock is not taken either
                (found,) = conn.execute(
                    "SELECT typeof(token) FROM fences WHERE key = ?", (key,)
                ).fetchone()
                raise FenceUnreadable(
                    key, f"a value of type {bytes(found).decode()!r} or at its end"
                )
            return int(row[0])

        return self._run(work)

    def extend(self, key: str, owner: str, ttl: timedelta) -> bool:
        now = self._now_ms()
        return self._run(
            lambda conn: (
                conn.execute(
                    "UPDATE claims SET expires_ms = ?"
                    " WHERE key = ? AND owner = ? AND expires_ms > ?",
                    (now + ttl_ms(ttl), key, owner, now),
                ).rowcount
                == 1
            )
        )

    def release(self, key: str, owner: str) -> bool:
        now = self._now_ms()
        return self._run(
            lambda conn: (
                conn.execute(
                    "DELETE FROM claims WHERE key = ? AND owner = ? RETURNING expires_ms > ?",
                    (key, owner, now),
                ).fetchall()
                == [(1,)]
            )
        )

    def record_many(self, records: Sequence[RunRecord]) -> None:
        if not records:
            return
        columns = ", ".join(RUN_COLUMNS)
        marks = ", ".join("?" * len(RUN_COLUMNS))

        def work(conn: sqlite3.Connection) -> None:
            conn.executemany(
                f"INSERT INTO runs ({columns}) VALUES ({marks})",
                [record_to_row(r) for r in records],
            )
            for job in sorted({r.job for r in records}):
                conn.execute(
                    "DELETE FROM runs WHERE job = ? AND id <= (SELECT id FROM runs WHERE job = ?"
                    " ORDER BY id DESC LIMIT 1 OFFSET ?)",
                    (job, job, self.history_limit),
                )
            for group, entries in found.items():
                raise_on(conn, group, entries, ceiling_ms)

        found = run_summary.summaries(records)
        ceiling_ms = run_summary.ceiling(self._clock.now())
        self._run(work)

    def history(self, job: str, n: int = 20) -> list[RunRecord]:
        rows = self._run(
            lambda conn: conn.execute(
                f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE job = ? ORDER BY id DESC LIMIT ?",
                (job, n),
            ).fetchall(),
            write=False,
        )
        return readable(rows, record_from_row, f"runs of {job}")

    def heartbeat(
        self, replica: str, ttl: timedelta, *, clock_offset_ms: float | None = None
    ) -> datetime | None:
        now = self._now_ms()
        expires = now + ttl_ms(ttl)

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO replicas VALUES (?, ?) ON CONFLICT (id) DO UPDATE"
                " SET expires_ms = excluded.expires_ms",
                (replica, expires),
            )
            # A row no beat wrote (text, or life past the longest heartbeat) never ages out.
            conn.execute(
                "DELETE FROM replicas WHERE typeof(expires_ms) NOT IN ('integer', 'real')"
                " OR expires_ms > ?",
                (now + ttl_ms(REPLICA_TTL_MAX),),
            )

        self._run(work)
        return None  # processes on this host share its clock

    def replicas(self) -> list[ReplicaInfo]:
        now = self._now_ms()
        rows = self._run(
            lambda conn: conn.execute(
                "SELECT id, expires_ms FROM replicas WHERE expires_ms > ? ORDER BY id", (now,)
            ).fetchall(),
            write=False,
        )
        found = [live_replica(rid, ms, now) for rid, ms in rows]
        return [info for info in found if info is not None]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
