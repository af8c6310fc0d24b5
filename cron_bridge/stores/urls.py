"""Building a store from its URL: the scheme picks the store, the query sets its options."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from cron_bridge.errors import ConfigError
from cron_bridge.stores.base import Store
from cron_bridge.stores.memory import MemoryStore
from cron_bridge.stores.sqlite import SQLiteStore

__all__ = ["redact_url", "store_from_url"]

_SECRET_PARAMS = {"password", "pass", "passwd", "secret", "token", "sslpassword"}


def redact_url(url: str) -> str:
    """``url`` with its password (in the user-info or a ``password=`` parameter) as ``***``,
    safe to print and log. Never raises: text that is not a URL comes back masked whole."""
    try:
        parts = urlsplit(str(url))
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, host = netloc.rpartition("@")
            user, has_password, _ = userinfo.partition(":")
            netloc = f"{user}:***@{host}" if has_password else f"{userinfo}@{host}"
        query = "&".join(
            f"{key}=***" if key.lower() in _SECRET_PARAMS else f"{key}={value}"
            for key, value in parse_qsl(parts.query, keep_blank_values=True)
        )
        if netloc == parts.netloc and query == parts.query:
            return str(url)  # nothing to hide (and sqlite:/// keeps its slashes)
        return urlunsplit(parts._replace(netloc=netloc, query=query))
    except ValueError:
        return "***"


_BOOL = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}

# Options each scheme reads from the query string, with how to read them.
_OPTIONS: dict[str, dict[str, type]] = {
    "redis": {"prefix": str, "connect_timeout": float, "history_limit": int},
    "postgresql": {
        "schema": str,
        "table_prefix": str,
        "create_tables": bool,
        "connect_timeout": float,
        "history_limit": int,
        "pool_size": int,
    },
    "sqlite": {"connect_timeout": float, "history_limit": int},
    "memory": {"history_limit": int, "allow_local_cluster": bool},
}
_FAMILY = {
    "redis": "redis",
    "rediss": "redis",
    "redis+cluster": "redis",
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "sqlite": "sqlite",
    "memory": "memory",
}


def store_from_url(url: str, **overrides: Any) -> Store:
    """Build the store a URL names; query parameters (and ``overrides``) set its options.

    Raises:
        ConfigError: an unknown scheme or option, or an option value of the wrong kind.
        ImportError: the store's driver is not installed, naming the extra to install.
    """
    parts = urlsplit(url)
    family = _FAMILY.get(parts.scheme)
    if family is None:
        known = "redis://, rediss://, redis+cluster://, postgresql://, sqlite:///path, memory://"
        raise ConfigError(
            f"unknown store scheme; expected one of {known}", option="store", value=url
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
            raise ConfigError(f"unknown store option (known: {allowed})", option=name, value=raw)
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
                value=url,
            )
        return SQLiteStore(path, **options)
    if family == "redis":
        from cron_bridge.stores.redis import RedisStore

        return RedisStore(clean, **options)
    from cron_bridge.stores.postgres import PostgresStore

    return PostgresStore(clean, **options)


# libpq connection parameters passed through to the server's driver untouched.
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


def _read(name: str, raw: str, kind: type) -> Any:
    try:
        if kind is bool:
            return _BOOL[raw.lower()]
        return kind(raw)
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"expected a {kind.__name__}", option=name, value=raw) from exc
