"""``RedisLink``: the one connection a ``RedisStore`` talks through, and how it talks.

It connects once (one try per call, no retry of redis-py's own: the beat decides when to try
again), counts each call's round trips, turns redis-py's errors into ``StoreUnavailable``
(saying what to do when it is about the password), names a key of the wrong Redis type
instead of failing (``redis_types``), and runs the scripts of ``lua/`` by their digest.
Replies that carry what the store holds are read undecoded (``raw``).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any, TypeVar
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.client import NEVER_DECODE
from redis.cluster import RedisCluster
from redis.exceptions import NoScriptError, RedisClusterException
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError

from cron_bridge.errors import StoreUnavailable
from cron_bridge.stores.base import StoreStats
from cron_bridge.stores.redis_connect import connect, parse_sentinel_url
from cron_bridge.stores.redis_types import is_wrong_type, warn_wrong_type

__all__ = ["Client", "RedisLink", "lua_source", "raw"]

T = TypeVar("T")
Client = redis.Redis | RedisCluster
# redis-py raises RedisClusterException, outside RedisError, when no cluster node answers.
ERRORS = (redis.RedisError, RedisClusterException)
_RAW: dict[str, Any] = {NEVER_DECODE: True}  # the reply as the server sent it: bytes


def raw(client: Any, *command: Any) -> Any:
    """Send ``command`` on a client or pipeline; its reply undecoded (bytes), whatever the
    client's ``decode_responses``."""
    return client.execute_command(*command, **_RAW)


def lua_source(name: str) -> str:
    """The source of the script ``lua/<name>.lua``."""
    return (resources.files("cron_bridge.stores") / "lua" / f"{name}.lua").read_text()


_NEEDS_PASSWORD = (
    "HELLO must be called with the client already authenticated",
    "NOAUTH",
    "Authentication required",
)


def explained(exc: BaseException) -> str:
    """redis-py's error, with what to do when it is about the password."""
    text = str(exc)
    if any(sign in text for sign in _NEEDS_PASSWORD):
        # Said without a URL to copy: what leaves the process is redacted, and a URL's
        # user-info, placeholder or not, is shown as ***.
        return (
            "the server needs a password, which goes in the URL before the host as "
            f":PASSWORD@ or USER:PASSWORD@ ({text})"
        )
    if "WRONGPASS" in text or "invalid password" in text or "invalid username-password" in text:
        return f"the server refused the user or password in the URL ({text})"
    return text


