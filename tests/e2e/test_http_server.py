"""``cron-bridge beat --http`` as a hostile client meets it: idle and slow sockets, encoded
paths, forged log lines, guessed secrets, and secrets that are not secrets."""

from __future__ import annotations

import contextlib
import http.client
import socket
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from cron_bridge.http.serve import REQUEST_TIMEOUT
from tests.e2e.processes import BeatProcess, cli, command_env
from tests.servers import free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

APP = "tests.apps.cli_app"
SECRET = "zażółć-gęślą-jaźń-a-secret-of-the-tests"  # non-ASCII on purpose


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[BeatProcess, int]]:
    port = free_port()
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n", encoding="utf-8")
    beat = BeatProcess(
        "http",
        tmp_path,
        command_env(),
        app=APP,
        store_url=f"sqlite:///{tmp_path}/s.db",
        extra=["--http", f"127.0.0.1:{port}", "--secret-file", str(secret_file)],
    ).start()
    try:
        wait_for(lambda: "HTTP trigger on" in beat.output(), 30, "the HTTP server")
        yield beat, port
        beat.terminate()  # within 60 s of SIGTERM, or the test fails
    finally:
        beat.ensure_stopped()  # and it is not left running for the next test to meet


def get(
    port: str | int,
    path: str,
    token: str | None = None,
    source: str = "127.0.0.1",
    method: str = "GET",
) -> tuple[int, dict[str, str]]:
    connection = http.client.HTTPConnection(
        "127.0.0.1", int(port), timeout=10, source_address=(source, 0)
    )
    connection.putrequest(method, path, skip_accept_encoding=True)
    if token is not None:
        connection.putheader("Authorization", b"Bearer " + token.encode("utf-8"))
    connection.endheaders()
    response = connection.getresponse()
    response.read()
    connection.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}


def test_idle_and_slow_sockets_are_cut_off_and_never_starve_the_probe(
    served: tuple[BeatProcess, int],
) -> None:
    """300 sockets that send nothing and 50 that send half a request line: /healthz answers
    throughout, and the server closes every one of them once its request deadline passes."""
    _, port = served
    idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(300)]
    slow = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(50)]
    for sock in slow:
        sock.sendall(b"GET /_scheduler/healthz HTTP/1.1\r\nHost: x\r\n")
    try:
        assert get(port, "/_scheduler/healthz")[0] == 200
        time.sleep(REQUEST_TIMEOUT + 3)
        assert get(port, "/_scheduler/healthz")[0] == 200
        closed = 0
        for sock in idle + slow:
            sock.settimeout(5)
            try:
                closed += sock.recv(1) == b""
            except (ConnectionResetError, TimeoutError):
                closed += 0
        assert closed == len(idle) + len(slow)
    finally:
        for sock in idle + slow:
            sock.close()


def _slow_body(port: int, path: str = "/_scheduler/api/schedules") -> socket.socket:
    """A connection that sends whole headers and the first bytes of a body it never ends."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        'Content-Length: 1000\r\n\r\n{"name": '.encode()
    )
    return sock


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``sock`` (with or without an answer) within ``seconds``."""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:  # closed with unread bytes of ours: a reset, not a FIN
        return True
    except TimeoutError:
        return False
    return True


def test_the_request_deadline_covers_the_body(served: tuple[BeatProcess, int]) -> None:
    """A body that never ends is cut off at the request deadline, not held for a minute."""
    _, port = served
    sock = _slow_body(port)
    began = time.monotonic()
    try:
        assert _closed_within(sock, REQUEST_TIMEOUT + 5)
    finally:
        sock.close()
    assert REQUEST_TIMEOUT - 1 <= time.monotonic() - began <= REQUEST_TIMEOUT + 3


def test_a_thousand_endless_bodies_never_keep_the_probe_out(
    served: tuple[BeatProcess, int],
) -> None:
    """1,200 connections without a secret, each holding a body open past the connection cap:
    /healthz answers throughout (the oldest waiting connection makes room), and every one of
    them is closed once the deadline passes."""
    _, port = served
    slow = [_slow_body(port) for _ in range(1200)]
    try:
        for _ in range(5):
            assert get(port, "/_scheduler/healthz")[0] == 200
        time.sleep(REQUEST_TIMEOUT + 2)
        assert get(port, "/_scheduler/healthz")[0] == 200
        assert sum(_closed_within(sock, 5) for sock in slow) == len(slow)
    finally:
        for sock in slow:
            sock.close()


