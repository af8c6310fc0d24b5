"""Text that is printed or logged, made safe: URLs without passwords, request lines without
control characters."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit, urlunsplit

__all__ = ["SECRET_PARAMS", "escape_log", "redact_url"]

SECRET_PARAMS = {"password", "pass", "passwd", "secret", "token", "sslpassword",
                 "sentinel_password"}  # fmt: skip


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
            f"{key}=***" if key.lower() in SECRET_PARAMS else f"{key}={value}"
            for key, value in parse_qsl(parts.query, keep_blank_values=True)
        )
        if netloc == parts.netloc and query == parts.query:
            return str(url)  # nothing to hide (and sqlite:/// keeps its slashes)
        return urlunsplit(parts._replace(netloc=netloc, query=query))
    except ValueError:
        return "***"


def escape_log(text: str, limit: int = 2000) -> str:
    """``text`` with control characters escaped (no forged log lines) and cut at ``limit``."""
    escaped = text.encode("unicode_escape", "backslashreplace").decode("ascii")
    return escaped if len(escaped) <= limit else escaped[:limit] + "..."
