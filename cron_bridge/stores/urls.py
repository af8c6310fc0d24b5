"""Building a store from its URL: the scheme picks the store, the query sets its options."""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import SplitResult, parse_qsl, urlsplit, urlunsplit

from cron_bridge.errors import ConfigError
from cron_bridge.plumbing.redaction import is_secret_name, redact_url
from cron_bridge.stores.base import Store
from cron_bridge.stores.memory import MemoryStore
from cron_bridge.stores.sqlite import SQLiteStore

__all__ = ["DEFAULT_STORE", "redact_url", "store_from_url"]

DEFAULT_STORE = "sqlite:///cron-bridge.db"
"""The store of a CLI command or a worker given none: a file in the working directory."""

_BOOL = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}

# Options each scheme reads from the query string, with how to read them.
_OPTIONS: dict[str, dict[str, type]] = {
    "redis": {
        "prefix": str,
        "connect_timeout": float,
        "history_limit": int,
        "wait_replicas": int,
        "wait_timeout": float,
        "sentinel_password": str,
    },
    "postgresql": {
        "schema": str,
        "table_prefix": str,
        "create_tables": bool,
        "connect_timeout": float,
        "history_limit": int,
        "pool_size": int,
    },
    "sqlite": {"connect_timeout": float, "history_limit": int},
    "nats": {"prefix": str, "connect_timeout": float, "history_limit": int},
    "memory": {"history_limit": int, "allow_local_cluster": bool},
}
_FAMILY = {
    "redis": "redis",
    "rediss": "redis",
    "redis+cluster": "redis",
    "redis+sentinel": "redis",
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "sqlite": "sqlite",
    "memory": "memory",
    "nats": "nats",
}


def store_from_url(url: str, **overrides: Any) -> Store:
    """Build the store a URL names; query parameters (and ``overrides``) set its options.

    Raises:
        ConfigError: an unknown scheme or option, or an option value of the wrong kind.
        ImportError: the store's driver is not installed, naming the extra to install.
    """
    shown = redact_url(url)  # every message below: never the password
    if not isinstance(url, str):
        raise ConfigError("expected a store URL", option="store", value=shown)
    try:
        parts = urlsplit(url)
        _check_ports(parts)
    except ValueError as exc:
        raise ConfigError(f"malformed store URL ({exc})", option="store", value=shown) from None
    family = _FAMILY.get(parts.scheme)
    if family is None:
        known = (
            "redis://, rediss://, redis+cluster://, redis+sentinel://, postgresql://, "
            "nats://, sqlite:///path, memory://"
        )
        raise ConfigError(
            f"unknown store scheme; expected one of {known}", option="store", value=shown
        )
    options: dict[str, Any] = {}
    passthrough = []
    for name, raw in parse_qsl(parts.query, keep_blank_values=True):
        kind = _OPTIONS[family].get(name)
        if kind is None:
            if family == "postgresql" and name in _LIBPQ:
                passthrough.append((name, raw))
                continue
            allowed = ", ".join(sorted(_OPTIONS[family]))
            value = "***" if is_secret_name(name) else raw
            raise ConfigError(f"unknown store option (known: {allowed})", option=name, value=value)
        options[name] = _read(name, raw, kind)
    options.update(overrides)
    clean = urlunsplit(parts._replace(query="&".join(f"{k}={v}" for k, v in passthrough)))
    if family == "memory":
        return MemoryStore(**options)
    if family == "sqlite":
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        if parts.netloc or not path:
            raise ConfigError(
                "expected sqlite:///relative/path or sqlite:////absolute/path",
                option="store",
                value=shown,
            )
        return SQLiteStore(path, **options)
    if family == "redis":
        from cron_bridge.stores.redis import RedisStore

        return RedisStore(clean, **options)
    if family == "nats":
        try:
            from cron_bridge.stores.nats import NatsStore
        except ImportError as exc:  # pragma: no cover - the extra is not installed
            raise ImportError(
                "the nats:// store needs nats-py: pip install 'cron-bridge[nats]'"
            ) from exc
        return NatsStore(clean, **options)
    from cron_bridge.stores.postgres import PostgresStore

    return PostgresStore(clean, **options)


# libpq connection parameters passed through to the server's driver untouched.
# Schemes whose URL may list several host:port pairs: Sentinels, NATS servers, and libpq's
# hosts tried in turn (``postgresql://u@h1:5432,h2:5432/db?target_session_attrs=read-write``,
# how a client finds the primary after a failover).
_MULTI_HOST = {"redis+sentinel", "nats", "postgresql", "postgres"}


def _check_ports(parts: SplitResult) -> None:
    """Raise ValueError for a port out of range or not a number, in each host:port pair."""
    if parts.scheme not in _MULTI_HOST or "," not in parts.netloc:
        parts.port  # noqa: B018 - reading it validates it (out of range, not a number)
        return
    for host in parts.netloc.rpartition("@")[2].split(","):
        urlsplit(f"//{host}").port  # noqa: B018 - the same check, pair by pair


_LIBPQ = {
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "application_name",
    "options",
    "user",
    "password",
    "host",
    "port",
    "dbname",
    "target_session_attrs",
}


# The allowed range of each number option, inclusive.
_RANGES: dict[str, tuple[float, float]] = {
    "connect_timeout": (0.001, 3600.0),
    "history_limit": (1, 1_000_000),
    "pool_size": (1, 1000),
    "wait_replicas": (0, 100),
    "wait_timeout": (0.001, 60.0),
}


def _read(name: str, raw: str, kind: type) -> Any:
    try:
        value = _BOOL[raw.lower()] if kind is bool else kind(raw)
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"expected a {kind.__name__}", option=name, value=raw) from exc
    low, high = _RANGES.get(name, (-math.inf, math.inf))
    if kind in (int, float) and not (math.isfinite(value) and low <= value <= high):
        raise ConfigError(f"expected a number from {low:g} to {high:g}", option=name, value=raw)
    return value
