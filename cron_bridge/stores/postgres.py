"""``PostgresStore``: PostgreSQL through psycopg 3 and a connection pool.

Every expiry is computed with the database's ``now()``, so replicas whose clocks disagree
still agree on who holds what. A claim batch is one statement (``INSERT ... ON CONFLICT``
over ``unnest`` arrays). No advisory locks: they break behind a transaction pooler.

The schema, the statements and how their rows are read (text as bytes, for
``inbound.text`` to decode) are in ``postgres_sql``.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import urlsplit

from cron_bridge.errors import ConfigError, FenceUnreadable, StoreUnavailable
from cron_bridge.jobs import CLAIM_TTL, Occurrence
from cron_bridge.plumbing import inbound
from cron_bridge.plumbing.redaction import redact_url
from cron_bridge.stores import run_summary
from cron_bridge.stores.base import PENDING_LEASE, TAKE_OVER_MOST, Store, ttl_ms
from cron_bridge.stores.postgres_controls import PostgresControls
from cron_bridge.stores.postgres_sql import (
    CLAIM,
    CLAIM_PENDING,
    DDL,
    RUN_TYPES,
    SETTLE,
    TAKE,
    TAKE_FENCED,
    TAKE_OVER,
    TRIM,
    fetch,
    own,
    table_names,
)
from cron_bridge.stores.records import (
    REPLICA_TTL_MAX,
    ReplicaInfo,
    RunRecord,
    last_claimed_times,
    live_replica,
    readable,
)
from cron_bridge.stores.rows import RUN_COLUMNS, record_from_row, record_to_row

try:
    import psycopg
    from psycopg import sql
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        'the Postgres store needs psycopg 3: pip install "cron-bridge[postgres]"'
    ) from exc

__all__ = ["DDL", "PostgresStore"]

log = logging.getLogger(__name__)

T = TypeVar("T")
_ONE_MS = timedelta(milliseconds=1)
CLEANUP_EVERY = 600.0  # seconds between deletions of claims expired over an hour ago


class PostgresStore(PostgresControls, Store):
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

    atomic_batches = True  # one transaction

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
        self._fenced = True  # False on a schema whose migrations have no fences table yet
        self._pending = True  # False on one whose migrations have no pending table yet
        self._run_columns: tuple[str, ...] = RUN_COLUMNS
        self._last_cleanup = 0.0
        if isinstance(client_or_url, str):
            parts = urlsplit(client_or_url)
            if parts.scheme not in ("postgresql", "postgres"):
                raise ConfigError(
                    "expected postgresql://", option="store", value=redact_url(client_or_url)
                )
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
        self._names = table_names(schema, table_prefix)

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
                self._fenced, self._pending = self._tables_there()
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
        there = {own(row[0]) for row in rows}
        if not there or "traceback" in there:
            return RUN_COLUMNS  # no table at all is the first statement's error to report
        log.warning(
            "%s has no traceback column: failed runs are kept without their "
            "tracebacks until it has (ALTER TABLE ... ADD COLUMN traceback text, as in "
            "PostgresStore.ddl())",
            self.table_prefix + "runs",
        )
        return RUN_COLUMNS[:-1]

    def _tables_there(self) -> tuple[bool, bool]:
        """Whether the team's own migrations have added the fences and the pending tables
        (said once for each that is missing: overlap locks are taken without fencing tokens,
        and claims are not left pending their send, until it is there)."""
        names = [self.table_prefix + name for name in ("fences", "pending", "claims")]
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = %s AND table_name = ANY(%s)",
                (self.schema, names),
            ).fetchall()
        there = {own(row[0]) for row in rows}
        if names[2] not in there:
            return True, True  # no tables at all: the first statement's error to report
        if names[0] not in there:
            log.warning(
                "%s is missing: overlap locks are taken without fencing tokens "
                "(ctx.fencing_token is None) until it is there (CREATE TABLE ..., as in "
                "PostgresStore.ddl())",
                names[0],
            )
        if names[1] not in there:
            log.warning(
                "%s is missing: a claim whose replica dies before it sends it is not taken "
                "over until it is there (CREATE TABLE ..., as in PostgresStore.ddl())",
                names[1],
            )
        return names[0] in there, names[1] in there

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
        self,
        occurrences: Sequence[Occurrence],
        owner: str,
        *,
        ttl: timedelta = CLAIM_TTL,
        pending: Sequence[bool] | None = None,
        lease: timedelta = PENDING_LEASE,
    ) -> list[bool]:
        if not occurrences:
            return []
        unique = {o.claim_key: o for o in occurrences}
        flagged = sorted(
            {o.claim_key for o, flag in zip(occurrences, pending or (), strict=False) if flag}
        )
        params = {
            "keys": list(unique),
            "jobs": [o.job for o in unique.values()],
            "ms": [o.epoch_ms for o in unique.values()],
            "owner": owner,
            "ttl": ttl_ms(ttl),
            "pending": flagged,
            "lease": ttl_ms(lease),
        }

        def work(conn: psycopg.Connection[Any]) -> list[Any]:
            # Opened by now: whether the pending table is there is known.
            statement = CLAIM_PENDING if flagged and self._pending else CLAIM
            return conn.execute(self._sql(statement), params).fetchall()

        won = {own(row[0]) for row in self._call(work)}
        self._maybe_clean_up()
        answers, seen = [], set()
        for occurrence in occurrences:
            key = occurrence.claim_key
            answers.append(key in won and key not in seen)
            seen.add(key)
        return answers

    def settle_many(
        self, occurrences: Sequence[Occurrence], owner: str, *, keep: timedelta | None = None
    ) -> list[bool]:
        keys = sorted({o.claim_key for o in occurrences})
        if not keys:
            return []
        params = {
            "keys": keys,
            "owner": owner,
            "settle": keep is None,
            "ms": ttl_ms(CLAIM_TTL if keep is None else keep),
        }

        def work(conn: psycopg.Connection[Any]) -> list[Any]:
            if not self._pending:
                return []  # none is pending: each the caller's
            return conn.execute(self._sql(SETTLE), params).fetchall()

        others = {own(row[0]) for row in self._call(work)}
        return self._first_of(occurrences, others, held=False)

    def take_over(
        self, owner: str, *, lease: timedelta = PENDING_LEASE, most: int = TAKE_OVER_MOST
    ) -> list[tuple[str, str]]:
        params = {"owner": owner, "lease": ttl_ms(lease), "most": most}

        def work(conn: psycopg.Connection[Any]) -> list[Any]:
            if not self._pending:
                return []
            return conn.execute(self._sql(TAKE_OVER), params).fetchall()

        return [(own(key), own(held)) for key, held in self._call(work)]

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
            if self._pending:  # the markers of settled sends, as old as their claims
                self._call(
                    lambda conn: conn.execute(
                        self._sql("DELETE FROM {pending} WHERE settled AND expires_at < now()")
                    )
                )
        except StoreUnavailable as exc:
            log.warning("could not delete expired claims, will try again: %s", exc)

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

    def latest_runs(self, jobs: Sequence[str]) -> dict[str, RunRecord]:
        # Each job's newest row by the (job, id) index, however long its history.
        return {job: runs[0] for job, runs in self.histories(jobs, 1).items() if runs}

    def holder(self, key: str) -> str | None:
        statement = self._sql("SELECT owner FROM {claims} WHERE key = %s AND expires_at > now()")
        rows = self._call(lambda conn: fetch(conn, statement, (key,)))
        return inbound.text(rows[0][0], "claims and locks", key) if rows else None

    def holders(self, keys: Sequence[str]) -> list[str | None]:
        if not keys:
            return []
        keys = list(keys)
        statement = self._sql(
            "SELECT key, owner FROM {claims} WHERE key = ANY(%s) AND expires_at > now()"
        )
        rows = self._call(lambda conn: fetch(conn, statement, (keys,)))
        owners = {own(key): owner for key, owner in rows}  # the keys asked for
        return [
            None if key not in owners else inbound.text(owners[key], "claims and locks", key)
            for key in keys
        ]

    def last_claimed(self, jobs: Sequence[str]) -> dict[str, datetime]:
        if not jobs:
            return {}
        statement = self._sql("SELECT job, scheduled_ms FROM {last_claimed} WHERE job = ANY(%s)")
        rows = self._call(lambda conn: fetch(conn, statement, (list(jobs),)))
        return last_claimed_times(((own(job), ms) for job, ms in rows), "last claimed")

    def acquire(self, key: str, owner: str, ttl: timedelta) -> bool:
        return bool(
            self._call(
                lambda conn: conn.execute(self._sql(TAKE), (key, owner, ttl_ms(ttl))).fetchall()
            )
        )

    def acquire_fenced(self, key: str, owner: str, ttl: timedelta) -> int | None:
        def work(conn: psycopg.Connection[Any]) -> int | None:
            if not self._fenced:  # a schema without the table: taken, with token 0
                taken = conn.execute(self._sql(TAKE), (key, owner, ttl_ms(ttl))).fetchall()
                return 0 if taken else None
            params = {"key": key, "owner": owner, "ttl": ttl_ms(ttl)}
            [(taken, token)] = conn.execute(self._sql(TAKE_FENCED), params).fetchall()
            if not taken:
                return None
            if token is None:  # raised inside the transaction: the lock is not taken either
                raise FenceUnreadable(key, "a number at its end or below 1")
            return int(token)

        return self._call(work)  # opened first: _fenced is known by then

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
                        sql.SQL(f"%s::{kind}[]") for kind in RUN_TYPES[: len(there)]
                    ),
                ),
                [list(column) for column in zip(*rows, strict=True)][: len(there)],
            )
            conn.execute(self._sql(TRIM), (jobs, self.history_limit))
            for group, entries in found.items():
                self._raise_on(conn, group, entries, ceiling_ms)

        found = run_summary.summaries(records)
        ceiling_ms = run_summary.ceiling(datetime.now(UTC))
        self._call(work)

    def history(self, job: str, n: int = 20) -> list[RunRecord]:
        def work(conn: psycopg.Connection[Any]) -> tuple[tuple[str, ...], list[Any]]:
            there = self._run_columns
            statement = sql.SQL(
                "SELECT {columns} FROM {runs} WHERE job = %s ORDER BY id DESC LIMIT %s"
            ).format(
                columns=sql.SQL(", ").join(map(sql.Identifier, there)), runs=self._names["runs"]
            )
            return there, fetch(conn, statement, (job, n))

        there, rows = self._call(work)
        return readable(
            (tuple(row) for row in rows), lambda row: record_from_row(row, there), f"runs of {job}"
        )

    def histories(self, jobs: Sequence[str], n: int = 20) -> dict[str, list[RunRecord]]:
        wanted = list(dict.fromkeys(jobs))
        if not wanted or n <= 0:
            return {job: [] for job in wanted}

        def work(conn: psycopg.Connection[Any]) -> tuple[tuple[str, ...], list[Any]]:
            there = self._run_columns
            # Each job's newest rows by the (job, id) index, in one statement.
            statement = sql.SQL(
                "SELECT wanted.at, {columns} FROM unnest(%s::text[]) WITH ORDINALITY"
                " AS wanted(name, at) CROSS JOIN LATERAL (SELECT * FROM {runs}"
                " WHERE job = wanted.name ORDER BY id DESC LIMIT %s) newest"
                " ORDER BY wanted.at, newest.id DESC"
            ).format(
                columns=sql.SQL(", ").join(
                    sql.SQL("newest.{}").format(sql.Identifier(c)) for c in there
                ),
                runs=self._names["runs"],
            )
            return there, fetch(conn, statement, (wanted, n))

        there, rows = self._call(work)
        by_job: dict[int, list[tuple[Any, ...]]] = {}
        for row in rows:
            by_job.setdefault(int(row[0]) - 1, []).append(tuple(row[1:]))
        return {
            job: readable(
                by_job.get(at, []), lambda row: record_from_row(row, there), f"runs of {job}"
            )
            for at, job in enumerate(wanted)
        }

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
        rows = self._call(lambda conn: fetch(conn, statement, (ttl_ms(REPLICA_TTL_MAX),)))
        found = [
            live_replica(rid, expires, float(now), offset) for rid, expires, now, offset in rows
        ]
        return [info for info in found if info is not None]

    def close(self) -> None:
        with self._lock:
            if self._owned:
                self._pool.close()
            self._ready = False
