"""PostgreSQL specifics: server-side expiry, tables owned by migrations, old claims cleaned up."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from cron_bridge import StoreUnavailable
from cron_bridge.jobs import Occurrence
from cron_bridge.plumbing.keys import lock_key
from cron_bridge.stores import RunRecord, store_from_url
from cron_bridge.stores.postgres import PostgresStore
from tests.servers import PostgresServer

pytestmark = pytest.mark.postgres


def _seconds_left(url: str, schema: str, key: str) -> float:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            f'SELECT extract(epoch FROM expires_at - now()) FROM "{schema}".cron_bridge_claims'
            " WHERE key = %s",
            (key,),
        ).fetchone()
    assert row is not None
    return float(row[0])


def test_expiry_holds_when_the_client_clock_is_an_hour_off(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Locks expire by the database's now(): a client an hour ahead or behind changes nothing."""
    schema = "clock_skew"
    url = f"{postgres_server.url}?schema={schema}"
    real_time = time.time
    ahead, behind = store_from_url(url), store_from_url(url)
    key = lock_key("settle")

    monkeypatch.setattr(time, "time", lambda: real_time() + 3600)
    assert ahead.acquire(key, "ahead", timedelta(seconds=30))
    assert 25 < _seconds_left(postgres_server.url, schema, key) <= 30

    monkeypatch.setattr(time, "time", lambda: real_time() - 3600)
    assert not behind.acquire(key, "behind", timedelta(seconds=30))  # not "expired an hour ago"
    assert not behind.extend(key, "behind", timedelta(seconds=30))
    assert ahead.extend(key, "ahead", timedelta(seconds=1))
    time.sleep(1.5)
    assert behind.acquire(key, "behind", timedelta(seconds=30))  # expired by the server's clock
    ahead.close()
    behind.close()


def test_create_tables_false_uses_tables_made_from_the_documented_ddl(
    postgres_server: PostgresServer,
) -> None:
    """Teams whose migrations own the schema run ``ddl()`` themselves; the store creates nothing."""
    url = f"{postgres_server.url}?schema=migrated&table_prefix=cb_&create_tables=false"
    store = store_from_url(url)
    assert isinstance(store, PostgresStore)
    with pytest.raises(psycopg.errors.UndefinedTable):
        store.claim(Occurrence(job="a", scheduled_at=datetime.now(UTC)), "me")
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute(store.ddl())
    assert store.claim(Occurrence(job="a", scheduled_at=datetime.now(UTC)), "me")
    assert '"migrated"."cb_claims"' in store.ddl()
    store.close()


