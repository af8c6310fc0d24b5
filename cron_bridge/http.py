"""The HTTP trigger: ``GET`` or ``POST <path>/run/<job>`` with a bearer token, as ASGI or WSGI.

No web framework is needed: both apps share one small request handler. Responses:
``200 {"outcome", "occurrence_id", "duration_ms"}`` once the job finished (a queue target:
once enqueued), ``401`` for a wrong or missing token, ``404`` for an unknown job, ``500`` when
the run failed, ``503`` when the store could not be reached (the job did not run).
``GET <path>/healthz`` needs no token: ``200 {"replica", "running", "store_reachable"}`` while
the beat's loop runs, ``503`` once it stopped (a liveness probe).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from cron_bridge.errors import ConfigError, StoreUnavailable

if TYPE_CHECKING:
    from cron_bridge.beat import Beat

__all__ = ["asgi_app", "wsgi_app"]

log = logging.getLogger(__name__)

_STATUS = {
    200: "OK",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
_FAILED = {"failed", "aborted"}

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: dict[str, Any]
    headers: tuple[tuple[str, str], ...] = ()

    def encoded(self) -> bytes:
        return json.dumps(self.body).encode()


class TriggerHandler:
    """The request logic both apps share."""

    def __init__(self, beat: Beat, secret: str, path: str) -> None:
        if not secret:
            raise ConfigError(
                "the HTTP trigger refuses to start without a secret", option="secret", value=""
            )
        self.beat = beat
        self._secret = secret.encode()
        self.prefix = path.rstrip("/") + "/run/"
        self.health_path = path.rstrip("/") + "/healthz"

    def authorised(self, authorization: str | None) -> bool:
        scheme, _, token = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            token.strip().encode(), self._secret
        )

    def handle(self, method: str, path: str, authorization: str | None) -> Response:
        if path == self.health_path:
            # For liveness probes, without the secret: says nothing of the jobs.
            health = self.beat.health()
            return Response(200 if health["running"] else 503, health)
        if not path.startswith(self.prefix) or "/" in path[len(self.prefix) :]:
            return Response(404, {"error": "not found"})
        if not self.authorised(authorization):
            # Checked before the job name, so a caller without the secret learns nothing.
            return Response(401, {"error": "unauthorized"}, (("WWW-Authenticate", "Bearer"),))
        if method not in ("GET", "POST"):
            return Response(405, {"error": "use GET or POST"}, (("Allow", "GET, POST"),))
        name = unquote(path[len(self.prefix) :])
        if name not in {job.name for job in self.beat.jobs()}:
            return Response(404, {"error": f"no job called {name!r}"})
        try:
            result = self.beat.trigger(name)
        except StoreUnavailable as exc:
            return Response(503, {"error": str(exc)})
        body = {
            "outcome": result.outcome,
            "occurrence_id": result.occurrence_id,
            "duration_ms": result.duration_ms,
        }
        if result.error or result.reason:
            body["error"] = result.error or result.reason
        return Response(500 if result.outcome in _FAILED else 200, body)


def asgi_app(
    beat: Beat, *, secret: str, path: str = "/_scheduler"
) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """An ASGI app serving the trigger under ``path``.

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
        response = await asyncio.to_thread(
            handler.handle, scope["method"], scope["path"], headers.get("authorization")
        )
        body = response.encoded()
        raw_headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        raw_headers += [(k.lower().encode(), v.encode()) for k, v in response.headers]
        await send(
            {"type": "http.response.start", "status": response.status, "headers": raw_headers}
        )
        await send({"type": "http.response.body", "body": body})

    return app


def wsgi_app(
    beat: Beat, *, secret: str, path: str = "/_scheduler"
) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    """A WSGI app serving the trigger under ``path``.

    Raises:
        ConfigError: without a secret.
    """
    handler = TriggerHandler(beat, secret, path)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        response = handler.handle(
            environ["REQUEST_METHOD"],
            environ.get("PATH_INFO", ""),
            environ.get("HTTP_AUTHORIZATION"),
        )
        body = response.encoded()
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        start_response(
            f"{response.status} {_STATUS[response.status]}", headers + list(response.headers)
        )
        return [body]

    return app
