"""Serving the HTTP app from the beat process: uvicorn on its own thread, hardened.

- Idle or slow clients are cut off: a connection must send a complete request, its body
  included, within ``REQUEST_TIMEOUT`` of opening (and of its previous response),
  kept-alive connections close after ``KEEP_ALIVE`` idle seconds, and at most
  ``MAX_CONNECTIONS`` are open at once. A connection past that cap makes room by closing the
  oldest one still waiting for its request, so sockets that send nothing (or a body that
  never ends) can never keep the liveness probe out; only when every connection is busy
  with a whole request is the new one closed.
- ``/healthz`` is answered on the event loop (see ``cron_bridge.http.asgi_app``), so requests
  waiting for a run never hold up the liveness probe.
- uvicorn's own access log is off: the app logs one escaped line per request.
- ``X-Forwarded-Proto`` and ``X-Forwarded-For`` are believed only from ``forwarded_allow_ips``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from cron_bridge.errors import ConfigError

__all__ = ["HttpServer", "serve"]

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = 10.0
KEEP_ALIVE = 5.0
MAX_CONNECTIONS = 1000


def _protocol_class() -> type:
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        """uvicorn's h11 protocol with a deadline for each complete request (body included)
        and room made for a new connection at the cap."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._deadline: asyncio.TimerHandle | None = None
            self._opened = time.monotonic()
            if len(self.connections) > MAX_CONNECTIONS and not self._make_room():
                transport.close()
                return
            self._arm()

        def _waiting(self) -> bool:
            """No whole request yet (or, kept alive, none since the last response)."""
            cycle = self.cycle
            return cycle is None or cycle.response_complete or cycle.more_body

        def _make_room(self) -> bool:
            waiting = [
                c
                for c in self.connections
                if isinstance(c, GuardedH11Protocol)
                and c is not self
                and hasattr(c, "_opened")
                and c._waiting()
            ]
            if not waiting:
                return False
            oldest = min(waiting, key=lambda c: c._opened)
            oldest.transport.close()
            self.connections.discard(oldest)
            return True

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(REQUEST_TIMEOUT, self._too_slow)

        def _disarm(self) -> None:
            deadline = getattr(self, "_deadline", None)
            if deadline is not None:
                deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            if self._waiting():
                self.transport.close()  # no complete request in time: a slow or idle client

        def handle_events(self) -> None:
            super().handle_events()
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete and not cycle.more_body:
                self._disarm()  # the whole request arrived: its own handling takes over

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return GuardedH11Protocol


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
        app,
        host=host,
        port=port,
        http=_protocol_class(),
        lifespan="off",
        access_log=False,
        log_config=None,
        timeout_keep_alive=int(KEEP_ALIVE),
        proxy_headers=True,
        forwarded_allow_ips=forwarded_allow_ips,
        server_header=False,
        h11_max_incomplete_event_size=16 * 1024,
    )
    # Run from a thread, uvicorn leaves the process's signals to the beat.
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="cron-bridge-http", daemon=True)
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
