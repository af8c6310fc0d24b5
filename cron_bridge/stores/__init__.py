"""Stores: where replicas claim occurrences, hold locks and keep run records.

Pick one by URL with ``store_from_url``; the query string sets the store's options::

    redis://host:6379/0?prefix=billing:cron:
    redis+cluster://host:7000
    postgresql://user@host/db?schema=ops
    sqlite:///var/lib/cron-bridge.db
    memory://
"""

from __future__ import annotations

from cron_bridge.stores.base import ReplicaInfo, RunRecord, Store, StoreStats
from cron_bridge.stores.memory import MemoryStore
from cron_bridge.stores.sqlite import SQLiteStore
from cron_bridge.stores.urls import store_from_url

__all__ = [
    "MemoryStore",
    "ReplicaInfo",
    "RunRecord",
    "SQLiteStore",
    "Store",
    "StoreStats",
    "store_from_url",
]
