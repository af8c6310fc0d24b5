"""Loopback HTTP peers that misbehave, for the outbound calls (a monitor's pings): one that
trickles its answer a byte at a time, one that redirects where it is told, one that answers at
once. Each keeps the request lines it was sent and stops with the context that started it."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["Peer", "answering", "large", "redirecting", "trickling"]


@dataclass
class Peer:
    """A listening peer: its base URL and the heads of the requests it was sent, in order,
    each with the ``time.monotonic()`` it arrived."""

    url: str
    heads: list[tuple[float, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def paths(self) -> list[str]:
        return [head.split(" ", 2)[1] for _, head in self.heads]


@contextlib.contextmanager
def _serving(answer: bytes, *, every: float) -> Iterator[Peer]:
    """Accept connections, read each request's head, then send ``answer``: whole when
    ``every`` is 0, else one byte every ``every`` seconds until the peer stops."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.2)
    peer = Peer(url=f"http://127.0.0.1:{listener.getsockname()[1]}")

    def talk(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            head = b""
            with contextlib.suppress(OSError):
                while b"\r\n\r\n" not in head and len(head) < 65536:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    head += chunk
                peer.heads.append((time.monotonic(), head.decode("latin-1")))
                if not every:
                    conn.sendall(answer)
                    return
                for byte in answer:
                    if peer.stop.wait(every):
                        return
                    conn.sendall(bytes([byte]))

    def accept() -> None:
        while not peer.stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=talk, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield peer
    finally:
        peer.stop.set()
        thread.join(5)
        listener.close()


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK"
# Long enough that a byte a second never finishes within a test.
SLOW = b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"a" * 4096 + b"\r\n\r\nOK"


def answering() -> contextlib.AbstractContextManager[Peer]:
    """A peer that answers 200 at once."""
    return _serving(OK, every=0)


def trickling(every: float = 1.0) -> contextlib.AbstractContextManager[Peer]:
    """A peer that sends its answer's head one byte every ``every`` seconds, for minutes."""
    return _serving(SLOW, every=every)


def large() -> contextlib.AbstractContextManager[Peer]:
    """A peer that answers at once with a head of a megabyte."""
    return _serving(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 2**20 + b"\r\n\r\n", every=0)


def redirecting(to: str, status: int = 302) -> contextlib.AbstractContextManager[Peer]:
    """A peer that answers every request with a redirect to ``to``."""
    answer = f"HTTP/1.1 {status} Found\r\nLocation: {to}\r\nContent-Length: 0\r\n\r\n"
    return _serving(answer.encode("latin-1"), every=0)
