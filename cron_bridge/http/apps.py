"""The HTTP trigger and the dashboard as ASGI and WSGI apps: read the request (bounded), hand it
to ``TriggerHandler``, write the response; ``/healthz`` answered on the event loop itself.

A body is bounded before any of it is read: the handler says how much the request may send
from its method, path and headers (``TriggerHandler.body_bound``: ``MAX_BODY``, or
``BULK_BODY`` for a bulk write of stored schedules with the bearer secret), a
``Content-Length`` past it is refused at once, and a body sent in chunks is read no further
than one chunk past it. A bulk body is read only in a slot of the ASGI app's pool, so no more
of them are held than it has threads. A response to a request whose body is left unread
closes the connection."""

from __future__ import annotations

import asyncio
import dataclasses
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
    has_body,
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
    slow callers can never hold up the liveness probe. A bulk write takes its thread before
    its body is read, and gets its 503 unread.

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
        request = _asgi_request(scope)
        bound = handler.body_bound(request)
        if isinstance(bound, Response):
            refused: Response | None = bound
            most = 0
        else:
            refused = _refused_length(request.headers.get("content-length"), bound)
            most = bound
        # A bulk body (up to BULK_BODY) is read only once it holds a slot of the pool, so that
        # at most max_concurrency of them are ever in memory: one more is refused unread.
        # Smaller bodies are read first: a slot held while a stranger trickles in 16 KiB would
        # let a few slow sockets without the secret lock every other caller out.
        held = False
        if refused is None and most > MAX_BODY:
            held = slots.acquire(blocking=False)
            refused = None if held else _busy()
        whole = not has_body(scope)  # the body read to its end, or none sent
        try:
            if refused is None and scope["method"] in ("POST", "PUT", "PATCH"):
                read = await _read_body(receive, most)
                if read is None:
                    return  # the client went away (or the server's deadline cut it off)
                body, whole = read
                request = dataclasses.replace(request, body=body)
                if len(body) > most:
                    refused = Response(413, {"error": "request body too large"})
            if refused is not None:
                response = refused
            elif request.path == handler.health_path:
                response = handler.respond(request)  # no I/O: never waits behind other requests
            elif not held and not (held := slots.acquire(blocking=False)):
                response = _busy()
            else:
                loop = asyncio.get_running_loop()
                response = await loop.run_in_executor(pool, handler.respond, request)
        finally:
            if held:
                slots.release()
        if not whole and scope.get("http_version", "1.1").startswith("1"):
            # The rest of the body is never read: the connection ends with this answer, or
            # the server would go on parsing what follows as if it were read (uvicorn answers
            # a malformed rest again, after this answer, and fails on it). HTTP/2 has no such
            # header (a stream left unread is reset, the connection unharmed).
            response = dataclasses.replace(
                response, headers=(*response.headers, ("Connection", "close"))
            )
        log_request(request, response)
        payload = response.encoded()
        raw = [(k.lower().encode(), v.encode("latin-1")) for k, v in head(response, payload)]
        await send({"type": "http.response.start", "status": response.status, "headers": raw})
        await send({"type": "http.response.body", "body": payload})

    return app


def _asgi_request(scope: Scope) -> Request:
    """The request an ASGI scope carries, its body not read yet."""
    client = scope.get("client") or ("unknown", 0)
    return Request(
        scope["method"],
        _asgi_path(scope),
        {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]},
        b"",
        scope.get("query_string", b"").decode("latin-1"),
        client=str(client[0]),
        https=scope.get("scheme") == "https",
    )


async def _read_body(receive: Receive, most: int) -> tuple[bytes, bool] | None:
    """The body, read no further than one chunk past ``most`` bytes, and whether it was read
    to its end; None when the client went away."""
    chunks: list[bytes] = []  # joined once: a body of megabytes comes in many chunks
    size, more = 0, True
    while more and size <= most:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        more = message.get("more_body", False)
    return b"".join(chunks), not more


def _busy() -> Response:
    return Response(503, {"error": "busy; try again"}, (("Retry-After", "1"),))


def _refused_length(declared: str | None, bound: int = MAX_BODY) -> Response | None:
    """400 for a ``Content-Length`` that is not a length, 413 for one past ``bound``,
    answered at once, before any of the body is read; None when it may be read."""
    if declared is None:
        return None
    text = declared.strip()
    if not (text.isascii() and text.isdigit()):
        return Response(400, {"error": "bad Content-Length"})
    if len(text) > 18 or int(text) > bound:
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
        request = Request(
            # Mounted under a prefix (werkzeug's DispatcherMiddleware, a Django view), the
            # prefix is SCRIPT_NAME: the path served is both together.
            environ["REQUEST_METHOD"],
            environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", ""),
            headers,
            b"",
            environ.get("QUERY_STRING", ""),
            client=str(environ.get("REMOTE_ADDR", "unknown")),
            https=environ.get("wsgi.url_scheme") == "https",
        )
        bound = handler.body_bound(request)
        if isinstance(bound, Response):
            refused: Response | None = bound
        else:
            refused = _refused_length(environ.get("CONTENT_LENGTH") or None, bound)
        if refused is not None:
            response = refused
        else:
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length) if length > 0 else b""
            request = dataclasses.replace(request, body=body)
            response = handler.respond(request)
        log_request(request, response)
        encoded = response.encoded()
        start_response(f"{response.status} {STATUS[response.status]}", head(response, encoded))
        return [encoded]

    return app
