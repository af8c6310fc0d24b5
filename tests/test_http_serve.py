"""The beat's HTTP server (``cron_bridge.http.serve``) in this process, on a short deadline: the
installed uvicorn is one it was tested on, the deadline of each whole request holds (nothing
sent, headers or a body sent too slowly, a kept-alive connection's next request) and never
cuts a request the app is handling, and the cap makes room by closing the oldest waiting
connection. The full-size runs against a real beat are in tests/e2e/test_http_server.py."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from cron_bridge.http import serve as serving
from tests.servers import free_port

ROOT = Path(__file__).resolve().parent.parent
DEADLINE = 1.0
HANDLED_FOR = 2.5  # what /slow takes in the app: past the deadline
handling = threading.Semaphore(0)  # released as the app starts handling each /slow


async def echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Reads the whole body, fails on /boom, takes ``HANDLED_FOR`` on /slow, and answers the
    body back."""
    body, more = b"", True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        more = message.get("more_body", False)
    if scope["path"] == "/boom":
        raise RuntimeError("the app failed")
    if scope["path"] == "/slow":
        handling.release()
        await asyncio.sleep(HANDLED_FOR)
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
def start(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., int]]:
    servers: list[serving.HttpServer] = []

    def started(*, deadline: float = DEADLINE, cap: int = 100) -> int:
        monkeypatch.setattr(f"{__name__}.handling", threading.Semaphore(0))  # this test's own
        monkeypatch.setattr(serving, "REQUEST_TIMEOUT", deadline)
        monkeypatch.setattr(serving, "MAX_CONNECTIONS", cap)
        port = free_port()
        servers.append(serving.serve(echo, "127.0.0.1", port))
        return port

    yield started
    for server in servers:
        server.shutdown()


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def closed_after(sock: socket.socket, within: float) -> float | None:
    """Seconds until the server closes ``sock`` (reading whatever it answers), or None."""
    began = time.monotonic()
    sock.settimeout(within)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return None
    return time.monotonic() - began


def ask(sock: socket.socket, path: str = "/", body: bytes = b"") -> bytes:
    """One whole request on ``sock`` and its whole answer (read by its Content-Length)."""
    method = "POST" if body else "GET"
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
    sock.sendall(head.encode() + body)
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(4096)
        assert chunk, f"closed before its answer: {answer!r}"
        answer += chunk
    top, _, rest = answer.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in top.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    while len(rest) < length:
        rest += sock.recv(4096)
    assert top.startswith(b"HTTP/1.1 200 "), top
    return rest


def is_open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return bool(sock.recv(1, socket.MSG_PEEK))
    except BlockingIOError:
        return True
    except ConnectionResetError:
        return False
    finally:
        sock.setblocking(True)


def test_the_installed_uvicorn_is_one_the_server_was_tested_on() -> None:
    """serve.py builds uvicorn's h11 protocol itself: pyproject.toml caps uvicorn at the newest
    minor it was tested on, and the one installed here is inside that range."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    [uvicorn] = [
        Requirement(line)
        for line in project["project"]["dependencies"]
        if Requirement(line).name == "uvicorn"
    ]
    assert any(spec.operator == "<" for spec in uvicorn.specifier), uvicorn
    assert uvicorn.specifier.contains(version("uvicorn")), (str(uvicorn), version("uvicorn"))


def test_a_request_the_app_handles_past_the_deadline_is_answered(
    start: Callable[..., int],
) -> None:
    """The deadline covers sending the request, not handling it: the app's side tells the
    connection it has the whole request (with a body, and without), so a request handled
    for longer than the deadline gets its answer, and the connection serves the next one."""
    port = start()
    with connect(port) as sock:
        assert ask(sock, "/slow") == b""
        assert ask(sock, "/slow", b'{"name": "x"}') == b'{"name": "x"}'


@pytest.mark.parametrize(
    "sent",
    [
        b"",
        b"GET / HTTP/1.1\r\nHost: x\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
    ],
    ids=["nothing", "half-the-headers", "part-of-the-body"],
)
def test_a_request_not_sent_whole_within_the_deadline_is_cut_off(
    start: Callable[..., int], sent: bytes
) -> None:
    port = start()
    with connect(port) as sock:
        began = time.monotonic()
        sock.sendall(sent)
        took = closed_after(sock, DEADLINE + 5)
    assert took is not None, "never closed"
    assert DEADLINE - 0.2 <= time.monotonic() - began <= DEADLINE + 3


def test_a_kept_alive_connection_has_the_deadline_again_after_each_response(
    start: Callable[..., int],
) -> None:
    """A byte of the next request stops uvicorn's keep-alive timer; the deadline set when
    the response went still closes a connection that never finishes that request."""
    port = start(deadline=1.5)
    with connect(port) as sock:
        assert ask(sock, "/", b"one") == b"one"
        began = time.monotonic()
        sock.sendall(b"GET / HTTP/1.1\r\n")
        took = closed_after(sock, 10)
    assert took is not None and 1.3 <= time.monotonic() - began <= 4.5


def test_a_request_the_app_failed_on_is_answered_and_its_connection_closed(
    start: Callable[..., int],
) -> None:
    port = start(deadline=30)
    with connect(port) as sock:
        sock.sendall(b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(5)
        assert sock.recv(4096).startswith(b"HTTP/1.1 500 ")
        took = closed_after(sock, 5)
    assert took is not None


def test_past_the_cap_the_oldest_waiting_connection_makes_room(
    start: Callable[..., int],
) -> None:
    """Three connections at a cap of three, each answered once (waiting for its next
    request): a fourth is served, and the oldest of them is closed to make room."""
    port = start(deadline=30, cap=3)
    first, second, third = waiting = [connect(port) for _ in range(3)]
    try:
        for sock in waiting:
            assert ask(sock, "/", b"hello") == b"hello"
        with connect(port) as fourth:
            assert ask(fourth, "/", b"room") == b"room"
        assert closed_after(first, 5) is not None
        assert is_open(second) and is_open(third)
    finally:
        for sock in waiting:
            sock.close()


def test_past_the_cap_with_every_connection_busy_the_new_one_is_closed(
    start: Callable[..., int],
) -> None:
    """Two connections at a cap of two, each with a whole request the app is handling: the
    third is closed at once, unanswered, and the two busy ones get their answers."""
    port = start(deadline=30, cap=2)
    busy = [connect(port) for _ in range(2)]
    try:
        for sock in busy:
            sock.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        assert all(handling.acquire(timeout=10) for _ in busy)
        with connect(port) as third:
            with contextlib.suppress(OSError):  # it may be closed before the request lands
                third.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            third.settimeout(5)
            try:
                answer = third.recv(4096)
            except ConnectionResetError:
                answer = b""
            assert answer == b""  # closed, unanswered
        for sock in busy:
            sock.settimeout(10)
            assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
    finally:
        for sock in busy:
            sock.close()
