"""The HTTP trigger and the dashboard as ASGI and WSGI apps: read the request (bounded), hand it
to ``TriggerHandler``, write the response; ``/healthz`` answered on the event loop itself."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from cron_bridge.http.wire import (
    MAX_BODY,
    STATUS,
    Receive,
    Request,
    Response,
    Scope,
    Send,
    head,
)
from cron_bridge.plumbing.redaction import escape_log
from cron_bridge.stores import Store

if TYPE_CHECKING:
    from cron_bridge.beat.replica import Beat
from cron_bridge.http.handler import TriggerHandler

__all__ = ["asgi_app", "log_request", "wsgi_app"]

log = logging.getLogger(__name__)


def asgi_app(
    beat: Beat,
    *,
    secret: str,
    path: str = "/_scheduler",
    max_concurrency: int = 16,
    namespaces: Mapping[str, str | Store] | None = None,
) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """An ASGI app serving the trigger and the dashboard under ``path``; the dashboard also
    shows the ``namespaces`` given (name to store or store URL), read-only, with a selector.

    ``/healthz`` is answered on the event loop itself; everything else runs in a pool of
    ``max_concurrency`` threads, and a request that finds them all busy gets 503 at once, so
    slow callers can never hold up the liveness probe.

    Raises:
        ConfigError: without a secret, or with one that is not one.
    """
    handler = TriggerHandler(beat, secret, path, namespaces)
    pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="cron-bridge-http")
    slots = threading.BoundedSemaphore(max_concurrency)

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
        refused = _refused_length(headers.get("content-length"))
        more = refused is None and scope["method"] in ("POST", "PUT", "PATCH")
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client went away (or the server's deadline cut it off)
            body += message.get("body", b"")
            more = message.get("more_body", False) and len(body) <= MAX_BODY
        client = scope.get("client") or ("unknown", 0)
        request = Request(
            scope["method"],
            _asgi_path(scope),
            headers,
            body,
            scope.get("query_string", b"").decode("latin-1"),
            client=str(client[0]),
            https=scope.get("scheme") == "https",
        )
        if refused is not None:
            response = refused
        elif len(body) > MAX_BODY:
            response = Response(413, {"error": "request body too large"})
        elif request.path == handler.health_path:
            response = handler.respond(request)  # no I/O: never waits behind other requests
        elif not slots.acquire(blocking=False):
            response = Response(503, {"error": "busy; try again"}, (("Retry-After", "1"),))
        else:
            try:
                loop = asyncio.get_running_loop()
                response = await loop.run_in_executor(pool, handler.respond, request)
            finally:
                slots.release()
        log_request(request, response)
        payload = response.encoded()
        raw = [(k.lower().encode(), v.encode("latin-1")) for k, v in head(response, payload)]
        await send({"type": "http.response.start", "status": response.status, "headers": raw})
        await send({"type": "http.response.body", "body": payload})

    return app


def _refused_length(declared: str | None) -> Response | None:
    """400 for a ``Content-Length`` that is not a length, 413 for one past ``MAX_BODY``,
    answered at once, before any of the body is read; None when it may be read."""
    if declared is None:
        return None
    text = declared.strip()
    if not (text.isascii() and text.isdigit()):
        return Response(400, {"error": "bad Content-Length"})
    if len(text) > 18 or int(text) > MAX_BODY:
        return Response(413, {"error": "request body too large"})
    return None


def _asgi_path(scope: Scope) -> str:
    """The full path: Starlette's ``Mount`` (and ASGI servers run with ``--root-path``) keep
    it whole and set ``root_path``; older mounts strip the prefix off ``path``."""
    path, root = str(scope["path"]), str(scope.get("root_path") or "")
    return path if not root or path.startswith(root + "/") or path == root else root + path


def log_request(request: Request, response: Response) -> None:
    """One access-log line per request, with control characters escaped."""
    log.info(
        "http %s %s %s %d",
        escape_log(request.client, 64),
        escape_log(request.method, 16),
        escape_log(request.path, 300),
        response.status,
    )


def wsgi_app(
    beat: Beat,
    *,
    secret: str,
    path: str = "/_scheduler",
    namespaces: Mapping[str, str | Store] | None = None,
) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    """A WSGI app serving the trigger and the dashboard under ``path`` (and ``namespaces``,
    as ``asgi_app``).

    Raises:
        ConfigError: without a secret.
    """
    handler = TriggerHandler(beat, secret, path, namespaces)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        headers = {
            key[5:].replace("_", "-").lower(): value
            for key, value in environ.items()
            if key.startswith("HTTP_")
        }
        if environ.get("CONTENT_TYPE"):
            headers["content-type"] = environ["CONTENT_TYPE"]
        refused = _refused_length(environ.get("CONTENT_LENGTH") or None)
        length = 0 if refused is not None else int(environ.get("CONTENT_LENGTH") or 0)
        if refused is not None:
            response = refused
        else:
            body = environ["wsgi.input"].read(length) if length > 0 else b""
            request = Request(
                # Mounted under a prefix (werkzeug's DispatcherMiddleware, a Django view),
                # the prefix is SCRIPT_NAME: the path served is both together.
                environ["REQUEST_METHOD"],
                environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", ""),
                headers,
                body,
                environ.get("QUERY_STRING", ""),
                client=str(environ.get("REMOTE_ADDR", "unknown")),
                https=environ.get("wsgi.url_scheme") == "https",
            )
            response = handler.respond(request)
            log_request(request, response)
        encoded = response.encoded()
        start_response(f"{response.status} {STATUS[response.status]}", head(response, encoded))
        return [encoded]

    return app