def test_claims_expired_over_an_hour_ago_are_deleted(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The periodic clean-up removes long-expired claims and keeps live ones."""
    schema = "cleanup"
    store: Any = store_from_url(f"{postgres_server.url}?schema={schema}")
    old = Occurrence(job="a", scheduled_at=datetime(2026, 1, 1, tzinfo=UTC))
    live = Occurrence(job="a", scheduled_at=datetime(2026, 1, 2, tzinfo=UTC))
    assert store.claim(old, "me", ttl=timedelta(milliseconds=1))
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute(
            f"UPDATE {schema}.cron_bridge_claims SET expires_at = now() - interval '2 hours'"
        )
    monkeypatch.setattr(store, "_last_cleanup", 0.0)
    monkeypatch.setattr("cron_bridge.stores.postgres.CLEANUP_EVERY", 0.0)
    assert store.claim(live, "me")
    with psycopg.connect(postgres_server.url) as conn:
        keys = [r[0] for r in conn.execute(f"SELECT key FROM {schema}.cron_bridge_claims")]
    assert keys == [live.claim_key]
    store.close()


def test_a_borrowed_pool_is_not_closed(postgres_server: PostgresServer) -> None:
    """A pool passed in stays open after the store closes."""
    from psycopg_pool import ConnectionPool

    pool: ConnectionPool[Any] = ConnectionPool(
        postgres_server.url, min_size=1, max_size=2, open=True, kwargs={"autocommit": True}
    )
    store = PostgresStore(pool, schema="borrowed")
    store.ping()
    store.close()
    with pool.connection() as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    pool.close()
    with pytest.raises(StoreUnavailable):
        PostgresStore(pool, schema="borrowed").ping()


_SCHEMA_1_RUNS = """
CREATE SCHEMA {schema};
CREATE TABLE {schema}.cron_bridge_runs (
    id bigserial PRIMARY KEY, job text NOT NULL, occurrence_id text NOT NULL,
    outcome text NOT NULL, reason text, trigger text NOT NULL, attempt integer NOT NULL,
    replica text NOT NULL, started_at timestamptz NOT NULL, duration_ms double precision,
    error text);
INSERT INTO {schema}.cron_bridge_runs
    (job, occurrence_id, outcome, trigger, attempt, replica, started_at, error)
VALUES ('j', 'j@2026-01-01T00:00:00Z', 'failed', 'schedule', 1, 'r1', now(), 'ValueError: old');
"""


def _failed(traceback: str) -> RunRecord:
    return RunRecord(
        job="j",
        occurrence_id="j@2026-01-01T00:01:00Z",
        outcome="failed",
        trigger="schedule",
        replica="r1",
        started_at=datetime.now(UTC),
        error="ValueError: new",
        traceback=traceback,
    )


def test_tables_made_before_tracebacks_were_kept_get_the_column(
    postgres_server: PostgresServer,
) -> None:
    """The store's DDL adds the traceback column to a runs table of schema 1; the old record
    reads back beside a new one with its traceback."""
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute(_SCHEMA_1_RUNS.format(schema="before_tracebacks"))
    store = store_from_url(f"{postgres_server.url}?schema=before_tracebacks")
    store.record(_failed("Traceback ...\nValueError: new"))
    assert [(r.error, r.traceback) for r in store.history("j")] == [
        ("ValueError: new", "Traceback ...\nValueError: new"),
        ("ValueError: old", None),
    ]
    store.close()


def test_tables_owned_by_migrations_without_the_column_keep_records_without_tracebacks(
    postgres_server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    """With ``create_tables=false`` the store alters nothing: on a runs table the team's
    migrations have not given the column yet, it says so once and keeps every record (without
    its traceback) rather than failing every write."""
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute(_SCHEMA_1_RUNS.format(schema="migrations_behind"))
    store = store_from_url(f"{postgres_server.url}?schema=migrations_behind&create_tables=false")
    store.record(_failed("Traceback ...\nValueError: new"))
    store.record(_failed("Traceback ...\nValueError: again"))
    assert [(r.error, r.traceback) for r in store.history("j")] == [
        ("ValueError: new", None),
        ("ValueError: new", None),
        ("ValueError: old", None),
    ]
    said = [r.getMessage() for r in caplog.records if "traceback column" in r.getMessage()]
    assert len(said) == 1 and "ADD COLUMN traceback text" in said[0]
    store.close()


def test_connections_cut_cost_one_failed_call_not_one_per_pooled_connection(
    postgres_server: PostgresServer,
) -> None:
    """``pg_terminate_backend`` (a failover, an operator, a restart) ends every pooled
    connection; the pool does not look at idle ones until they are used, so each failed a
    call of its own, one after the other (a chaos run saw a finished run's lock release fail
    twice, and the job's next occurrences skipped behind it). The first call fails; the next
    one answers."""
    store = store_from_url(f"{postgres_server.url}?schema=cut_connections&pool_size=4")
    assert isinstance(store, PostgresStore)
    store.ping()
    pids: list[int] = []
    barrier = threading.Barrier(4)

    def hold() -> None:
        with store._pool.connection() as conn:
            pids.append(conn.info.backend_pid)
            barrier.wait(10)

    threads = [threading.Thread(target=hold) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(pids)) == 4
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
    with pytest.raises(StoreUnavailable):
        store.ping()
    store.ping()  # the other three were dropped with the first
    store.ping()
    store.close()


def test_tables_owned_by_migrations_without_fences_take_locks_without_tokens(
    postgres_server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    """With ``create_tables=false`` on tables made before fencing tokens (the DDL of schema
    2, no fences table), overlap locks are still taken, with token 0 (``ctx.fencing_token``
    None), said once; once the team adds the table, a new store gives tokens."""
    url = f"{postgres_server.url}?schema=before_fences&create_tables=false"
    store = store_from_url(url)
    assert isinstance(store, PostgresStore)
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute(store.ddl())
        conn.execute('DROP TABLE "before_fences".cron_bridge_fences')
    key = lock_key("ledger.settle")
    assert store.acquire_fenced(key, "a", timedelta(seconds=30)) == 0
    assert store.acquire_fenced(key, "b", timedelta(seconds=30)) is None  # held
    assert store.release(key, "a")
    assert store.acquire_fenced(key, "b", timedelta(seconds=30)) == 0
    said = [r.getMessage() for r in caplog.records if "fencing tokens" in r.getMessage()]
    assert len(said) == 1 and "cron_bridge_fences is missing" in said[0], said
    store.close()
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute(store.ddl())
    fenced = store_from_url(url)
    assert fenced.release(key, "b")
    assert fenced.acquire_fenced(key, "c", timedelta(seconds=30)) == 1
    fenced.close()
