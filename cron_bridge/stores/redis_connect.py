"""Where a ``RedisStore`` connects: one server, a Redis Cluster, or the primary that Redis
Sentinel names.

``redis+sentinel://[user:password@]host[:port][,host[:port]...]/service[/db]`` lists the
Sentinels (port 26379 unless given) and names the monitored service; the client asks them
for the current primary and asks again after a failover. The user-info authenticates to the
data nodes; ``sentinel_password`` (a query option) to Sentinels that require one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
from redis.cluster import RedisCluster
from redis.sentinel import Sentinel

from cron_bridge.errors import ConfigError
from cron_bridge.plumbing.redaction import redact_url

__all__ = ["SentinelTarget", "connect", "parse_sentinel_url"]

SENTINEL_PORT = 26379
Client = redis.Redis | RedisCluster


@dataclass(frozen=True)
class SentinelTarget:
    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None

    @property
    def shown(self) -> str:
        """For messages and ``Store.url``: the hosts and the service, no credentials."""
        hosts = ",".join(
            f"[{host}]:{port}" if ":" in host else f"{host}:{port}" for host, port in self.sentinels
        )
        return f"redis+sentinel://{hosts}/{self.service}/{self.db}"


def parse_sentinel_url(url: str) -> SentinelTarget:
    """Read a ``redis+sentinel://`` URL (its query is read by the caller).

    Raises:
        ConfigError: no Sentinel, a bad port, no service name, or a bad database number.
    """
    shown = redact_url(url)
    parts = urlsplit(url)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    sentinels = []
    for item in (item.strip() for item in hosts.split(",")):
        if not item:
            raise ConfigError(
                "expected a Sentinel host between commas", option="store", value=shown
            )
        host, colon, port = item.rpartition(":") if not item.endswith("]") else (item, "", "")
        if not colon:
            host, port = item, str(SENTINEL_PORT)
        if not (port.isdigit() and 1 <= int(port) <= 65535):
            raise ConfigError(
                "expected host:port with a port from 1 to 65535 for each Sentinel",
                option="store",
                value=shown,
            )
        sentinels.append((host.strip("[]") or "localhost", int(port)))
    path = [segment for segment in parts.path.split("/") if segment]
    if not path or len(path) > 2:
        raise ConfigError(
            "expected redis+sentinel://host:26379[,host:26379...]/service[/db]",
            option="store",
            value=shown,
        )
    if len(path) == 2 and not path[1].isdigit():
        raise ConfigError(
            "expected a database number after the service name", option="store", value=shown
        )
    user, has_password, password = userinfo.partition(":")
    return SentinelTarget(
        sentinels=tuple(sentinels),
        service=unquote(path[0]),
        db=int(path[1]) if len(path) == 2 else 0,
        username=unquote(user) or None,
        password=unquote(password) if has_password else None,
    )


def connect(url: str, options: dict[str, Any], *, sentinel_password: str | None = None) -> Client:
    """A client for ``url``; ``options`` are redis-py connection options (timeouts, retry)."""
    scheme = urlsplit(url).scheme
    if scheme == "redis+cluster":
        return RedisCluster.from_url("redis" + url.removeprefix("redis+cluster"), **options)
    if scheme != "redis+sentinel":
        return redis.Redis.from_url(url, **options)
    target = parse_sentinel_url(url)
    timeouts: dict[str, Any] = {
        key: options[key] for key in ("socket_timeout", "socket_connect_timeout") if key in options
    }
    sentinel = Sentinel(
        list(target.sentinels),
        sentinel_kwargs={**timeouts, "password": sentinel_password},
        username=target.username,
        password=target.password,
        db=target.db,
    )
    client: redis.Redis = sentinel.master_for(target.service, **options)
    return client
