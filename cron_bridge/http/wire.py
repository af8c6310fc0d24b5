"""The HTTP wire the apps and handlers share: a request as the handler sees it, a response,
status lines and the headers every response carries, whatever server runs the app.

A response's body is JSON or a page, and a page is ``Markup`` (``cron_bridge.http.html``):
text that was escaped as it was built. Every response carries the dashboard's
``Content-Security-Policy`` (only its own script and style), ``nosniff`` and no referrer;
JSON is written with ``<``, ``>`` and ``&`` escaped, so no answer holds markup from input."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs

from cron_bridge.http.html import Markup
from cron_bridge.http.layout import CONTENT_SECURITY_POLICY

__all__ = [
    "BULK_BODY",
    "COOKIE",
    "MAX_BODY",
    "STATUS",
    "Receive",
    "Request",
    "Response",
    "Scope",
    "Send",
    "has_body",
    "head",
]

STATUS = {
    200: "OK",
    303: "See Other",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Content Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}

COOKIE = "cron_bridge_session"
MAX_BODY = 16 * 1024  # a login or a button press; anything larger is refused
# A bulk write of stored schedules (``api_schedules``: 100,000 tenants are some 15 MiB of JSON
# lines), only for a request to a bulk route that carries the bearer secret: the route and the
# secret are checked before any of the body is read (``TriggerHandler.body_bound``).
BULK_BODY = 16 * 1024 * 1024

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str  # percent-decoded once, by the server
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names, latin-1 text
    body: bytes = b""
    query: str = ""
    client: str = "unknown"  # the peer's address: failed authentications are counted by it
    https: bool = False  # the request came over https (directly or from a trusted proxy)

    def form(self) -> dict[str, str]:
        if not self.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            return {}
        parsed = parse_qs(self.body.decode("utf-8", "replace"), keep_blank_values=True)
        return {key: values[-1] for key, values in parsed.items()}

    def cookie(self, name: str) -> str | None:
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(self.headers.get("cookie", ""))
        except Exception:  # noqa: BLE001 - a malformed cookie header is no cookie
            return None
        morsel = jar.get(name)
        return morsel.value if morsel is not None else None


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: dict[str, Any] | Markup
    headers: tuple[tuple[str, str], ...] = ()

    def encoded(self) -> bytes:
        if isinstance(self.body, Markup):
            return self.body.encode("utf-8", "replace")
        text = json.dumps(self.body)  # ASCII: control characters and the rest escaped
        return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()

    @property
    def content_type(self) -> str:
        if isinstance(self.body, Markup):
            return "text/html; charset=utf-8"
        return "application/json"


def has_body(scope: Scope) -> bool:
    """Whether an ASGI request says a body follows (as HTTP/1.1 frames one: a length or
    chunks)."""
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


def head(response: Response, body: bytes) -> list[tuple[str, str]]:
    return [
        ("Content-Type", response.content_type),
        ("Content-Length", str(len(body))),
        ("Cache-Control", "no-store"),
        ("X-Content-Type-Options", "nosniff"),
        ("X-Frame-Options", "DENY"),
        ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
        ("Referrer-Policy", "no-referrer"),
        *response.headers,
    ]


def redirect(location: str, *extra: tuple[str, str]) -> Response:
    """303 to ``location`` (after a form), with ``extra`` headers."""
    return Response(303, Markup(), (("Location", location), *extra))