@pytest.mark.parametrize(
    ("length", "status"), [("99999999999999999999", 413), ("20000", 413), ("12abc", 400)]
)
def test_a_bad_content_length_is_answered_at_once(
    served: tuple[BeatProcess, int], length: str, status: int
) -> None:
    """Before any of the body arrives: 413 for a length past the cap, 400 for no length."""
    _, port = served
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    began = time.monotonic()
    try:
        sock.sendall(
            f"POST /_scheduler/api/schedules HTTP/1.1\r\nHost: x\r\n"
            f"Content-Length: {length}\r\n\r\n".encode()
        )
        answer = sock.recv(4096).decode(errors="replace")
    finally:
        sock.close()
    assert answer.startswith(f"HTTP/1.1 {status} "), answer[:200]
    assert time.monotonic() - began < 3


def test_json_nested_deep_and_a_flooding_interval_get_400(
    served: tuple[BeatProcess, int],
) -> None:
    """JSON a few thousand deep within 16 KiB, and every="1ms": 400 naming what is wrong, no
    traceback in the beat's log."""
    beat, port = served

    def post(body: str) -> tuple[int, str]:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        headers = {
            "Content-Type": "application/json",
            "Authorization": "Bearer " + urllib.parse.quote(SECRET, safe=""),
        }
        connection.putrequest("POST", "/_scheduler/api/schedules")
        for key, value in headers.items():
            connection.putheader(
                key, value.encode() if key != "Authorization" else b"Bearer " + SECRET.encode()
            )
        data = body.encode()
        connection.putheader("Content-Length", str(len(data)))
        connection.endheaders(data)
        response = connection.getresponse()
        text = response.read().decode()
        connection.close()
        return response.status, text

    nested = '{"name": "deep", "kwargs": {"a": ' + "[" * 5000 + "]" * 5000 + "}}"
    assert len(nested) < 16 * 1024
    status, text = post(nested)
    assert status == 400 and "nested" in text, text
    spec = '{"name": "flood", "library": "rq", "task": "x.y", "every": "1ms"}'
    status, text = post(spec)
    assert status == 400 and "every" in text and "once every 1s" in text, text
    assert "Traceback" not in beat.output() and "RecursionError" not in beat.output()


def test_a_path_is_decoded_once_and_log_lines_cannot_be_forged(
    served: tuple[BeatProcess, int],
) -> None:
    """``%252E`` stays ``%2E`` (no job of that name: 404, the job does not run); a path with
    an encoded CR/LF is logged on one line."""
    beat, port = served
    assert get(port, "/_scheduler/run/reports%252Eminutely", SECRET, method="POST")[0] == 404
    assert get(port, "/_scheduler/run/reports%2Eminutely", SECRET, method="POST")[0] == 200
    get(port, "/_scheduler/x%0d%0aFORGED%20cron_bridge%20INFO", SECRET)
    wait_for(lambda: "x\\r\\nFORGED" in beat.output(), 10, "the escaped log line")
    assert not [line for line in beat.output().splitlines() if line.startswith("FORGED")]


def test_guessing_over_the_network_is_throttled_but_the_right_secret_still_works(
    served: tuple[BeatProcess, int],
) -> None:
    """Twelve wrong bearer tokens from one address: 401s, then 429 with Retry-After; from
    another address the right (UTF-8) secret runs the job."""
    _, port = served
    codes = [
        get(port, "/_scheduler/run/cache.warm", "wrong-" * 5, method="POST")[0] for _ in range(12)
    ]
    assert codes[:10] == [401] * 10 and codes[10:] == [429, 429]
    status, headers = get(port, "/_scheduler/run/cache.warm", SECRET, method="POST")
    assert status == 429 and int(headers["retry-after"]) >= 1
    other = get(port, "/_scheduler/run/cache.warm", SECRET, source="127.0.0.2", method="POST")
    assert other[0] == 200


