"""Choosing a store by URL, and what an unreachable server does: fail fast, name the host."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cron_bridge import ConfigError, StoreUnavailable
from cron_bridge.plumbing.redaction import redact_url
from cron_bridge.stores import MemoryStore, SQLiteStore, store_from_url
from cron_bridge.stores.nats import NatsStore
from cron_bridge.stores.postgres import PostgresStore
from cron_bridge.stores.redis import RedisStore
from cron_bridge.stores.redis_connect import parse_sentinel_url
from tests.servers import free_port, silent_listener

# Each driver's store is built, so each driver is imported.
pytestmark = pytest.mark.extras


def test_each_scheme_builds_its_store_with_its_options(tmp_path: Path) -> None:
    """The scheme picks the store and query parameters become its options."""
    redis_store = store_from_url("redis://127.0.0.1:6379/0?prefix=billing:cron:&connect_timeout=2")
    assert isinstance(redis_store, RedisStore)
    assert redis_store.prefix == "billing:cron:"
    assert redis_store.url == "redis://127.0.0.1:6379/0"
    pg = store_from_url("postgresql://app:secret@db.internal/ops?schema=ops&create_tables=false")
    assert isinstance(pg, PostgresStore)
    assert (pg.schema, pg.table_prefix) == ("ops", "cron_bridge_")
    assert "secret" not in pg.url
    sqlite = store_from_url(f"sqlite:///{tmp_path}/x.db")
    assert isinstance(sqlite, SQLiteStore)
    assert sqlite.path == f"{tmp_path}/x.db"
    assert isinstance(store_from_url("memory://"), MemoryStore)
    nats = store_from_url("nats://app:s3cr3t@n1:4222,n2:4222?prefix=billing&history_limit=50")
    assert isinstance(nats, NatsStore)
    assert (nats.prefix, nats.history_limit) == ("billing", 50)
    assert nats.url == "nats://n1:4222,n2:4222?prefix=billing" and "s3cr3t" not in nats.url


def test_a_postgres_url_may_list_several_hosts_as_libpq_does() -> None:
    """libpq's failover form: the hosts tried in turn, the primary found by
    ``target_session_attrs``; each port is checked."""
    url = "postgresql://app:pw@pg1:5432,pg2:5433/ops?target_session_attrs=read-write&schema=ops"
    pg = store_from_url(url)
    assert isinstance(pg, PostgresStore)
    assert pg.url == "postgresql://pg1:5432,pg2:5433/ops"  # what messages and listings show
    for bad in (
        "postgresql://pg1:5432,pg2:99999/ops",
        "postgresql://pg1:5432,pg2:x/ops",
        "nats://n1:4222,n2:port",
    ):
        with pytest.raises(ConfigError, match="malformed store URL") as caught:
            store_from_url(bad)
        assert caught.value.option == "store"


@pytest.mark.parametrize(
    ("url", "option"),
    [
        ("mysql://localhost/db", "store"),
        ("http://localhost", "store"),
        ("redis://localhost:6379/0?prefixx=a:", "prefixx"),
        ("nats://localhost:4222?prefix=a.b", "prefix"),
        ("nats://localhost:4222?schema=x", "schema"),
        ("postgresql://localhost/db?schema=ops&create_tables=maybe", "create_tables"),
        ("sqlite://", "store"),
        ("memory://?history_limit=lots", "history_limit"),
    ],
)
def test_an_unknown_scheme_or_option_is_a_config_error(url: str, option: str) -> None:
    """Bad URLs fail when the store is built, naming the option."""
    with pytest.raises(ConfigError) as caught:
        store_from_url(url)
    assert caught.value.option == option


@pytest.mark.parametrize("scheme", ["redis", "redis+cluster", "postgresql", "nats"])
def test_a_refused_connection_raises_store_unavailable_naming_the_host(scheme: str) -> None:
    """Nobody listening: StoreUnavailable with host:port, at once."""
    port = free_port()
    store = store_from_url(f"{scheme}://127.0.0.1:{port}/0?connect_timeout=2")
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as caught:
        store.ping()
    assert f"127.0.0.1:{port}" in str(caught.value)
    assert caught.value.host == f"127.0.0.1:{port}"
    assert time.monotonic() - started < 2 + 5  # within the connect timeout, never a hang


@pytest.mark.parametrize("scheme", ["redis", "redis+cluster", "postgresql", "nats"])
def test_a_server_that_never_answers_raises_within_the_timeout(scheme: str) -> None:
    """A port that accepts and then says nothing: StoreUnavailable after the timeout, no hang."""
    with silent_listener() as port:
        store = store_from_url(f"{scheme}://127.0.0.1:{port}/0?connect_timeout=1")
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as caught:
            store.ping()
        elapsed = time.monotonic() - started
    assert caught.value.host == f"127.0.0.1:{port}"
    assert elapsed < 1 + 5, elapsed


def test_an_unwritable_sqlite_path_raises_store_unavailable(tmp_path: Path) -> None:
    """A file SQLite cannot open is a StoreUnavailable naming the path."""
    store = store_from_url(f"sqlite:///{tmp_path}/missing-dir/x.db")
    with pytest.raises(StoreUnavailable) as caught:
        store.ping()
    assert caught.value.host == f"{tmp_path}/missing-dir/x.db"


def test_a_sentinel_url_names_its_sentinels_service_and_database() -> None:
    """Several Sentinels (port 26379 unless given), the service, the database; the password
    never in the URL the store shows."""
    store = store_from_url(
        "redis+sentinel://:hunter2@10.0.0.1,10.0.0.2:26380,[::1]:26381/payments/3"
        "?prefix=p:&wait_replicas=1&wait_timeout=0.25&sentinel_password=sekrit"
    )
    assert isinstance(store, RedisStore)
    assert store.url == "redis+sentinel://10.0.0.1:26379,10.0.0.2:26380,[::1]:26381/payments/3"
    assert (store.wait_replicas, store.wait_timeout) == (1, 0.25)
    target = parse_sentinel_url("redis+sentinel://app:pw@s1/main")
    assert (target.username, target.password, target.db) == ("app", "pw", 0)
    assert target.sentinels == (("s1", 26379),)


@pytest.mark.parametrize(
    ("url", "option"),
    [
        ("redis+sentinel://s1:26379", "store"),  # no service
        ("redis+sentinel://s1:26379/main/zero", "store"),
        ("redis+sentinel://s1:99999/main", "store"),
        ("redis+sentinel://s1,,s2/main", "store"),
        ("redis+sentinel://s1/main/0/extra", "store"),
        ("redis+sentinel://s1/main?wait_replicas=-1", "wait_replicas"),
        ("redis+sentinel://s1/main?wait_timeout=0", "wait_timeout"),
        ("redis+cluster://127.0.0.1:7000?wait_replicas=1", "wait_replicas"),
    ],
)
def test_a_bad_sentinel_url_or_wait_option_is_a_config_error(url: str, option: str) -> None:
    with pytest.raises(ConfigError) as caught:
        store_from_url(url)
    assert caught.value.option == option


def test_the_sentinel_password_is_redacted_from_messages() -> None:
    with pytest.raises(ConfigError) as caught:
        store_from_url("redis+sentinel://:pw@s1/main?sentinel_password=sekrit&bogus=1")
    assert "sekrit" not in str(caught.value)
    assert "pw@" not in str(caught.value)
    assert redact_url("redis+sentinel://:pw@s1,s2/m?sentinel_password=x") == (
        "redis+sentinel://:***@s1,s2/m?sentinel_password=***"
    )


def test_no_sentinel_answering_raises_store_unavailable_at_once() -> None:
    """Nobody listening where the Sentinels should be: StoreUnavailable naming them."""
    port = free_port()
    store = store_from_url(f"redis+sentinel://127.0.0.1:{port}/main?connect_timeout=1")
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as caught:
        store.ping()
    assert f"127.0.0.1:{port}" in str(caught.value)
    assert time.monotonic() - started < 1 + 5
