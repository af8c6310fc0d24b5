"""Serving the HTTP app from the beat process: uvicorn on its own thread, hardened.

Each protection, and what gives it:

- **A deadline for each whole request**: a connection must send a complete request, its body
  included, within ``REQUEST_TIMEOUT`` of opening (and of its previous response), or it is
  closed, whether it sends nothing, its headers a byte at a time, or a body that never ends.
  uvicorn has no such deadline (``timeout_keep_alive`` runs only after a response and starts
  again at every byte received), so it is kept here, in two halves of one clock: a protocol
  in front of uvicorn's h11 protocol (``_Connection``, asyncio's ``Protocol`` interface: when
  a connection opens and closes) and a wrapper of the app (``_reporting``, ASGI: when its
  request has been read whole and when its response has gone).
- **A cap that never locks the probe out**: at most ``MAX_CONNECTIONS`` are open at once; one
  more makes room by closing the oldest one still waiting for its request, and only when
  every connection is busy with a whole request is the new one closed (``_Connections``).
  uvicorn's ``limit_concurrency`` answers 503 past its cap instead, which would keep the
  liveness probe out behind a thousand sockets that send nothing.
- **Idle kept-alive connections** close after ``KEEP_ALIVE`` seconds: ``timeout_keep_alive``.
- **Headers** are at most 16 KiB (refused past that, before the app): uvicorn's
  ``h11_max_incomplete_event_size``. Bodies are bounded by the app (``apps``: ``MAX_BODY``,
  a ``Content-Length`` refused before any of the body is read).
- ``/healthz`` is answered on the event loop (see ``cron_bridge.http.asgi_app``), so requests
  waiting for a run never hold up the liveness probe.
- uvicorn's own access log is off (``access_log``): the app logs one escaped line per request.
- **A malformed body** is answered 400 by uvicorn, with one warning line, and the connection
  closed: the app closes a connection whose body it leaves unread (so uvicorn never parses the
  rest after the app's answer), and an answer of the app's that comes after uvicorn's own is
  dropped (``_reporting``), where uvicorn would log a traceback.
- ``X-Forwarded-Proto`` and ``X-Forwarded-For`` are believed only from ``forwarded_allow_ips``.

What this leans on beyond uvicorn's documented options: where its h11 protocol is and the
arguments it is built with (handed over untouched), and that it starts a request's task from
``data_received``, so the task inherits the context naming its connection; and that once it
has answered a request itself it closes the connection, and takes an app that then ends without
an answer as one whose client went away. pyproject.toml pins
uvicorn to the versions this was tested on, and ``tests/test_http_serve.py`` checks that the
installed one is among them and that the two halves still meet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from contextvars import ContextVar
from typing import Any, ClassVar

from cron_bridge.errors import ConfigError
from cron_bridge.http.wire import Receive, Scope, Send, has_body

__all__ = ["HttpServer", "serve"]

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = 10.0
KEEP_ALIVE = 5.0
MAX_CONNECTIONS = 1000
MAX_HEADERS = 16 * 1024

# The connection whose bytes are being handed to uvicorn: the task it starts for a request
# copies the context, so the app's wrapper finds the connection it serves.
_serving: ContextVar[_Connection | None] = ContextVar("cron_bridge_connection", default=None)


class _Connections:
    """The open connections of one server, oldest first, under ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[_Connection, None] = {}  # a dict keeps the order they opened in

    def admit(self, connection: _Connection) -> bool:
        """Count ``connection`` in. At the cap, the oldest connection still waiting for its
        request is closed to make room; False when none is (every one is busy with a whole
        request): ``connection`` is then not counted in, and must close."""
        if len(self._open) >= self.limit:
            waiting = next((c for c in self._open if c.waiting), None)
            if waiting is None:
                return False
            waiting.close()
        self._open[connection] = None
        return True

    def discard(self, connection: _Connection) -> None:
        self._open.pop(connection, None)


