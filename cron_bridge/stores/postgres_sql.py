"""The Postgres store's schema and statements, and how the rows they return are read.

What ``PostgresStore`` sends is written here once, with its tables as ``{name}`` fields that
``table_names`` fills in (a schema and a prefix per store). Every read goes through ``fetch``,
which takes text columns as bytes for ``untrusted.text`` to decode (a database whose encoding
is SQL_ASCII keeps whatever bytes were written) and a time a datetime cannot hold
(``infinity``, a year past 9999) as None, not raised.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

try:
    import psycopg
    from psycopg import sql
    from psycopg.adapt import Buffer, Loader
    from psycopg.types.datetime import TimestamptzLoader
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        'the Postgres store needs psycopg 3: pip install "cron-bridge[postgres]"'
    ) from exc

__all__ = [
    "CLAIM",
    "CLAIM_PENDING",
    "CONTROLS",
    "DDL",
    "RUN_TYPES",
    "SCHEMA_VERSION",
    "SETTLE",
    "TAKE",
    "TAKE_FENCED",
    "TAKE_OVER",
    "TRIM",
    "fetch",
    "own",
    "table_names",
]

SCHEMA_VERSION = 4  # 2: runs.traceback; 3: fences; 4: pending

DDL = """
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {meta} (name text PRIMARY KEY, value text NOT NULL);
INSERT INTO {meta} VALUES ('schema_version', '4') ON CONFLICT (name) DO NOTHING;
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
CREATE TABLE IF NOT EXISTS {fences} (
    key text PRIMARY KEY,
    token bigint NOT NULL
);
UPDATE {meta} SET value = '3' WHERE name = 'schema_version' AND value IN ('1', '2');
CREATE TABLE IF NOT EXISTS {pending} (
    key text PRIMARY KEY,
    owner text NOT NULL,
    expires_at timestamptz NOT NULL,
    settled boolean NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS {pending_expiry} ON {pending} (expires_at);
UPDATE {meta} SET value = '4' WHERE name = 'schema_version' AND value IN ('1', '2', '3');
"""
"""The tables, for teams whose migrations own the schema (``create_tables=False``).

Fill in the names with ``PostgresStore.ddl()`` or by hand: ``{schema}`` is the schema and
every other name is the table prefix (``cron_bridge_`` by default) and the name in braces.
"""

_CLAIM_STEPS = """
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
)"""

CLAIM = _CLAIM_STEPS + "\nSELECT key FROM won\n"

# CLAIM, and in the same statement each claim won with its pending flag left pending its send.
CLAIM_PENDING = (
    _CLAIM_STEPS
    + """, pended AS (
    INSERT INTO {pending} (key, owner, expires_at)
    SELECT key, %(owner)s, now() + %(lease)s * interval '1 millisecond' FROM won
    WHERE key = ANY(%(pending)s::text[]) ORDER BY key
    ON CONFLICT (key) DO UPDATE
    SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at, settled = false
)
SELECT key FROM won
"""
)

# Settle (a marker of who settled it, kept as long as the claim) or renew the pending sends the
# owner holds; answers those another replica holds. The rows are locked first, so a takeover
# committed meanwhile is seen, not the snapshot before it.
SETTLE = """
WITH locked AS (
    SELECT key, owner, settled FROM {pending}
    WHERE key = ANY(%(keys)s::text[]) ORDER BY key FOR UPDATE
), mine AS (
    UPDATE {pending} AS p
    SET settled = %(settle)s, expires_at = now() + %(ms)s * interval '1 millisecond'
    FROM locked WHERE p.key = locked.key AND locked.owner = %(owner)s AND NOT locked.settled
)
SELECT key FROM locked WHERE owner <> %(owner)s
"""

# The pending sends whose lease ran out, oldest first, each leased to the taker; a row another
# taker or its settling owner holds is skipped, not waited for.
TAKE_OVER = """
UPDATE {pending} AS p SET owner = %(owner)s,
    expires_at = now() + %(lease)s * interval '1 millisecond'
FROM (
    SELECT key, owner FROM {pending} WHERE expires_at <= now() AND NOT settled
    ORDER BY expires_at LIMIT %(most)s FOR UPDATE SKIP LOCKED
) AS old
WHERE p.key = old.key
RETURNING p.key, old.owner
"""

TAKE = """
INSERT INTO {claims} (key, owner, expires_at)
VALUES (%s, %s, now() + %s * interval '1 millisecond')
ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
WHERE {claims}.expires_at <= now()
RETURNING key
"""

# TAKE, and in the same statement the lock's next fencing token: whether it was taken, and
# its token (none when the counter holds a number at its end or below 1).
TAKE_FENCED = """
WITH taken AS (
    INSERT INTO {claims} (key, owner, expires_at)
    VALUES (%(key)s, %(owner)s, now() + %(ttl)s * interval '1 millisecond')
    ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
    WHERE {claims}.expires_at <= now()
    RETURNING key
), fenced AS (
    INSERT INTO {fences} (key, token) SELECT key, 1 FROM taken
    ON CONFLICT (key) DO UPDATE SET token = {fences}.token + 1
    WHERE {fences}.token BETWEEN 1 AND 9223372036854775806
    RETURNING token
)
SELECT (SELECT count(*) FROM taken), (SELECT token FROM fenced)
"""

TRIM = """
DELETE FROM {runs} r USING (
    SELECT id, row_number() OVER (PARTITION BY job ORDER BY id DESC) AS newer
    FROM {runs} WHERE job = ANY(%s)
) ranked
WHERE r.id = ranked.id AND ranked.newer > %s
"""

# A control group within a reader's bounds (records.control_records): the keys of at most
# key_max bytes, each value while it and the values so far stay within their bounds, and how
# many rows there are.
CONTROLS = """
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


def fetch(conn: psycopg.Connection[Any], statement: Any, params: Any = None) -> list[Any]:
    """The rows of a read, text as bytes and times that do not fit as None."""
    cursor = conn.cursor()
    cursor.adapters.register_loader("text", _RawText)
    cursor.adapters.register_loader("timestamptz", _Instant)
    return cursor.execute(statement, params).fetchall()


def own(raw: Any) -> str:
    """A key or name this store wrote itself, read back (bytes in a SQL_ASCII database)."""
    return bytes(raw).decode() if isinstance(raw, bytes | memoryview) else str(raw)


RUN_TYPES = (
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

TABLES = (
    "meta",
    "claims",
    "claims_expiry",
    "last_claimed",
    "runs",
    "runs_job",
    "replicas",
    "controls",
    "fences",
    "pending",
    "pending_expiry",
)


def table_names(schema: str, prefix: str) -> dict[str, sql.Composable]:
    """The identifiers the statements are filled in with: the schema, and each table (and
    index: those take no schema) with its prefix."""
    names: dict[str, sql.Composable] = {
        name: sql.Identifier(schema, prefix + name) for name in TABLES
    }
    names["claims_expiry"] = sql.Identifier(prefix + "claims_expiry")
    names["runs_job"] = sql.Identifier(prefix + "runs_job")
    names["pending_expiry"] = sql.Identifier(prefix + "pending_expiry")
    return {"schema": sql.Identifier(schema), **names}
