"""The burst on each store, side by side: claim round trips and lag, for choosing a store.

The same Celery burst as the burst table (one Redis broker), with the claims in Redis, a
three-node Redis Cluster, PostgreSQL and SQLite (a file, the replicas on this host).
"""

from __future__ import annotations

import contextlib
import tempfile
import uuid
from collections.abc import Callable
from typing import Any

from tests.servers import PostgresServer, RedisCluster, RedisServer


def store_bursts(
    broker: str, burst: Callable[..., dict[str, Any]], sizes: tuple[int, ...] = (1000, 10000)
) -> list[dict[str, Any]]:
    rows = []
    with contextlib.ExitStack() as stack:
        redis_store = RedisServer()
        redis_store.start()
        stack.callback(redis_store.remove)
        cluster = RedisCluster()
        cluster.start()
        stack.callback(cluster.remove)
        postgres = PostgresServer()
        postgres.start()
        stack.callback(postgres.remove)
        folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-sqlite-"))

        def fresh() -> str:
            return uuid.uuid4().hex[:8]

        urls: dict[str, Callable[[], str]] = {
            "redis": lambda: f"{redis_store.url}?prefix=b{fresh()}:",
            "redis-cluster": lambda: f"{cluster.url}?prefix=b{fresh()}:",
            "postgres": lambda: f"{postgres.url}?schema=b_{fresh()}",
            "sqlite": lambda: f"sqlite:///{folder}/{fresh()}.db",
        }
        for kind, url in urls.items():
            for jobs in sizes:
                for replicas in (1, 3):
                    found = burst("celery", jobs, replicas, url(), broker)
                    found["store"] = kind
                    print("store", found, flush=True)
                    rows.append(found)
    return rows
