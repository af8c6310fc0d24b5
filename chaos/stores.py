"""The store under chaos (``--store``): its server, the URL every replica and worker gets, and
its own faults, each a seeded choice of the schedule's ``store`` events.

- **redis**: append-only file with ``fsync always``; restarted from it.
- **postgres**: a primary and its synchronous streaming replica, found by a multi-host URL
  (``target_session_attrs=read-write``); the primary crashed (an immediate shutdown: every
  pooled connection dropped mid-transaction, the WAL replayed at restart), or every client
  connection cut with ``pg_terminate_backend`` while it stays up, or a failover: the primary
  crashed, the standby promoted, the old primary made a standby of the new one.
- **nats**: SIGKILLed and restarted on the same port, JetStream reading its files again.
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable
from typing import ClassVar, Protocol

from tests.servers import NatsServer, PostgresServer, PostgresStandby, RedisServer

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
    # Commits wait for the standby (a claim survives a promotion); fsync stays off: a crash of
    # the server, not of the host, loses nothing the OS was given.
    SETTINGS: ClassVar[dict[str, str]] = {
        "synchronous_commit": "on",
        "synchronous_standby_names": "*",
    }

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.server = PostgresServer(settings=self.SETTINGS)
        self.standby = PostgresStandby(self.server, settings=self.SETTINGS)
        self.ports = (self.server.port, self.standby.port)

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.ports)
        return (
            f"postgresql://postgres@{hosts}/postgres?schema=chaos{self.seed}"
            "&target_session_attrs=read-write&connect_timeout=1"
        )

    def start(self) -> None:
        self.server.start()
        self.standby.start()
        self.standby.wait_caught_up()

    def remove(self) -> None:
        self.standby.remove()
        self.server.remove()

    def fault(self, rng: random.Random) -> str:
        chosen = rng.random()
        if chosen < 1 / 3:
            cut = self.server.terminate_backends()
            return f"store connections cut: pg_terminate_backend ended {cut}"
        if chosen < 2 / 3:
            return self._down(
                rng, self.server.crash, ": crashed (immediate shutdown), back from its WAL"
            )
        return self._fail_over()

    def _fail_over(self) -> str:
        """Crash the primary, promote the standby, make the old primary (on its port) a new
        standby of it, from a fresh base backup, as an operator rebuilds a failed node."""
        began = time.monotonic()
        old, new = self.server, self.standby
        old.crash()
        new.promote()
        rebuilt = PostgresStandby(new, settings=self.SETTINGS)
        rebuilt.port = old.port
        shutil.rmtree(old.dir, ignore_errors=True)
        rebuilt.start()
        rebuilt.wait_caught_up()
        self.server, self.standby = new, rebuilt
        return (
            f"store failed over: primary crashed, standby on {new.port} promoted, "
            f"{old.port} rebuilt as its standby ({time.monotonic() - began:.1f} s)"
        )


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