class _Connection(asyncio.Protocol):
    """One connection: uvicorn's h11 protocol behind a deadline for each whole request.

    The deadline is set when the connection opens and again when a response has gone, and
    cleared when the app has read its request whole (``request_read`` and ``response_sent``,
    told by ``_reporting``); when it passes, the connection is closed.
    """

    connections: ClassVar[_Connections]  # one per server (``_protocol``)
    inner: ClassVar[type[asyncio.Protocol]]  # uvicorn's h11 protocol

    def __init__(self, **built_with: Any) -> None:
        self._inner = self.inner(**built_with)
        self._transport: asyncio.BaseTransport | None = None
        self._deadline: asyncio.TimerHandle | None = None

    @property
    def closing(self) -> bool:
        """Closed or closing: nothing more can be answered on it."""
        return self._transport is None or self._transport.is_closing()

    @property
    def waiting(self) -> bool:
        """No whole request yet (or, kept alive, none since the last response)."""
        return self._deadline is not None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._inner.connection_made(transport)
        if not self.connections.admit(self):
            transport.close()
            return
        self._arm()

    def data_received(self, data: bytes) -> None:
        token = _serving.set(self)
        try:
            self._inner.data_received(data)
        finally:
            _serving.reset(token)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.connections.discard(self)
        self._inner.connection_lost(exc)

    def request_read(self) -> None:
        """The app has the whole request: its own handling takes over."""
        self._disarm()

    def response_sent(self) -> None:
        """The response has gone: the next request is due within the deadline."""
        if self._transport is not None and not self._transport.is_closing():
            self._arm()

    def close(self) -> None:
        self._disarm()
        self.connections.discard(self)
        if self._transport is not None:
            self._transport.close()

    def _arm(self) -> None:
        self._disarm()
        self._deadline = asyncio.get_running_loop().call_later(REQUEST_TIMEOUT, self.close)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None


def _protocol(limit: int) -> type[asyncio.Protocol]:
    """The protocol class of one server: its connections are counted apart from others'."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Connection(_Connection):
        connections = _Connections(limit)
        inner = H11Protocol

    return Connection


def _reporting(app: Any) -> Any:
    """``app``, telling the connection it serves when its request has been read whole and when
    its response has gone (with no connection of ours in the context, ``app`` as it is)."""

    async def reporting(scope: Scope, receive: Receive, send: Send) -> None:
        connection = _serving.get()
        if connection is None or scope["type"] != "http":
            await app(scope, receive, send)
            return
        if not has_body(scope):
            connection.request_read()
        sent = False

        async def receiving() -> Any:
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                connection.request_read()
            return message

        async def sending(message: Any) -> None:
            nonlocal sent
            if connection.closing:
                # Most often uvicorn has answered the request itself (400 for a malformed body
                # the app had not read yet) and closed the connection: its h11 state takes no
                # other answer, and the send would raise (a traceback in the log). The answer
                # is dropped once uvicorn has seen the connection go, so that it takes the
                # request as ended by the client, not as one the app left unanswered.
                while (await receive())["type"] != "http.disconnect":
                    pass
                return
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                sent = True
                connection.response_sent()

        try:
            await app(scope, receiving, sending)
        finally:
            if not sent:  # uvicorn answers it (500) and closes; if it kept it, the deadline runs
                connection.response_sent()

    return reporting


class HttpServer:
    """A running uvicorn server; ``shutdown()`` stops it."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    def shutdown(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)


def serve(app: Any, host: str, port: int, *, forwarded_allow_ips: str = "127.0.0.1") -> HttpServer:
    """Serve the ASGI ``app`` on ``host:port`` from a background thread.

    Raises:
        ConfigError: uvicorn is missing, or the address cannot be listened on.
    """
    try:
        import uvicorn
    except ImportError as exc:  # pragma: no cover - a core dependency
        raise ConfigError('the HTTP server needs uvicorn: pip install "cron-bridge"') from exc
    config = uvicorn.Config(
        _reporting(app),
        host=host,
        port=port,
        http=_protocol(MAX_CONNECTIONS),
        lifespan="off",
        access_log=False,
        log_config=None,
        timeout_keep_alive=int(KEEP_ALIVE),
        proxy_headers=True,
        forwarded_allow_ips=forwarded_allow_ips,
        server_header=False,
        h11_max_incomplete_event_size=MAX_HEADERS,
    )
    # Run from a thread, uvicorn leaves the process's signals to the beat.
    server = uvicorn.Server(config)

    def run() -> None:
        # uvicorn ends with sys.exit(1) when it cannot bind, having logged why: in a thread,
        # that would print a traceback beside the one line below (and end nothing else).
        with contextlib.suppress(SystemExit):
            server.run()

    thread = threading.Thread(target=run, name="cron-bridge-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    if not server.started:
        server.should_exit = True
        raise ConfigError(
            "cannot listen there (in use, or not an address of this host)",
            option="http",
            value=f"{host}:{port}",
        )
    return HttpServer(server, thread)
