"""One HTTP GET that ends by a wall-clock deadline, whatever the peer does.

A socket timeout bounds one read, not a request: a peer that sends a byte every few seconds
holds ``urllib`` for ever. Here every step (connect, TLS handshake, send, each read) is given
only what is left of one monotonic deadline as its socket timeout, the deadline is checked
between reads, and the answer's head is read in small chunks up to ``MAX_HEAD`` bytes (the body
is never read: the peer has the request by then). Redirects are followed on http(s) only, at
most ``MAX_REDIRECTS``. Name resolution is the one step the deadline cannot cut short (the
resolver's own timeouts bound it): the caller runs this on a thread it does not wait on past
the deadline (``calls.launch``).
"""

from __future__ import annotations

import base64
import socket
import ssl
import threading
import time
from urllib.parse import unquote, urljoin, urlsplit

from cron_bridge.monitors.base import masked

__all__ = ["MAX_HEAD", "MAX_REDIRECTS", "OutboundError", "get"]

MAX_REDIRECTS = 5
MAX_HEAD = 16 * 1024  # bytes of status line and headers read before giving up
CHUNK = 1024  # bytes asked of the socket per read
REDIRECTS = (301, 302, 303, 307, 308)


class OutboundError(Exception):
    """A request that did not succeed: refused, answered with an error, or out of time."""


def get(url: str, *, deadline: float, agent: str = "cron-bridge") -> int:
    """GET ``url`` and return the status of its final answer (2xx).

    Args:
        url: an http(s) URL; user-info in it is sent as Basic credentials, to its own host
            only (not after a redirect to another one).
        deadline: ``time.monotonic()`` by which the whole exchange, redirects included, ends.
        agent: the User-Agent header.

    Raises:
        OutboundError: not an http(s) URL, a redirect elsewhere or too many, an answer of 400
            or more, a head that is not HTTP or too large, the deadline passed.
        OSError: the connection failed (refused, reset, unreachable, name not found).
    """
    origin = urlsplit(url)
    for hop in range(MAX_REDIRECTS + 1):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            said = "not an http(s) URL" if hop == 0 else "a redirect to a URL not http(s)"
            raise OutboundError(f"{said}: {_shown(url)}")
        same_host = (parts.scheme, parts.netloc) == (origin.scheme, origin.netloc)
        try:
            status, location = _exchange(url, deadline, agent, credentials=same_host)
        except TimeoutError:  # a step given what was left of the deadline used it up
            raise OutboundError("out of time (the deadline passed)") from None
        if status in REDIRECTS and location:
            url = urljoin(url, location)
            continue
        if status >= 400 or status < 200:
            raise OutboundError(f"answered HTTP {status}")
        return status
    raise OutboundError(f"more than {MAX_REDIRECTS} redirects")


def _exchange(url: str, deadline: float, agent: str, *, credentials: bool) -> tuple[int, str]:
    """Send one GET and read the answer's head: its status and ``Location``."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if not target.isascii() or any(c <= " " or c == "\x7f" for c in target):
        raise OutboundError(f"not a request target: {_shown(url)}")
    lines = [
        f"GET {target} HTTP/1.1",
        f"Host: {parts.netloc.rpartition('@')[2]}",
        f"User-Agent: {agent}",
        "Accept: */*",
        "Connection: close",
    ]
    if credentials and parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        lines.append(f"Authorization: Basic {base64.b64encode(pair).decode('ascii')}")
    sock = _connect(host, port, deadline)
    try:
        if parts.scheme == "https":
            sock.settimeout(_left(deadline))
            sock = _tls().wrap_socket(sock, server_hostname=host)  # the handshake in total
        sock.settimeout(_left(deadline))
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("ascii"))  # in total, too
        return _read_head(sock, deadline)
    finally:
        sock.close()


def _connect(host: str, port: int, deadline: float) -> socket.socket:
    """A socket connected to the first address that answers, each try within what is left."""
    failure: OSError | None = None
    for family, kind, proto, _, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        left = _left(deadline)
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(left)
            sock.connect(address)
        except OSError as exc:
            sock.close()
            failure = exc
            continue
        return sock
    raise failure or OSError(f"no address for {host}")


def _read_head(sock: socket.socket, deadline: float) -> tuple[int, str]:
    """The status and ``Location`` of the answer, read in chunks against the deadline."""
    head = b""
    while b"\r\n\r\n" not in head:
        if len(head) >= MAX_HEAD:
            raise OutboundError(f"an answer head larger than {MAX_HEAD} bytes")
        sock.settimeout(_left(deadline))
        chunk = sock.recv(CHUNK)
        if not chunk:
            raise OutboundError("the connection closed before an answer")
        head += chunk
    status_line, *fields = head.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    version, _, rest = status_line.partition(b" ")
    code = rest[:3]
    if not version.startswith(b"HTTP/") or len(code) != 3 or not code.isdigit():
        raise OutboundError("an answer that is not HTTP")
    location = ""
    for field in fields:
        name, _, value = field.partition(b":")
        if name.strip().lower() == b"location":
            location = value.strip().decode("latin-1")
    return int(code), location


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise OutboundError("out of time (the deadline passed)")
    return left


_context: list[ssl.SSLContext] = []
_context_lock = threading.Lock()


def _tls() -> ssl.SSLContext:
    """The process's TLS context, made once (loading the CA store is not free)."""
    with _context_lock:
        if not _context:
            _context.append(ssl.create_default_context())
        return _context[0]


def _shown(url: str) -> str:
    return masked(url)
