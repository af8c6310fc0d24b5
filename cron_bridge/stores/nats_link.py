"""The NATS store's connection: nats-py is asyncio, so a ``NatsLink`` runs one event loop in a
thread of its own, connects on first use (once, whichever thread asks first), opens the
namespace's key-value buckets and its stream of run records, and runs each call of the
store there, bounded in time. What goes wrong on the way is ``StoreUnavailable``, in one
line.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

from cron_bridge.errors import StoreUnavailable

__all__ = ["IN_FLIGHT", "NatsLink", "bounded", "dec", "enc", "expires"]

T = TypeVar("T")
log = logging.getLogger(__name__)


class NatsLink:
    """One connection to NATS JetStream and the buckets of one namespace.

    Args:
        servers: ``nats://host:port`` of each server.
        user, password: the credentials, if any.
        prefix: names the buckets (``<prefix>-keys``, ``<prefix>-state``) and the stream
            (``<prefix>-runs``).
        timeout: seconds to connect, and to wait for any answer.
        history_limit: run records the stream keeps per job, when this link creates it.
    """

    def __init__(
        self,
        servers: list[str],
        user: str | None,
        password: str | None,
        *,
        prefix: str,
        timeout: float,
        history_limit: int,
    ) -> None:
        self.servers = servers
        self.prefix = prefix
        self._user, self._password = user, password
        self._timeout = timeout
        self._history_limit = history_limit
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._connecting: asyncio.Lock | None = None
        self.nc: Any = None
        self.js: Any = None
        self.keys: Any = None  # claims, locks and completion marks
        self.state: Any = None  # last claimed, replicas, control records

    @property
    def hosts(self) -> str:
        return ",".join(server.removeprefix("nats://") for server in self.servers)

    def run(self, make: Callable[[], Awaitable[T]], limit: float) -> T:
        """Run ``make()`` on the loop, connected, within ``limit`` seconds.

        Raises:
            StoreUnavailable: no connection, no answer in time, or an error of NATS.
        """
        loop = self._start_loop()
        future = asyncio.run_coroutine_threadsafe(self._with_connection(make, limit), loop)
        try:
            return future.result(limit + self._timeout * 2)
        except StoreUnavailable:
            raise
        except (TimeoutError, OSError) as exc:
            future.cancel()
            said = str(exc) or f"no answer within {limit:g} s"
            raise StoreUnavailable(f"NATS did not answer: {said}", host=self.hosts) from exc
        except Exception as exc:
            if is_nats_error(exc):
                raise StoreUnavailable(
                    f"NATS: {type(exc).__name__}: {exc}", host=self.hosts
                ) from exc
            raise

    def close(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None:
            return
        if self.nc is not None:
            with contextlib.suppress(Exception):  # closing: nothing to report
                asyncio.run_coroutine_threadsafe(self.nc.close(), loop).result(self._timeout)
        self.nc = None
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(self._timeout)
        if not loop.is_running():
            loop.close()

    def _start_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="cron-bridge-nats", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    async def _with_connection(self, make: Callable[[], Awaitable[T]], limit: float) -> T:
        if self.nc is None or self.nc.is_closed:
            if self._connecting is None:
                self._connecting = asyncio.Lock()
            async with self._connecting:  # callers from several threads: one connection
                if self.nc is None or self.nc.is_closed:
                    await self._connect()
        return await asyncio.wait_for(make(), limit)

    async def _connect(self) -> None:
        import nats
        from nats.js.api import KeyValueConfig, StreamConfig

        async def quiet(exc: Exception) -> None:
            # nats-py logs every failed connection attempt with its traceback; what fails
            # reaches the caller as StoreUnavailable, in one line.
            log.debug("NATS at %s: %s", self.hosts, exc)

        try:
            nc = await nats.connect(
                servers=self.servers,
                user=self._user,
                password=self._password,
                connect_timeout=self._timeout,
                max_reconnect_attempts=2,
                reconnect_time_wait=0.5,
                allow_reconnect=True,
                error_cb=quiet,
            )
        except Exception as exc:
            raise StoreUnavailable(f"cannot connect to NATS: {exc}", host=self.hosts) from exc
        from nats.js.errors import NotFoundError

        js = nc.jetstream(timeout=self._timeout)
        try:
            self.keys = await js.create_key_value(KeyValueConfig(bucket=f"{self.prefix}-keys"))
            self.state = await js.create_key_value(KeyValueConfig(bucket=f"{self.prefix}-state"))
            try:  # kept as the first process made it (its history_limit)
                await js.stream_info(f"{self.prefix}-runs")
            except NotFoundError:
                await js.add_stream(
                    StreamConfig(
                        name=f"{self.prefix}-runs",
                        subjects=[f"{self.prefix}.runs.*"],
                        max_msgs_per_subject=self._history_limit,
                    )
                )
        except Exception as exc:
            await nc.close()
            raise StoreUnavailable(f"NATS has no JetStream to use: {exc}", host=self.hosts) from exc
        self.nc, self.js = nc, js


def is_nats_error(exc: BaseException) -> bool:
    """Whether ``exc`` is nats-py's (or a timeout or connection error on its way)."""
    module = type(exc).__module__ or ""
    return module.startswith("nats") or isinstance(exc, asyncio.TimeoutError | ConnectionError)


# Requests a batch keeps unanswered at once. Each has its own timeout: 10,000 sent together
# queue on the server, and the last ones time out while waiting though it is answering.
IN_FLIGHT = 256


def enc(text: str) -> str:
    """A key or subject token for any text: base64url without padding (``[A-Za-z0-9_-]``)."""
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=") or "_"


def dec(token: str) -> bytes | None:
    """The bytes a key token names (for ``inbound.text`` to decode); None for a token that
    is no base64url (written past this store)."""
    try:
        return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except ValueError:  # binascii.Error
        return None


def expires(value: dict[str, Any]) -> int:
    expires = value.get("x")
    return expires if isinstance(expires, int) else 0


async def bounded(calls: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """Await ``calls`` (not yet started) with at most ``IN_FLIGHT`` unanswered at a time; the
    results in their order."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(call: Coroutine[Any, Any, T]) -> T:
        try:
            async with gate:
                return await call
        except BaseException:
            call.close()  # cancelled before it started: closed, not left "never awaited"
            raise

    made: list[Coroutine[Any, Any, T]] = []
    try:
        made.extend(calls)  # all made before any is started: one that cannot be made (a
    except BaseException:  # record that does not serialise) leaves none "never awaited"
        for call in made:
            call.close()
        raise
    return list(await asyncio.gather(*(one(call) for call in made)))
