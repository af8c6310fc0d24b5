"""Fixtures: throwaway servers for the session, and one fresh store namespace per test.

A server that cannot be started skips its tests with the reason locally, and fails the run
when ``CI=true``, so a green CI always means every store was exercised.

The core's unit tests, which ``make check`` runs with only the core installed, are marked
``unit`` here (``pytest_collection_modifyitems``): every test under tests/ but the end-to-end
tests and those marked as needing a server, an optional library, or many seconds.
"""

from __future__ import annotations

import importlib
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cron_bridge.stores import Store, store_from_url
from tests import durations
from tests.servers import (
    NatsServer,
    PostgresServer,
    RabbitMQServer,
    RedisCluster,
    RedisSentinel,
    RedisServer,
    ServerUnavailable,
    ValkeyServer,
)

IN_CI = os.environ.get("CI", "").lower() == "true"


def unavailable(what: str, exc: Exception) -> None:
    message = f"{what} could not be started here: {exc}"
    if IN_CI:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def importable(name: str) -> Any:
    """``pytest.importorskip`` that fails the run when ``CI=true``: make test installs every
    library a test needs, so one missing there is a broken environment, never a skip. Also at
    a module's top level."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        message = f"{name} is not installed here: {exc}"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message, allow_module_level=True)


def _serve(make: Callable[[], Any], what: str) -> Iterator[Any]:
    """Start a server for the session, skip (or fail in CI) when it cannot start, remove it."""
    server = None
    try:
        server = make()
        server.start()
    except ServerUnavailable as exc:
        if server is not None:
            server.remove()
        unavailable(what, exc)
    yield server
    server.remove()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One redis-server for the whole run; tests keep apart by key prefix."""
    yield from _serve(RedisServer, "redis-server")


@pytest.fixture(scope="session")
def valkey_server() -> Iterator[ValkeyServer]:
    """One valkey-server for the whole run: the Redis store on Valkey."""
    yield from _serve(ValkeyServer, "valkey-server")


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A 3-primary Redis Cluster for the whole run."""
    yield from _serve(RedisCluster, "a Redis Cluster")


@pytest.fixture(scope="session")
def redis_sentinel() -> Iterator[RedisSentinel]:
    """A primary, two replicas and three Sentinels for the whole run (never failed over)."""
    yield from _serve(RedisSentinel, "a Redis Sentinel group")


@pytest.fixture
def failover_group() -> Iterator[RedisSentinel]:
    """A Sentinel group of the test's own, for a test that kills its primary."""
    yield from _serve(RedisSentinel, "a Redis Sentinel group")


@pytest.fixture(scope="session")
def nats_server() -> Iterator[NatsServer]:
    """One nats-server with JetStream for the whole run; tests keep apart by prefix."""
    yield from _serve(NatsServer, "nats-server")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the whole run; tests keep apart by schema."""
    yield from _serve(PostgresServer, "PostgreSQL")


@pytest.fixture(scope="session")
def rabbitmq_server() -> Iterator[RabbitMQServer]:
    """One RabbitMQ node for the whole run; tests keep apart by queue name."""
    yield from _serve(RabbitMQServer, "RabbitMQ")


@pytest.fixture(scope="session")
def chromium() -> str:
    """A Chromium for the browser tests (Debian's chromium package; .ci/run installs it)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    unavailable("Chromium", FileNotFoundError("no chromium on PATH"))
    raise AssertionError("unreachable")


@dataclass
class StoreKit:
    """One store namespace for one test: its URL, and stores opened on it.

    Attributes:
        kind: memory, sqlite, redis, valkey, redis-cluster, redis-sentinel, postgres or nats.
        url: a URL any process can open the same namespace with (not for memory).
    """

    kind: str
    url: str
    opened: list[Store] = field(default_factory=list)
    shared: Store | None = None

    def open(self, **options: Any) -> Store:
        """A store on this namespace (for memory: the one shared instance)."""
        if self.kind == "memory" and self.shared is not None and not options:
            return self.shared
        store = store_from_url(self.url, **options)
        self.opened.append(store)
        if self.kind == "memory" and not options:
            self.shared = store
        return store

    def close(self) -> None:
        for store in self.opened:
            store.close()


def _namespace() -> str:
    return uuid.uuid4().hex[:10]


def make_kit(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> StoreKit:
    """A fresh namespace of the ``kind`` store, starting its server when needed."""
    name = _namespace()
    if kind == "memory":
        return StoreKit(kind, "memory://")
    if kind == "sqlite":
        return StoreKit(kind, f"sqlite:///{tmp_path / 'store.db'}")
    if kind == "redis":
        server: Any = request.getfixturevalue("redis_server")
        return StoreKit(kind, f"{server.url}?prefix=t{name}:")
    if kind == "valkey":
        valkey: Any = request.getfixturevalue("valkey_server")
        return StoreKit(kind, f"{valkey.url}?prefix=t{name}:")
    if kind == "redis-cluster":
        cluster: Any = request.getfixturevalue("redis_cluster")
        return StoreKit(kind, f"{cluster.url}?prefix=t{name}:")
    if kind == "redis-sentinel":  # every claim acknowledged by a replica (WAIT 1)
        group: Any = request.getfixturevalue("redis_sentinel")
        return StoreKit(kind, f"{group.url}?prefix=t{name}:&wait_replicas=1")
    if kind == "nats":
        nats: Any = request.getfixturevalue("nats_server")
        return StoreKit(kind, f"{nats.url}?prefix=t{name}")
    if kind == "postgres":
        pg: Any = request.getfixturevalue("postgres_server")
        return StoreKit(kind, f"{pg.url}?schema=t_{name}")
    raise ValueError(kind)


ALL_STORES = [
    "memory",
    "sqlite",
    "redis",
    "valkey",
    "redis-cluster",
    "redis-sentinel",
    "postgres",
    "nats",
]
SHARED_STORES = ["sqlite", "redis", "valkey", "redis-cluster", "redis-sentinel", "postgres", "nats"]

# The server each kind of store runs on (memory and SQLite need none), whose marker a test on
# it carries: the server, and the driver its extra installs, are not there for make check.
SERVER_MARKS = {
    "redis": pytest.mark.redis,
    "valkey": pytest.mark.redis,
    "redis-cluster": pytest.mark.redis,
    "redis-sentinel": pytest.mark.redis,
    "postgres": pytest.mark.postgres,
    "nats": pytest.mark.nats,
}


def store_kinds(kinds: list[str]) -> list[Any]:
    """``kinds`` as parameters, each marked with the server it runs on."""
    return [pytest.param(kind, marks=SERVER_MARKS.get(kind, ())) for kind in kinds]


@pytest.fixture(params=store_kinds(ALL_STORES))
def kit(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreKit]:
    """A fresh namespace on every kind of store."""
    made = make_kit(request.param, request, tmp_path)
    yield made
    made.close()


@pytest.fixture(params=store_kinds(SHARED_STORES))
def shared_kit(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreKit]:
    """A fresh namespace on every store that several processes can share."""
    made = make_kit(request.param, request, tmp_path)
    yield made
    made.close()


@pytest.fixture
def store(kit: StoreKit) -> Store:
    """A store on a fresh namespace, for every kind of store."""
    return kit.open()


@pytest.fixture
def kit_factory(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], StoreKit]]:
    """Make more namespaces of a given kind within one test."""
    made: list[StoreKit] = []

    def factory(kind: str) -> StoreKit:
        one = make_kit(kind, request, tmp_path_factory.mktemp("ns"))
        made.append(one)
        return one

    yield factory
    for one in made:
        one.close()