class RedisLink:
    """The connection of a store: to a URL's server (opened on first use, closed by
    ``close``), or a client the caller made (never closed here).

    Args:
        client_or_url: as ``RedisStore`` takes it.
        timeout: seconds to connect, and to wait for any answer.
        sentinel_password: for Sentinels that require a password.
        stats: where each call's round trips are counted.
    """

    def __init__(
        self,
        client_or_url: str | Client,
        *,
        timeout: float,
        sentinel_password: str | None,
        stats: StoreStats,
    ) -> None:
        self._timeout = timeout
        self._sentinel_password = sentinel_password
        self._stats = stats
        self._lock = threading.Lock()
        self._scripts: dict[str, tuple[str, str]] = {}  # name -> (source, sha1)
        self.shown: str | None = None  # the URL to show, when the given one is not it
        if isinstance(client_or_url, str):
            self._url = client_or_url
            self._owned = True
            self._client: Client | None = None
            parts = urlsplit(client_or_url)
            self.cluster = parts.scheme == "redis+cluster"
            if parts.scheme == "redis+sentinel":
                target = parse_sentinel_url(client_or_url)
                self.shown = target.shown
                self.host = f"{target.service} via {target.shown.split('/')[2]}"
            else:
                self.host = f"{parts.hostname or 'localhost'}:{parts.port or 6379}"
        else:
            self._client = client_or_url
            self._owned = False
            self.cluster = isinstance(client_or_url, RedisCluster)
            self.host = _client_host(client_or_url)
            self._url = f"{'redis+cluster' if self.cluster else 'redis'}://{self.host}"

    @property
    def url(self) -> str:
        """The URL, without its password or options."""
        if self.shown is not None:
            return self.shown
        parts = urlsplit(self._url)
        netloc = f"{parts.hostname or 'localhost'}" + (f":{parts.port}" if parts.port else "")
        return parts._replace(netloc=netloc, query="").geturl()

    def client(self) -> Client:
        """The client, connected on first use."""
        with self._lock:
            if self._client is None:
                # One try per call: the beat decides when to try again, and a call never
                # takes longer than the timeout.
                options: dict[str, Any] = {
                    "socket_connect_timeout": self._timeout,
                    "socket_timeout": self._timeout,
                    "retry": Retry(NoBackoff(), 0),
                    "decode_responses": False,  # decoded by inbound.text, not by redis-py
                }
                self._client = connect(
                    self._url, options, sentinel_password=self._sentinel_password
                )
            return self._client

    def call(
        self,
        work: Callable[[Client], T],
        *,
        pipelines: int = 0,
        commands: int = 1,
        key: str | None = None,
        holds: str = "",
        otherwise: Any = None,
    ) -> T:
        """Run ``work`` and count its round trips: one per command, one per node per pipeline.

        Args:
            key: the one key ``work`` touches; when it is of another type than ``holds``, the
                answer is ``otherwise`` (warned once), not ``StoreUnavailable``.
        """
        try:
            client = self.client()
            result = work(client)
        except MasterNotFoundError as exc:  # its text is the repr of every connection tried
            raise StoreUnavailable(
                "redis: no Sentinel named a reachable primary", host=self.host
            ) from exc
        except ERRORS as exc:
            if key is None or not is_wrong_type(exc):
                raise StoreUnavailable(f"redis: {explained(exc)}", host=self.host) from exc
            self.unusable(client, [key], holds)
            result = otherwise
        cluster = isinstance(client, RedisCluster)
        nodes = len(client.get_primaries()) if cluster else 1  # type: ignore[union-attr]
        self._stats.add(pipelines * nodes + commands)
        return result

    def unusable(self, client: Client, keys: Sequence[str], holds: str) -> None:
        """Warn once of each of ``keys`` the server found of the wrong type, by the type it
        holds (asked only now: a warning is said again when the type changes)."""
        try:
            if len(keys) == 1:
                found = [raw(client, "TYPE", keys[0])]
            else:
                pipe = client.pipeline(transaction=False)
                for key in keys:
                    raw(pipe, "TYPE", key)
                found = pipe.execute()
        except ERRORS as exc:
            raise StoreUnavailable(f"redis: {explained(exc)}", host=self.host) from exc
        for key, kind in zip(keys, found, strict=True):
            warn_wrong_type(key, kind, holds, "skipped")

    def replies(self, client: Client, pipe: Any, keys: Sequence[str], holds: str) -> list[Any]:
        """A pipeline's replies, one per command of ``keys`` in order, a command that met a key
        of the wrong type giving None (warned once); any other error raises."""
        replies = pipe.execute(raise_on_error=False)
        wrong = []
        for key, reply in zip(keys, replies, strict=True):
            if is_wrong_type(reply):
                wrong.append(key)
            elif isinstance(reply, Exception):
                raise reply
        if wrong:
            self.unusable(client, sorted(set(wrong)), holds)
        return [None if is_wrong_type(reply) else reply for reply in replies]

    def run_script(self, client: Client, name: str, keys: list[str], args: list[Any]) -> Any:
        """Run a script of ``lua/`` by its digest (loading it where the server lacks it); the
        reply undecoded."""
        if name not in self._scripts:
            source = lua_source(name)
            self._scripts[name] = (source, hashlib.sha1(source.encode()).hexdigest())
        source, sha = self._scripts[name]
        try:
            return raw(client, "EVALSHA", sha, len(keys), *keys, *args)
        except NoScriptError:
            client.script_load(source)
            return raw(client, "EVALSHA", sha, len(keys), *keys, *args)

    def close(self) -> None:
        """Close the connection this link opened; a client the caller gave stays open."""
        with self._lock:
            if self._owned and self._client is not None:
                self._client.close()
                self._client = None


def _client_host(client: Client) -> str:
    if isinstance(client, RedisCluster):
        node = client.get_default_node()  # type: ignore[no-untyped-call]
        return f"{node.host}:{node.port}" if node is not None else "redis-cluster"
    kwargs = client.connection_pool.connection_kwargs
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"
