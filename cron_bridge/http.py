"""The HTTP trigger and the dashboard, as ASGI or WSGI apps, under one secret.

No web framework is needed: both apps share one small request handler.

- ``GET`` or ``POST <path>/run/<job>`` with ``Authorization: Bearer <secret>``:
  ``200 {"outcome", "occurrence_id", "duration_ms"}`` once the job finished (a queue target:
  once enqueued), ``401`` for a wrong or missing token, ``404`` for an unknown job, ``500``
  when the run failed, ``503`` when the store could not be reached (the job did not run).
- ``GET <path>/healthz`` needs no token: ``200 {"replica", "running", "store_reachable"}``
  while the beat's loop runs, ``503`` once it stopped (a liveness probe).
- ``<path>/`` is the dashboard (``cron_bridge.dashboard``): the bearer token, or a login form
  that sets an HttpOnly, SameSite=Strict cookie. Without either it shows nothing of the jobs.
  Its buttons post forms carrying a CSRF token.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, unquote

from cron_bridge import dashboard
from cron_bridge.errors import ConfigError, StoreUnavailable

if TYPE_CHECKING:
    from cron_bridge.beat import Beat

__all__ = ["asgi_app", "wsgi_app"]

log = logging.getLogger(__name__)

_STATUS = {
    200: "OK",
    303: "See Other",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Content Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
_FAILED = {"failed", "aborted"}
COOKIE = "cron_bridge_session"
MAX_BODY = 16 * 1024  # a login or a button press; anything larger is refused

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names
    body: bytes = b""
    query: str = ""

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
    body: dict[str, Any] | str
    headers: tuple[tuple[str, str], ...] = ()

    def encoded(self) -> bytes:
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body).encode()

    @property
    def content_type(self) -> str:
        if isinstance(self.body, str):
            return "text/html; charset=utf-8"
        return "application/json"


class TriggerHandler:
    """The request logic both apps share."""

    def __init__(self, beat: Beat, secret: str, path: str) -> None:
        if not secret:
            raise ConfigError(
                "the HTTP trigger refuses to start without a secret", option="secret", value=""
            )
        self.beat = beat
        self._secret = secret.encode()
        self.base = path.rstrip("/")
        self.prefix = self.base + "/run/"
        self.health_path = self.base + "/healthz"
        # Derived from the secret: the cookie never holds the secret itself, and both change
        # when the secret does.
        self._session = self._derive("session")
        self.csrf = self._derive("csrf")

    def _derive(self, purpose: str) -> str:
        return hmac.new(self._secret, f"cron-bridge {purpose}".encode(), hashlib.sha256).hexdigest()

    def authorised(self, authorization: str | None) -> bool:
        scheme, _, token = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            token.strip().encode(), self._secret
        )

    def _signed_in(self, request: Request) -> bool:
        cookie = request.cookie(COOKIE)
        return cookie is not None and hmac.compare_digest(cookie.encode(), self._session.encode())

    def respond(self, request: Request) -> Response:
        path = request.path
        if path == self.health_path:
            # For liveness probes, without the secret: says nothing of the jobs.
            health = self.beat.health()
            return Response(200 if health["running"] else 503, health)
        try:
            if path in (self.base, self.base + "/", self.base + "/login", self.base + "/logout"):
                return self._dashboard(request)
            if path.startswith(self.base + "/jobs/"):
                return self._dashboard(request)
            if path.startswith(self.prefix) and "/" not in path[len(self.prefix) :]:
                return self._run(request)
        except StoreUnavailable as exc:
            return Response(503, {"error": str(exc)})
        return Response(404, {"error": "not found"})

    def _run(self, request: Request) -> Response:
        form = request.form()
        from_page = "csrf" in form and self._signed_in(request)
        if not from_page and not self.authorised(request.headers.get("authorization")):
            # Checked before the job name, so a caller without the secret learns nothing.
            return Response(401, {"error": "unauthorized"}, (("WWW-Authenticate", "Bearer"),))
        if request.method not in ("GET", "POST"):
            return Response(405, {"error": "use GET or POST"}, (("Allow", "GET, POST"),))
        if from_page and not hmac.compare_digest(form["csrf"].encode(), self.csrf.encode()):
            return Response(403, {"error": "bad form token; reload the page"})
        name = unquote(request.path[len(self.prefix) :])
        if name not in {job.name for job in self.beat.jobs()}:
            return Response(404, {"error": f"no job called {name!r}"})
        result = self.beat.trigger(name, force=from_page and form.get("force") == "1")
        if from_page:
            said = f"{result.outcome}: {result.occurrence_id}"
            if result.error or result.reason:
                said += f" ({result.error or result.reason})"
            return self._redirect(f"{self.base}/jobs/{quote(name, safe='')}?said={quote(said)}")
        body: dict[str, Any] = {
            "outcome": result.outcome,
            "occurrence_id": result.occurrence_id,
            "duration_ms": result.duration_ms,
        }
        if result.error or result.reason:
            body["error"] = result.error or result.reason
        return Response(500 if result.outcome in _FAILED else 200, body)

    def _dashboard(self, request: Request) -> Response:
        path, method = request.path, request.method
        if path == self.base + "/login":
            if method != "POST":
                return self._redirect(self.base + "/")
            given = request.form().get("secret", "").encode()
            if not hmac.compare_digest(given, self._secret):
                return Response(401, dashboard.login_page(self.base, wrong=True))
            cookie = f"{COOKIE}={self._session}; Path={self.base}/; HttpOnly; SameSite=Strict"
            return self._redirect(self.base + "/", ("Set-Cookie", cookie))
        signed_in = self._signed_in(request)
        if not signed_in and not self.authorised(request.headers.get("authorization")):
            return Response(401, dashboard.login_page(self.base))
        if path == self.base + "/logout":
            token = request.form().get("csrf", "").encode()
            if method != "POST" or not hmac.compare_digest(token, self.csrf.encode()):
                return Response(403, {"error": "sign out with the page's button"})
            cookie = f"{COOKIE}=; Path={self.base}/; HttpOnly; SameSite=Strict; Max-Age=0"
            return self._redirect(self.base + "/", ("Set-Cookie", cookie))
        if method != "GET":
            return Response(405, {"error": "use GET"}, (("Allow", "GET"),))
        if path in (self.base, self.base + "/"):
            return Response(200, dashboard.overview_page(self.beat, self.base, self.csrf))
        name = unquote(path[len(self.base + "/jobs/") :])
        job = next((j for j in self.beat.jobs() if j.name == name), None)
        if job is None:
            return Response(404, {"error": f"no job called {name!r}"})
        said = parse_qs(request.query).get("said", [None])[-1]
        return Response(200, dashboard.job_page(self.beat, self.base, self.csrf, job, said))

    @staticmethod
    def _redirect(location: str, *extra: tuple[str, str]) -> Response:
        return Response(303, "", (("Location", location), *extra))


def _head(response: Response, body: bytes) -> list[tuple[str, str]]:
    return [
        ("Content-Type", response.content_type),
        ("Content-Length", str(len(body))),
        ("Cache-Control", "no-store"),
        ("X-Content-Type-Options", "nosniff"),
        ("X-Frame-Options", "DENY"),
        *response.headers,
    ]


def asgi_app(
    beat: Beat, *, secret: str, path: str = "/_scheduler"
) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """An ASGI app serving the trigger and the dashboard under ``path``.

    Raises:
        ConfigError: without a secret.
    """
    handler = TriggerHandler(beat, secret, path)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        body = b""
        more = scope["method"] in ("POST", "PUT", "PATCH")
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False) and len(body) <= MAX_BODY
        request = Request(
            scope["method"], scope["path"], headers, body,
            scope.get("query_string", b"").decode("latin-1"),
        )  # fmt: skip
        if len(body) > MAX_BODY:
            response = Response(413, {"error": "request body too large"})
        else:
            response = await asyncio.to_thread(handler.respond, request)
        payload = response.encoded()
        raw = [(k.lower().encode(), v.encode("latin-1")) for k, v in _head(response, payload)]
        await send({"type": "http.response.start", "status": response.status, "headers": raw})
        await send({"type": "http.response.body", "body": payload})

    return app


def wsgi_app(
    beat: Beat, *, secret: str, path: str = "/_scheduler"
) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    """A WSGI app serving the trigger and the dashboard under ``path``.

    Raises:
        ConfigError: without a secret.
    """
    handler = TriggerHandler(beat, secret, path)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        headers = {
            key[5:].replace("_", "-").lower(): value
            for key, value in environ.items()
            if key.startswith("HTTP_")
        }
        if environ.get("CONTENT_TYPE"):
            headers["content-type"] = environ["CONTENT_TYPE"]
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > MAX_BODY:
            response = Response(413, {"error": "request body too large"})
        else:
            body = environ["wsgi.input"].read(length) if length > 0 else b""
            request = Request(
                environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""), headers, body,
                environ.get("QUERY_STRING", ""),
            )  # fmt: skip
            response = handler.respond(request)
        encoded = response.encoded()
        start_response(f"{response.status} {_STATUS[response.status]}", _head(response, encoded))
        return [encoded]

    return app
