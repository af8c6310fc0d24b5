"""``PostgresStore``: PostgreSQL through psycopg 3 and a connection pool.

Every expiry is computed with the database's ``now()``, so replicas whose clocks disagree
still agree on who holds what. A claim batch is one statement (``INSERT ... ON CONFLICT``
over ``unnest`` arrays). No advisory locks: they break behind a transaction pooler.

Every read takes text columns as bytes (``_fetch``) for ``untrusted.text`` to decode: a
database whose encoding is SQL_ASCII keeps whatever bytes were written, and psycopg hands
them over as bytes there, as text elsewhere. A time a datetime cannot hold (``infinity``, a
year past 9999) is read as None, not raised.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import urlsplit

from cron_bridge import untrusted
from cron_bridge.errors import ConfigError, StoreUnavailable
from cron_bridge.jobs import CLAIM_TTL, Occurrence
from cron_bridge.redaction import redact_url
from cron_bridge.stores.base import (
    CONTROL_KEY_MAX,
    CONTROLS_BYTES,
    CONTROLS_MAX,
    REPLICA_TTL_MAX,
    UNREADABLE,
    ReplicaInfo,
    RunRecord,
    Store,
    control_records,
    last_claimed_times,
    live_replica,
    readable,
    ttl_ms,
)
from cron_bridge.stores.rows import RUN_COLUMNS, record_from_row, record_to_row

try:
    import psycopg
    from psycopg import sql
    from psycopg.adapt import Buffer, Loader
    from psycopg.types.datetime import TimestamptzLoader
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        'the Postgres store needs psycopg 3: pip install "cron-bridge[postgres]"'
    ) from exc

__all__ = ["DDL", "PostgresStore"]

log = logging.getLogger(__name__)

T = TypeVar("T")
_ONE_MS = timedelta(milliseconds=1)
SCHEMA_VERSION = 2  # 2: runs.traceback
CLEANUP_EVERY = 600.0  # seconds between deletions of claims expired over an hour ago

DDL = """
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {meta} (name text PRIMARY KEY, value text NOT NULL);
INSERT INTO {meta} VALUES ('schema_version', '2') ON CONFLICT (name) DO NOTHING;
CREATE TABLE IF NOT EXISTS {claims} (
    key text PRIMARY KEY,
    owner text NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS {claims_expiry} ON {claims} (expires_at);
CREATE TABLE IF NOT EXISTS {last_claimed} (
    job text PRIMARY KEY,
    scheduled_ms bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS {runs} (
    id bigserial PRIMARY KEY,
    job text NOT NULL,
    occurrence_id text NOT NULL,
    outcome text NOT NULL,
    reason text,
    trigger text NOT NULL,
    attempt integer NOT NULL,
    replica text NOT NULL,
    started_at timestamptz NOT NULL,
    duration_ms double precision,
    error text
);
ALTER TABLE {runs} ADD COLUMN IF NOT EXISTS traceback text;
UPDATE {meta} SET value = '2' WHERE name = 'schema_version' AND value = '1';
CREATE INDEX IF NOT EXISTS {runs_job} ON {runs} (job, id);
CREATE TABLE IF NOT EXISTS {replicas} (
    id text PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
ALTER TABLE {replicas} ADD COLUMN IF NOT EXISTS clock_offset_ms double precision;
CREATE TABLE IF NOT EXISTS {controls} (
    grp text NOT NULL,
    key text NOT NULL,
    value text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (grp, key)
);
"""
"""The tables, for teams whose migrations own the schema (``create_tables=False``).

Fill in the names with ``PostgresStore.ddl()`` or by hand: ``{schema}`` is the schema and
every other name is the table prefix (``cron_bridge_`` by default) and the name in braces.
"""

_CLAIM = """
WITH input AS (
    SELECT * FROM unnest(%(keys)s::text[], %(jobs)s::text[], %(ms)s::bigint[])
        AS t(key, job, ms)
), won AS (
    INSERT INTO {claims} (key, owner, expires_at)
    SELECT key, %(owner)s, now() + %(ttl)s * interval '1 millisecond' FROM input ORDER BY key
    ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
    WHERE {claims}.expires_at <= now()
    RETURNING key
), advanced AS (
    INSERT INTO {last_claimed} (job, scheduled_ms)
    SELECT job, max(ms) FROM input GROUP BY job ORDER BY job
    ON CONFLICT (job) DO UPDATE
    SET scheduled_ms = greatest({last_claimed}.scheduled_ms, EXCLUDED.scheduled_ms)
)
SELECT key FROM won
"""

_TAKE = """
INSERT INTO {claims} (key, owner, expires_at)
VALUES (%s, %s, now() + %s * interval '1 millisecond')
ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
WHERE {claims}.expires_at <= now()
RETURNING key
"""

_TRIM = """
DELETE FROM {runs} r USING (
    SELECT id, row_number() OVER (PARTITION BY job ORDER BY id DESC) AS newer
    FROM {runs} WHERE job = ANY(%s)
) ranked
WHERE r.id = ranked.id AND ranked.newer > %s
"""

# A control group within a reader's bounds (base.control_records): the keys of at most
# key_max bytes, each value while it and the values so far stay within their bounds, and how
# many rows there are.
_CONTROLS = """
SELECT key, CASE WHEN size <= %(one_max)s AND used <= %(max_bytes)s THEN value END, total FROM (
    SELECT key, value, octet_length(value) AS size, count(*) OVER () AS total,
        sum(CASE WHEN octet_length(value) <= %(one_max)s THEN octet_length(value) END)
            OVER (ORDER BY key ROWS UNBOUNDED PRECEDING) AS used
    FROM {controls} WHERE grp = %(grp)s AND octet_length(key) <= %(key_max)s
) bounded ORDER BY key LIMIT %(most)s
"""


class _RawText(Loader):
    """A text column as the server sent it: bytes, decoded by ``untrusted.text``."""

    def load(self, data: Buffer) -> bytes:
        return bytes(data)


class _Instant(Loader):
    """A ``timestamptz``, or None for one a datetime cannot hold (``infinity``, year 10000)."""

    def __init__(self, oid: int, context: Any = None) -> None:
        super().__init__(oid, context)
        self._loader = TimestamptzLoader(oid, context)

    def load(self, data: Buffer) -> datetime | None:
        try:
            return self._loader.load(data)
        except psycopg.DataError:
            return None


def _fetch(conn: psycopg.Connection[Any], statement: Any, params: Any = None) -> list[Any]:
    """The rows of a read, text as bytes and times that do not fit as None."""
    cursor = conn.cursor()
    cursor.adapters.register_loader("text", _RawText)
    cursor.adapters.register_loader("timestamptz", _Instant)
    return cursor.execute(statement, params).fetchall()


def _own(raw: Any) -> str:
    """A key or name this store wrote itself, read back (bytes in a SQL_ASCII database)."""
    return bytes(raw).decode() if isinstance(raw, bytes | memoryview) else str(raw)


_RUN_TYPES = (
    "text",
    "text",
    "text",
    "text",
    "text",
    "integer",
    "text",
    "timestamptz",
    "float8",
    "text",
    "text",
)

_TABLES = (
    "meta",
    "claims",
    "claims_expiry",
    "last_claimed",
    "runs",
    "runs_job",
    "replicas",
    "controls",
)


class PostgresStore(Store):
    """A store in PostgreSQL.

    Args:
        client_or_url: a ``postgresql://`` URL, or a ``psycopg_pool.ConnectionPool`` that
            stays open on ``close()``.
        schema: the schema the tables live in (created when missing).
        table_prefix: put before every table name.
        create_tables: create the tables on first use; False when migrations own them.
        connect_timeout: seconds to connect or to wait for a pooled connection.
        history_limit: run records kept per job.
        pool_size: connections in the pool built from a URL.
    """

    def __init__(
        self,
        client_or_url: str | ConnectionPool[Any],
        *,
        schema: str = "public",
        table_prefix: str = "cron_bridge_",
        create_tables: bool = True,
        connect_timeout: float = 5.0,
        history_limit: int = 1000,
        pool_size: int = 4,
    ) -> None:
        super().__init__()
        self.schema = schema
        self.table_prefix = table_prefix
        self._create_tables = create_tables
        self._timeout = connect_timeout
        self.history_limit = history_limit
        self._lock = threading.Lock()
        self._ready = False
        self._run_columns: tuple[str, ...] = RUN_COLUMNS
        self._last_cleanup = 0.0
        if isinstance(client_or_url, str):
            parts = urlsplit(client_or_url)
            if parts.scheme not in ("postgresql", "postgres"):
                raise ConfigError("expected postgresql://", option="store",
                                  value=redact_url(client_or_url))  # fmt: skip
            hosts = parts.netloc.rpartition("@")[2]  # libpq's failover form lists several
            if "," not in hosts:
                hosts = f"{parts.hostname or 'localhost'}:{parts.port or 5432}"
            self._host = hosts
            self._url = parts._replace(netloc=self._host, query="").geturl()
            self._conninfo = client_or_url
            self._connect_seconds = max(1, round(connect_timeout))
            self._pool = ConnectionPool(
                client_or_url,
                min_size=1,
                max_size=pool_size,
                open=False,
                timeout=connect_timeout,
                kwargs={"connect_timeout": self._connect_seconds, "autocommit": True},
                name="cron-bridge",
            )
            self._owned = True
        else:
            self._pool = client_or_url
            self._owned = False
            self._host = "postgres (borrowed pool)"
            self._url = "postgresql://(borrowed pool)"
        names = {name: sql.Identifier(schema, table_prefix + name) for name in _TABLES}
        names["claims_expiry"] = sql.Identifier(table_prefix + "claims_expiry")
        names["runs_job"] = sql.Identifier(table_prefix + "runs_job")
        self._names: dict[str, sql.Composable] = {"schema": sql.Identifier(schema), **names}

    @property
    def url(self) -> str:
        return self._url

    def ddl(self) -> str:
        """The DDL of this store's tables, with its schema and prefix filled in."""
        return sql.SQL(DDL).format(**self._names).as_string(None)

    def _sql(self, text: str) -> sql.Composed:
        return sql.SQL(text).format(**self._names)

    def _open(self) -> None:
        with self._lock:
            if self._ready:
                return
            if self._owned:
                # One direct connection first: its error says why (refused, auth, no such
                # database), where the pool would only say it gave up after its timeout.
                psycopg.connect(self._conninfo, connect_timeout=self._connect_seconds).close()
                self._pool.open(wait=True, timeout=self._timeout)
            if self._create_tables:
                self._create()
            else:
                self._run_columns = self._columns_there()
            self._ready = True

    def _create(self) -> None:
        for tries_left in (2, 1, 0):
            try:
                with self._pool.connection() as conn, conn.transaction():
                    conn.execute(self._sql(DDL))
                return
            except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateObject):
                # Another replica created the same table in the same instant; look again.
                if not tries_left:
                    raise
                time.sleep(0.1)

    def _columns_there(self) -> tuple[str, ...]:
        """``RUN_COLUMNS``, less the newer ones the team's own migrations have not added yet
        (said once: tracebacks are not kept until they add it)."""
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_schema = %s AND table_name = %s",
                (self.schema, self.table_prefix + "runs"),
            ).fetchall()
        there = {_own(row[0]) for row in rows}
        if not there or "traceback" in there:
            return RUN_COLUMNS  # no table at all is the first statement's error to report
        log.warning("%s has no traceback column: failed runs are kept without their "
                    "tracebacks until it has (ALTER TABLE ... ADD COLUMN traceback text, as in "
                    "PostgresStore.ddl())", self.table_prefix + "runs")  # fmt: skip
        return RUN_COLUMNS[:-1]

    def _call(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        try:
            self._open()
            with self._pool.connection() as conn:
                for tries_left in (2, 1, 0):
                    try:
                        with conn.transaction():
                            result = work(conn)
                        break
                    except psycopg.errors.DeadlockDetected:
                        if not tries_left:
                            raise
        except (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout) as exc:
            self._drop_dead_connections()
            first_line = (
                str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            )
            raise StoreUnavailable(f"postgres: {first_line}", host=self._host) from exc
        self.stats.add()
        return result

    def _drop_dead_connections(self) -> None:
        """After a connection error, check the idle ones at once: a restart or
        ``pg_terminate_backend`` kills every pooled connection, and each would otherwise fail
        one call of its own, seconds apart (the pool does not look at them until used)."""
        try:
            self._pool.check()
        except Exception as exc:  # noqa: BLE001 - the call's own error is the one to raise
            log.debug("checking the pooled connections failed: %s", exc)

    def ping(self) -> None:
        self._call(lambda conn: conn.execute("SELECT 1"))

    def claim_many(
        self, occurrences: Sequence[Occurrence], owner: str, *, ttl: timedelta = CLAIM_TTL
    ) -> list[bool]:
        if not occurrences:
            return []
        unique = {o.claim_key: o for o in occurrences}
        params = {
            "keys": list(unique),
            "jobs": [o.job for o in unique.values()],
            "ms": [o.epoch_ms for o in unique.values()],
            "owner": owner,
            "ttl": ttl_ms(ttl),
        }
        won = {
            _own(row[0])
            for row in self._call(lambda conn: conn.execute(self._sql(_CLAIM), params).fetchall())
        }
        self._maybe_clean_up()
        answers, seen = [], set()
        for occurrence in occurrences:
            key = occurrence.claim_key
            answers.append(key in won and key not in seen)
            seen.add(key)
        return answers

    def _maybe_clean_up(self) -> None:
        now = time.monotonic()
        if now - self._last_cleanup < CLEANUP_EVERY:
            return
        self._last_cleanup = now
        try:
            self._call(
                lambda conn: conn.execute(
                    self._sql("DELETE FROM {claims} WHERE expires_at < now() - interval '1 hour'")
                )
            )
        except StoreUnavailable as exc:
            log.warning("could not delete expired claims, will try again: %s", exc)

    def put_control(self, group: str, key: str, value: str | None) -> None:
        if value is None:
            statement = self._sql("DELETE FROM {controls} WHERE grp = %s AND key = %s")
            self._call(lambda conn: conn.execute(statement, (group, key)))
            return
        statement = self._sql(
            "INSERT INTO {controls} (grp, key, value) VALUES (%s, %s, %s) ON CONFLICT (grp, key) "
            "DO UPDATE SET value = excluded.value, updated_at = now()"
        )
        self._call(lambda conn: conn.execute(statement, (group, key, value)))

    def add_control(self, group: str, key: str, value: str) -> bool:
        statement = self._sql(
            "INSERT INTO {controls} (grp, key, value) VALUES (%s, %s, %s) ON CONFLICT (grp, key) "
            "DO NOTHING RETURNING 1"
        )
        rows = self._call(lambda conn: conn.execute(statement, (group, key, value)).fetchall())
        return bool(rows)

    def _channel(self, channel: str) -> str:
        """A NOTIFY channel of this namespace (an identifier of at most 63 bytes)."""
        scope = f"{self.schema}.{self.table_prefix}.{channel}".encode()
        return "cron_bridge_" + hashlib.sha1(scope, usedforsecurity=False).hexdigest()[:24]

    def notify(self, channel: str) -> None:
        name = self._channel(channel)
        self._call(lambda conn: conn.execute("SELECT pg_notify(%s, '')", (name,)))

    def listen(self, channel: str, wake: Callable[[], None]) -> Callable[[], None] | None:
        statement = sql.SQL("LISTEN {}").format(sql.Identifier(self._channel(channel)))
        given = self._pool.conninfo  # a borrowed pool may compute it for each connection
        stop = threading.Event()

        def run() -> None:
            wait = 1.0
            while not stop.is_set():
                try:
                    seconds = max(1, round(self._timeout))
                    conninfo = given() if callable(given) else given
                    with psycopg.connect(
                        conninfo, autocommit=True, connect_timeout=seconds
                    ) as conn:
                        conn.execute(statement)
                        wait = 1.0
                        wake()  # what changed while nobody listened is found by the next look
                        while not stop.is_set():
                            for _ in conn.notifies(timeout=1.0, stop_after=1):
                                wake()
                except Exception as exc:  # noqa: BLE001 - listening is best effort: polling covers it
                    log.debug("listening for %s stopped (%s); again in %.0fs", channel, exc, wait)
                    stop.wait(wait)
                    wait = min(wait * 2, 30.0)

        threading.Thread(target=run, name="cron-bridge-listen", daemon=True).start()
        return stop.set

    def put_controls(self, group: str, values: Mapping[str, str]) -> None:
        if not values:
            return
        statement = self._sql(
            "INSERT INTO {controls} (grp, key, value) VALUES (%s, %s, %s) ON CONFLICT (grp, key) "
            "DO UPDATE SET value = excluded.value, updated_at = now()"
        )
        rows = [(group, key, value) for key, value in values.items()]
        self._call(lambda conn: conn.cursor().executemany(statement, rows))

    def controls(
        self, group: str, *, most: int = CONTROLS_MAX, max_bytes: int = CONTROLS_BYTES
    ) -> dict[str, str]:
        bounds = {
            "grp": group,
            "key_max": CONTROL_KEY_MAX,
            "one_max": untrusted.MAX_BYTES,
            "max_bytes": max_bytes,
            "most": most,
        }
        statement = self._sql(_CONTROLS)
        rows = self._call(lambda conn: _fetch(conn, statement, bounds))
        total = rows[0][2] if rows else 0
        pairs = ((key, value) for key, value, _ in rows)
        return control_records(pairs, group, most=most, max_bytes=max_bytes, total=total)

    def control(self, group: str, key: str) -> str | None:
        statement = self._sql("SELECT value FROM {controls} WHERE grp = %s AND key = %s")
        rows = self._call(lambda conn: _fetch(conn, statement, (group, key)))
        if not rows:
            return None
        found = untrusted.text(rows[0][0], f"controls:{group}", key)
        return UNREADABLE if found is None else found

    def holder(self, key: str) -> str | None:
        statement = self._sql("SELECT owner FROM {claims} WHERE key = %s AND expires_at > now()")
        rows = self._call(lambda conn: _fetch(conn, statement, (key,)))
        return untrusted.text(rows[0][0], "claims and locks", key) if rows else None

    def claimed_by_many(self, occurrences: Sequence[Occurrence]) -> list[str | None]:
        if not occurrences:
            return []
        keys = [occurrence.claim_key for occurrence in occurrences]
        statement = self._sql(
            "SELECT key, owner FROM {claims} WHERE key = ANY(%s) AND expires_at > now()"
        )
        rows = self._call(lambda conn: _fetch(conn, statement, (keys,)))
        owners = {_own(key): owner for key, owner in rows}  # the keys asked for
        return [
            None if key not in owners else untrusted.text(owners[key], "claims", key)
            for key in keys
        ]

    def last_claimed(self, jobs: Sequence[str]) -> dict[str, datetime]:
        if not jobs:
            return {}
        statement = self._sql("SELECT job, scheduled_ms FROM {last_claimed} WHERE job = ANY(%s)")
        rows = self._call(lambda conn: _fetch(conn, statement, (list(jobs),)))
        return last_claimed_times(((_own(job), ms) for job, ms in rows), "last claimed")

    def acquire(self, key: str, owner: str, ttl: timedelta) -> bool:
        return bool(
            self._call(
                lambda conn: conn.execute(self._sql(_TAKE), (key, owner, ttl_ms(ttl))).fetchall()
            )
        )

    def extend(self, key: str, owner: str, ttl: timedelta) -> bool:
        statement = self._sql(
            "UPDATE {claims} SET expires_at = now() + %s * interval '1 millisecond'"
            " WHERE key = %s AND owner = %s AND expires_at > now()"
        )
        return (
            self._call(lambda conn: conn.execute(statement, (ttl_ms(ttl), key, owner)).rowcount)
            == 1
        )

    def release(self, key: str, owner: str) -> bool:
        statement = self._sql(
            "DELETE FROM {claims} WHERE key = %s AND owner = %s RETURNING expires_at > now()"
        )
        rows = self._call(lambda conn: conn.execute(statement, (key, owner)).fetchall())
        return rows == [(True,)]

    def record_many(self, records: Sequence[RunRecord]) -> None:
        if not records:
            return
        rows = [record_to_row(r, text_times=False) for r in records]
        jobs = sorted({r.job for r in records})

        def work(conn: psycopg.Connection[Any]) -> None:
            there = self._run_columns  # known once _call has opened the store
            statement = sql.SQL("INSERT INTO {runs} ({columns}) SELECT * FROM unnest({arrays})")
            conn.execute(
                statement.format(
                    runs=self._names["runs"],
                    columns=sql.SQL(", ").join(map(sql.Identifier, there)),
                    arrays=sql.SQL(", ").join(
                        sql.SQL(f"%s::{kind}[]") for kind in _RUN_TYPES[: len(there)]
                    ),
                ),
                [list(column) for column in zip(*rows, strict=True)][: len(there)],
            )
            conn.execute(self._sql(_TRIM), (jobs, self.history_limit))

        self._call(work)

    def history(self, job: str, n: int = 20) -> list[RunRecord]:
        def work(conn: psycopg.Connection[Any]) -> tuple[tuple[str, ...], list[Any]]:
            there = self._run_columns
            statement = sql.SQL(
                "SELECT {columns} FROM {runs} WHERE job = %s ORDER BY id DESC LIMIT %s"
            ).format(columns=sql.SQL(", ").join(map(sql.Identifier, there)),
                     runs=self._names["runs"])  # fmt: skip
            return there, _fetch(conn, statement, (job, n))

        there, rows = self._call(work)
        return readable((tuple(row) for row in rows), lambda row: record_from_row(row, there),
                        f"runs of {job}")  # fmt: skip

    def heartbeat(
        self, replica: str, ttl: timedelta, *, clock_offset_ms: float | None = None
    ) -> datetime | None:
        statement = self._sql(
            "INSERT INTO {replicas} (id, expires_at, clock_offset_ms) VALUES (%s, now() + %s *"
            " interval '1 millisecond', %s) ON CONFLICT (id) DO UPDATE SET expires_at ="
            " EXCLUDED.expires_at, clock_offset_ms = EXCLUDED.clock_offset_ms"
            " RETURNING clock_timestamp()"
        )
        rows = self._call(
            lambda conn: conn.execute(statement, (replica, ttl_ms(ttl), clock_offset_ms)).fetchall()
        )
        server: datetime = rows[0][0]
        return server

    def replicas(self) -> list[ReplicaInfo]:
        statement = self._sql(
            "SELECT id, extract(epoch FROM expires_at) * 1000,"
            " extract(epoch FROM clock_timestamp()) * 1000, clock_offset_ms FROM {replicas}"
            " WHERE expires_at > now() AND expires_at <= now() + %s * interval '1 millisecond'"
            " ORDER BY id"
        )
        rows = self._call(lambda conn: _fetch(conn, statement, (ttl_ms(REPLICA_TTL_MAX),)))
        found = [
            live_replica(rid, expires, float(now), offset) for rid, expires, now, offset in rows
        ]
        return [info for info in found if info is not None]

    def close(self) -> None:
        with self._lock:
            if self._owned:
                self._pool.close()
            self._ready = False
