"""The store under chaos (``--store``): its server, the URL every replica and worker gets, and
its own faults, each a seeded choice of the schedule's ``store`` events.

- **redis**: append-only file with ``fsync always``; restarted from it.
- **postgres**: crashed (an immediate shutdown: every pooled connection dropped mid-
  transaction, the WAL replayed at restart), or every client connection cut with
  ``pg_terminate_backend`` while the server stays up.
- **nats**: SIGKILLed and restarted on the same port, JetStream reading its files again.
"""

from __future__ import annotations

import random
import time
from typing import Protocol

from tests.servers import NatsServer, PostgresServer, RedisServer

__all__ = ["STORES", "ChaosStore", "open_store"]


class ChaosStore(Protocol):
    name: str

    @property
    def url(self) -> str: ...

    def start(self) -> None: ...

    def fault(self, rng: random.Random) -> str:
        """Do one of this store's faults (bounded in time); what it did, for the log."""
        ...

    def remove(self) -> None: ...


class _Redis:
    name = "redis"

    def __init__(self, seed: int) -> None:
        self.server = RedisServer(extra=["--appendonly", "yes", "--appendfsync", "always"])
        self.seed = seed

    @property
    def url(self) -> str:
        return f"{self.server.url}?prefix=chaos{self.seed}:&connect_timeout=1"

    def start(self) -> None:
        self.server.start()

    def fault(self, rng: random.Random) -> str:
        down = rng.uniform(2.0, 5.0)
        self.server.stop()
        time.sleep(down)
        self.server.start()
        return f"store down for {down:.1f} s, back from its AOF"

    def remove(self) -> None:
        self.server.remove()


class _Postgres:
    name = "postgres"

    def __init__(self, seed: int) -> None:
        self.server = PostgresServer()
        self.seed = seed

    @property
    def url(self) -> str:
        return f"{self.server.url}?schema=chaos{self.seed}&connect_timeout=1"

    def start(self) -> None:
        self.server.start()

    def fault(self, rng: random.Random) -> str:
        if rng.random() < 0.5:
            cut = self.server.terminate_backends()
            return f"store connections cut: pg_terminate_backend ended {cut}"
        down = rng.uniform(2.0, 5.0)
        self.server.crash()
        time.sleep(down)
        self.server.start()
        return f"store down for {down:.1f} s: crashed (immediate shutdown), back from its WAL"

    def remove(self) -> None:
        self.server.remove()


class _Nats:
    name = "nats"

    def __init__(self, seed: int) -> None:
        self.server = NatsServer()
        self.seed = seed

    @property
    def url(self) -> str:
        return f"{self.server.url}?prefix=chaos{self.seed}&connect_timeout=1"

    def start(self) -> None:
        self.server.start()

    def fault(self, rng: random.Random) -> str:
        down = rng.uniform(2.0, 5.0)
        self.server.crash()
        time.sleep(down)
        self.server.start()
        return f"store down for {down:.1f} s: SIGKILLed, back from JetStream's files"

    def remove(self) -> None:
        self.server.remove()


STORES = {"redis": _Redis, "postgres": _Postgres, "nats": _Nats}


def open_store(name: str, seed: int) -> ChaosStore:
    store: ChaosStore = STORES[name](seed)
    return store
