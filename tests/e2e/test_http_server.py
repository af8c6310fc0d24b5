"""``cron-bridge beat --http`` as a hostile client meets it: idle and slow sockets, encoded
paths, forged log lines, guessed secrets, and secrets that are not secrets."""

from __future__ import annotations

import http.client
import socket
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from cron_bridge.serve import HEADER_TIMEOUT
from tests.e2e.processes import BeatProcess, cli, command_env, wait_for
from tests.servers import free_port

pytestmark = pytest.mark.slow

APP = "tests.apps.cli_app"
SECRET = "zażółć-gęślą-jaźń-a-secret-of-the-tests"  # non-ASCII on purpose


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[BeatProcess, int]]:
    port = free_port()
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n", encoding="utf-8")
    beat = BeatProcess(
        "http", tmp_path, command_env(), app=APP, store_url=f"sqlite:///{tmp_path}/s.db",
        extra=["--http", f"127.0.0.1:{port}", "--secret-file", str(secret_file)],
    ).start()  # fmt: skip
    try:
        wait_for(lambda: "HTTP trigger on" in beat.output(), 30, "the HTTP server")
        yield beat, port
    finally:
        beat.terminate()


def get(port: str | int, path: str, token: str | None = None, source: str = "127.0.0.1",
        method: str = "GET") -> tuple[int, dict[str, str]]:  # fmt: skip
    connection = http.client.HTTPConnection("127.0.0.1", int(port), timeout=10,
                                            source_address=(source, 0))  # fmt: skip
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
        time.sleep(HEADER_TIMEOUT + 3)
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
    codes = [get(port, "/_scheduler/run/cache.warm", "wrong-" * 5, method="POST")[0]
             for _ in range(12)]  # fmt: skip
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
