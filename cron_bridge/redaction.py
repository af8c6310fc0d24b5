"""Text that is printed or logged, made safe: URLs without passwords, request lines without
control characters."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit, urlunsplit

__all__ = ["SECRET_PARAMS", "escape_log", "redact_text", "redact_url"]

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


# A URL's user-info password (``redis://:pw@host``, ``amqp://user:pw@host``), and a secret
# parameter written ``name=value`` or ``name: value`` (a query string, a DSN, a repr, JSON).
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/@:]*:)[^\s/@]+@")
_PARAM = re.compile(
    r"(?i)(?<![a-z0-9_])("
    + "|".join(sorted(SECRET_PARAMS, key=len, reverse=True))
    + r")(['\"]?\s*[=:]\s*['\"]?)(?!\*\*\*)[^\s&'\",;)}]+"
)


def redact_text(text: str) -> str:
    """``text`` (an error message, a traceback) with the passwords it shows as ``***``: those
    in URLs' user-info and the values of secret parameters (``password=``, ``token: ``)."""
    if "@" in text:
        text = _USERINFO.sub(r"\1***@", text)
    return _PARAM.sub(r"\1\2***", text)


def escape_log(text: str, limit: int = 2000) -> str:
    """``text`` with control characters escaped (no forged log lines) and cut at ``limit``."""
    escaped = text.encode("unicode_escape", "backslashreplace").decode("ascii")
    return escaped if len(escaped) <= limit else escaped[:limit] + "..."
