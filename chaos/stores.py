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
from collections.abc import Callable
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


class _Served:
    """A store on a throwaway server of the tests: started, faulted, removed."""

    name = ""
    server: RedisServer | PostgresServer | NatsServer

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def start(self) -> None:
        self.server.start()

    def remove(self) -> None:
        self.server.remove()

    def _down(self, rng: random.Random, stop: Callable[[], None], said: str) -> str:
        """Stop the server with ``stop``, keep it down 2 to 5 s, start it on its data."""
        down = rng.uniform(2.0, 5.0)
        stop()
        time.sleep(down)
        self.server.start()
        return f"store down for {down:.1f} s{said}"


class _Redis(_Served):
    name = "redis"

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.server = RedisServer(extra=["--appendonly", "yes", "--appendfsync", "always"])

    @property
    def url(self) -> str:
        return f"{self.server.url}?prefix=chaos{self.seed}:&connect_timeout=1"

    def fault(self, rng: random.Random) -> str:
        return self._down(rng, self.server.stop, ", back from its AOF")


class _Postgres(_Served):
    name = "postgres"

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.server = PostgresServer()

    @property
    def url(self) -> str:
        return f"{self.server.url}?schema=chaos{self.seed}&connect_timeout=1"

    def fault(self, rng: random.Random) -> str:
        if rng.random() < 0.5:
            cut = self.server.terminate_backends()
            return f"store connections cut: pg_terminate_backend ended {cut}"
        return self._down(rng, self.server.crash,
                          ": crashed (immediate shutdown), back from its WAL")  # fmt: skip


class _Nats(_Served):
    name = "nats"

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.server = NatsServer()

    @property
    def url(self) -> str:
        return f"{self.server.url}?prefix=chaos{self.seed}&connect_timeout=1"

    def fault(self, rng: random.Random) -> str:
        return self._down(rng, self.server.crash, ": SIGKILLed, back from JetStream's files")


STORES = {"redis": _Redis, "postgres": _Postgres, "nats": _Nats}


def open_store(name: str, seed: int) -> ChaosStore:
    store: ChaosStore = STORES[name](seed)
    return store