@pytest.mark.parametrize(
    ("secret", "says"),
    [("change-me", "placeholder"), ("abc123", "16 bytes"), ("", "without a secret")],
)
def test_a_beat_refuses_a_secret_that_is_not_one(tmp_path: Path, secret: str, says: str) -> None:
    """A shipped placeholder, a short secret or none: one line saying how to make one, exit 2,
    and the secret itself is never echoed."""
    env = command_env(CRON_BRIDGE_SECRET=secret, CRON_BRIDGE_STORE=f"sqlite:///{tmp_path}/s.db")
    done = cli("beat", "-A", APP, "--http", f"127.0.0.1:{free_port()}", env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and "token_urlsafe" in done.stderr
    assert "Traceback" not in done.stderr
    assert not secret or secret not in done.stderr


def test_the_session_cookie_is_secure_behind_a_trusted_tls_proxy(
    served: tuple[BeatProcess, int],
) -> None:
    """A login forwarded by the proxy (127.0.0.1, trusted by default) with
    X-Forwarded-Proto: https gets a Secure cookie; the same login over plain http does not."""
    _, port = served

    def login(forwarded: bool) -> str:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        if forwarded:
            headers["X-Forwarded-Proto"] = "https"
        body = "secret=" + urllib.parse.quote(SECRET)
        connection.request("POST", "/_scheduler/login", body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        connection.close()
        assert response.status == 303
        return response.getheader("Set-Cookie") or ""

    assert "; Secure" in login(forwarded=True)
    assert "Secure" not in login(forwarded=False)


def _head_of_answer(sock: socket.socket) -> bytes:
    """What the server sends on ``sock`` up to the end of an answer's head."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(4096)
        assert chunk, f"closed before it answered: {answer!r}"
        answer += chunk
    return answer


def _until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends on ``sock`` until it closes it."""
    answer = b""
    with contextlib.suppress(ConnectionResetError):  # closed with bytes of ours unread
        while chunk := sock.recv(4096):
            answer += chunk
    return answer


def test_a_malformed_chunked_body_is_never_a_traceback(served: tuple[BeatProcess, int]) -> None:
    """A body in broken chunks, to a bulk route without the secret and to the probe (which
    both answer without reading it), and to a bulk route with the secret (which reads it):
    each is answered, by the app or with uvicorn's 400, and its connection closed; the beat
    logs at most one line for each and never a traceback, whether the broken chunks come with
    the head or only once the app has answered it or asked for its body."""
    beat, port = served
    bulk = (
        "POST /_scheduler/api/schedules:add-many HTTP/1.1\r\nHost: x\r\n"
        "Content-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n"
    )
    probe = "GET /_scheduler/healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
    with_secret = bulk + f"Authorization: Bearer {SECRET}\r\nExpect: 100-continue\r\n"
    broken = b"zz\r\nnot a chunk\r\n0\r\n\r\n"
    # The head, whether the broken chunks come with it, and the status answered first.
    cases = [
        (bulk, True, None),
        (bulk, False, b"HTTP/1.1 401 "),
        (probe, True, None),
        (probe, False, b"HTTP/1.1 200 "),
        (with_secret, False, b"HTTP/1.1 100 "),
    ]
    unread = []  # the app's answers to a request whose body it left unread
    for head, together, first in cases:
        with socket.create_connection(("127.0.0.1", port), timeout=REQUEST_TIMEOUT + 5) as sock:
            sent = head.encode("utf-8") + b"\r\n"
            sock.sendall(sent + broken if together else sent)
            if first is not None:
                answer = _head_of_answer(sock)
                assert answer.startswith(first), answer
                if first != b"HTTP/1.1 100 ":  # the app's answer, the body left unread
                    unread.append(answer)
                with contextlib.suppress(OSError):  # it may be closed already, as it should
                    sock.sendall(broken)
            rest = _until_closed(sock)
            if together or first == b"HTTP/1.1 100 ":  # uvicorn's 400, or the app's 401 first
                assert rest.startswith((b"HTTP/1.1 400 ", b"HTTP/1.1 401 ")), rest
    marker = "/_scheduler/after-the-broken-chunks"
    get(port, marker)
    wait_for(lambda: marker in beat.output(), 10, "the line of the request after them")
    assert "Traceback" not in beat.output(), beat.output()[-4000:]
    warned = [line for line in beat.output().splitlines() if "Invalid HTTP request" in line]
    assert len(warned) <= len(cases), warned
    for answer in unread:  # or the server would parse the rest of the body that follows
        assert b"\r\nconnection: close\r\n" in answer.lower(), answer