# What keeps a test under tests/ out of the unit tests: the markers of pyproject.toml but
# `unit` itself, each of which needs more than the core installed or more than a moment.
NOT_UNIT = frozenset({"slow", "alone", "redis", "postgres", "nats", "extras"})
TESTS = Path(__file__).parent


# A test that asks for a server's fixture needs that server: it carries the server's marker.
FIXTURE_MARKS = {
    "redis_server": pytest.mark.redis,
    "valkey_server": pytest.mark.redis,
    "redis_cluster": pytest.mark.redis,
    "redis_sentinel": pytest.mark.redis,
    "failover_group": pytest.mark.redis,
    "postgres_server": pytest.mark.postgres,
    "nats_server": pytest.mark.nats,
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test that asks for a server's fixture with the server, then the core's unit
    tests ``unit`` (make check runs ``-m unit``, make test the rest); then put the longest
    first (tests/durations.py)."""
    for item in items:
        for name in FIXTURE_MARKS.keys() & set(getattr(item, "fixturenames", ())):
            item.add_marker(FIXTURE_MARKS[name])
        under_tests = TESTS in item.path.parents and TESTS / "e2e" not in item.path.parents
        if under_tests and NOT_UNIT.isdisjoint(mark.name for mark in item.iter_markers()):
            item.add_marker(pytest.mark.unit)
    items[:] = longest_first(items, durations.read())


def longest_first(items: list[pytest.Item], took: dict[str, float]) -> list[pytest.Item]:
    """The modules whose longest test is longest first, and in each module its longest tests
    first; a module's tests stay together (its module-scoped fixtures are made once), and
    tests with no figure keep their order."""
    modules: dict[str, float] = {}
    for item in items:
        module = item.nodeid.partition("::")[0]
        modules[module] = max(modules.get(module, 0.0), took.get(item.nodeid, 0.0))
    order = {module: index for index, module in enumerate(modules)}

    def key(pair: tuple[int, pytest.Item]) -> tuple[float, int, float, int]:
        index, item = pair
        module = item.nodeid.partition("::")[0]
        return (-modules[module], order[module], -took.get(item.nodeid, 0.0), index)

    return [item for _, item in sorted(enumerate(items), key=key)]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Any:
    """With ``CB_TEST_CPU=FILE``, append each test's CPU seconds (its worker's and the
    processes it started and waited for) and wall seconds to FILE, a line each: where the
    2 cores of a CI run go (python -m tests.durations --cpu FILE sums them)."""
    path = os.environ.get("CB_TEST_CPU")
    if not path:
        return (yield)
    import resource

    def cpu() -> float:
        own, children = (
            resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
        )
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    began, wall = cpu(), time.monotonic()
    try:
        return (yield)
    finally:
        with open(path, "a", encoding="utf-8") as out:
            out.write(f"{cpu() - began:.2f}\t{time.monotonic() - wall:.2f}\t{item.nodeid}\n")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Show what tests counted and reported (``user_properties``) at the end of the run."""
    lines = [
        f"{report.nodeid}: {name} = {value}"
        for report in terminalreporter.getreports("passed") + terminalreporter.getreports("failed")
        for name, value in report.user_properties
    ]
    if lines:
        terminalreporter.section("reported by tests")
        for line in lines:
            terminalreporter.write_line(line)
