"""What every benchmark needs: throwaway Redis servers, processes measured with psutil, and a
sniffer that timestamps each message as it lands in the broker's queue."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import redis

from tests.servers import RedisServer

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# The checkout whose cron-bridge the beats and workers run (``BENCH_TREE``: another commit's,
# to measure before and after a change with the same harness); this one by default.
TREE = Path(os.environ.get("BENCH_TREE") or REPO).resolve()
PACKAGES = ("", "adapters/celery", "adapters/rq", "adapters/dramatiq")


def env(**values: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("BENCH_", "CRON_BRIDGE_"))}
    # Ahead of the editable installs of this checkout: the core and the adapters of TREE.
    base["PYTHONPATH"] = os.pathsep.join(str(TREE / package) for package in PACKAGES)
    base.update(values)
    return base


@contextlib.contextmanager
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.remove()


@dataclass
class Proc:
    """A child process, its CPU time and peak RSS sampled while it runs."""

    name: str
    argv: list[str]
    environ: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    peak_rss: int = 0
    cpu_seconds: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _sampler: threading.Thread | None = None

    def start(self) -> Proc:
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                self.argv,
                env=self.environ,
                cwd=TREE,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()
        return self

    def _sample(self) -> None:
        assert self.process is not None
        watched = psutil.Process(self.process.pid)
        while not self._stop.wait(0.05):
            with contextlib.suppress(psutil.Error):
                self.peak_rss = max(self.peak_rss, watched.memory_info().rss)
                times = watched.cpu_times()
                self.cpu_seconds = times.user + times.system

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> None:
        if self.process is None or self.process.poll() is not None:
            self._stop.set()
            return
        time.sleep(0.06)  # one more sample
        self._stop.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


class Sniffer:
    """Polls the length of a broker queue and keeps when each message arrived."""

    def __init__(self, url: str, key: str, kind: str = "list") -> None:
        self.client = redis.Redis.from_url(url)
        self.key = key
        self.kind = kind
        self.arrivals: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _length(self) -> int:
        if self.kind == "list":
            return int(self.client.llen(self.key))
        return int(self.client.zcard(self.key))

    def _run(self) -> None:
        seen = self._length()
        while not self._stop.is_set():
            now = time.time()
            length = self._length()
            if length > seen:
                self.arrivals.extend([now] * (length - seen))
                seen = length
            time.sleep(0.001)

    def start(self) -> Sniffer:
        self._thread.start()
        return self

    def wait_for(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.arrivals) >= count:
                return True
            time.sleep(0.01)
        return False

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def commandstats(url: str) -> dict[str, int]:
    info = redis.Redis.from_url(url).info("commandstats")
    return {name.removeprefix("cmdstat_"): int(stats["calls"]) for name, stats in info.items()}


# Store commands that write (a claim asked is a SET NX, counted apart: every replica asks).
WRITES = ("lpush", "hset", "hdel", "del", "evalsha", "eval", "pexpire", "expire")


class AtDue:
    """Snapshots taken just before a burst is due: each process's CPU (so import and arming
    are left out) and the store's command counts (so its writes are counted from there)."""

    def __init__(
        self, procs: list[Proc], store_url: str, due: float, servers: Mapping[str, str] = {}
    ) -> None:
        self.procs = procs
        self.store_url = store_url.partition("?")[0]
        self.due = due
        self.servers = dict(servers)  # Redis servers whose CPU is counted too, by role
        self.cpu: list[float] = []
        self.others: list[float] = []
        self.at = 0.0
        self.calls: dict[str, int] = {}
        self._thread = threading.Thread(target=self._take, daemon=True)

    def start(self) -> AtDue:
        self._thread.start()
        return self

    def _take(self) -> None:
        time.sleep(max(0.0, self.due - 0.3 - time.time()))
        self.calls = self._commandstats()
        self.cpu = [p.cpu_seconds for p in self.procs]
        self.others = self._others()
        self.at = time.monotonic()

    def _others(self) -> list[float]:
        """CPU seconds so far of each Redis server named, then of this process (the sniffer)."""
        found = []
        for url in self.servers.values():
            info = redis.Redis.from_url(url.partition("?")[0]).info("cpu")
            found.append(float(info["used_cpu_user"]) + float(info["used_cpu_sys"]))
        own = psutil.Process().cpu_times()
        return [*found, own.user + own.system]

    def used(self) -> dict[str, float]:
        """CPU seconds since the snapshot of the beats, each Redis server (by role) and this
        process (which polls the queue), and the seconds gone: where the machine's CPU went."""
        self._thread.join(60)
        others = [now - before for now, before in zip(self._others(), self.others, strict=True)]
        return {
            "seconds": round(time.monotonic() - self.at, 3),
            "beats": round(sum(self.cpu_since()), 3),
            **{role: round(cpu, 3) for role, cpu in zip(self.servers, others, strict=False)},
            "bench": round(others[-1], 3),
        }

    def _commandstats(self) -> dict[str, int]:
        if not self.store_url.startswith("redis://"):
            return {}  # counted on a single Redis node only
        return commandstats(self.store_url)

    def cpu_since(self) -> list[float]:
        self._thread.join(60)
        return [p.cpu_seconds - before for p, before in zip(self.procs, self.cpu, strict=True)]

    def store_calls_since(self) -> dict[str, int]:
        """Claims asked (SET), records and ledgers written, all writes, since the snapshot."""
        now = self._commandstats()
        if not now:
            return {}
        delta = {name: now.get(name, 0) - self.calls.get(name, 0) for name in now}
        return {
            "claims_asked": delta.get("set", 0),
            "records": delta.get("lpush", 0),
            "controls": delta.get("hset", 0),
            "writes": sum(delta.get(name, 0) for name in WRITES) + delta.get("set", 0),
        }


class CountingProxy:
    """A TCP proxy on loopback in front of a store server, counting the bytes the server
    sends through it: what one replica, given the proxy's port, reads from its store."""

    def __init__(self, host: str, port: int) -> None:
        import socket

        self._target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self.received = 0  # bytes from the server to the client
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket

        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._target)
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: Any, sink: Any, counted: bool) -> None:
        try:
            while data := source.recv(65536):
                if counted:
                    with self._lock:
                        self.received += len(data)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.close()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
