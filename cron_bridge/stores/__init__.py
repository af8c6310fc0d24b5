"""Stores: where replicas claim occurrences, hold locks and keep run records.

Pick one by URL with ``store_from_url``; the query string sets the store's options::

    redis://host:6379/0?prefix=billing:cron:
    redis+cluster://host:7000
    postgresql://user@host/db?schema=ops
    sqlite:///var/lib/cron-bridge.db
    memory://
"""

from __future__ import annotations

import typing as _typing

from cron_bridge.stores.base import Store, StoreStats
from cron_bridge.stores.memory import MemoryStore
from cron_bridge.stores.records import ReplicaInfo, RunRecord
from cron_bridge.stores.sqlite import SQLiteStore
from cron_bridge.stores.urls import store_from_url

if _typing.TYPE_CHECKING:
    from cron_bridge.stores.postgres import PostgresStore
    from cron_bridge.stores.redis import RedisStore

__all__ = [
    "MemoryStore",
    "PostgresStore",
    "RedisStore",
    "ReplicaInfo",
    "RunRecord",
    "SQLiteStore",
    "Store",
    "StoreStats",
    "store_from_url",
]


def __getattr__(name: str) -> _typing.Any:
    """``RedisStore`` and ``PostgresStore`` import their drivers only when asked for."""
    if name == "RedisStore":
        from cron_bridge.stores.redis import RedisStore

        return RedisStore
    if name == "PostgresStore":
        from cron_bridge.stores.postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
