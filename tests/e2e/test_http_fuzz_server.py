"""``cron-bridge beat --http`` under generated raw requests (hypothesis): request lines,
targets, headers and bodies as bytes (not UTF-8, control characters, huge, odd methods,
wrong lengths, bad cookies and bearer tokens), each on its own socket. Every one gets a
well-formed HTTP answer with a status of the expected set, nothing of the request comes
back as markup or control characters, and the server keeps answering its probe."""

from __future__ import annotations

import contextlib
import re
import socket
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.e2e.processes import BeatProcess, command_env
from tests.e2e.test_http import SECRET
from tests.servers import free_port
from tests.test_http_fuzz import CONTROL, EXPECTED, check_body
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

BASE = b"/_scheduler"
# What the server itself answers to a request that is not HTTP (h11, before the app).
SERVER_STATUSES = {400, 413, 414, 431, 501, 505}
_STATUS_LINE = re.compile(rb"HTTP/1\.1 (\d{3}) [^\r\n]*\r\n")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[int]:
    port = free_port()
    beat = BeatProcess(
        "fuzz",
        tmp_path,
        command_env(),
        app="tests.apps.cli_app",
        store_url=f"sqlite:///{tmp_path}/s.db",
        extra=["--http", f"127.0.0.1:{port}", "--secret", SECRET],
    ).start()
    try:
        wait_for(lambda: "HTTP trigger on" in beat.output(), 30, "the HTTP server")
        yield port
    finally:
        beat.terminate()


def exchange(port: int, raw: bytes) -> bytes:
    """Send ``raw`` on a socket of its own; everything answered until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        with contextlib.suppress(OSError):  # it may answer and close before it read a body
            sock.sendall(raw)
        answer = b""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            answer += chunk
        return answer


def sign_in(port: int) -> str:
    """A session cookie, from the sign-in form."""
    body = urllib.parse.urlencode({"secret": SECRET}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/_scheduler/login", data=body)

    class Keep(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    opener = urllib.request.build_opener(Keep)
    try:
        opener.open(request, timeout=20)
    except urllib.error.HTTPError as error:
        assert error.code == 303, error.code
        return str(error.headers["Set-Cookie"]).split(";")[0]
    raise AssertionError("no redirect after signing in")


def healthy(port: int) -> bool:
    answer = exchange(port, b"GET /_scheduler/healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    return answer.startswith(b"HTTP/1.1 200 ")


ROUTES = [
    b"",
    b"/",
    b"/jobs/cache.warm",
    b"/jobs/",
    b"/run/cache.warm",
    b"/run/",
    b"/api/jobs/cache.warm",
    b"/api/jobs/cache.warm/pause",
    b"/api/schedules",
    b"/api/schedules:add-many",
    b"/api/schedules:remove-many",
    b"/login",
    b"/logout",
    b"/healthz",
]
HOSTILE = [
    b"<script>alert(1)</script>",
    b"%3Cscript%3E",
    b"\xff\xfe",
    b"%ff%fe",
    b"\x1b[2J",
    b"\x1b]0;t\x07",
    b"%00",
    b"\x00",
    b"..%2f..%2f",
    b"\r\nX-Injected: 1",
    "zażółć".encode(),
]
chunks = st.one_of(st.binary(max_size=40), st.sampled_from(HOSTILE))


@st.composite
def raw_requests(draw: st.DrawFn, cookie: str) -> bytes:
    """One request as bytes on the wire, of parts well-formed or not."""
    method = draw(
        st.one_of(
            st.sampled_from(
                [b"GET", b"POST", b"PUT", b"DELETE", b"HEAD", b"OPTIONS", b"PATCH", b"BREW", b"get"]
            ),
            st.binary(min_size=1, max_size=12),
        )
    )
    target = BASE + draw(st.sampled_from(ROUTES)) + draw(st.one_of(st.just(b""), chunks))
    target += draw(
        st.one_of(
            st.just(b""),
            chunks.map(lambda q: b"?said=" + q),
            chunks.map(lambda q: b"?q=" + q + b"&state=" + q),
        )
    )
    target = draw(
        st.one_of(
            st.just(target), st.binary(max_size=60), st.just(BASE + b"/jobs/" + b"x" * 20_000)
        )
    )
    body = draw(
        st.one_of(
            st.just(b""),
            st.binary(max_size=200),
            st.just(b"secret=" + SECRET.encode()),
            st.just(b"csrf=x&force=1"),
            st.just(b'{"reason": "<script>"}'),
            st.just(b"x" * 20_000),
        )
    )
    headers = [
        b"Host: 127.0.0.1",
        b"Connection: close",
        b"X-Forwarded-For: 10.%d.%d.1" % (draw(st.integers(0, 255)), draw(st.integers(0, 255))),
    ]
    auth = draw(
        st.one_of(
            st.none(),
            st.just(b"Bearer " + SECRET.encode()),
            chunks.map(lambda t: b"Bearer " + t),
            chunks,
        )
    )
    if auth is not None:
        headers.append(b"Authorization: " + auth)
    jar = draw(
        st.one_of(
            st.none(),
            st.just(cookie.encode()),
            chunks,
            chunks.map(lambda t: b"cron_bridge_session=" + t),
        )
    )
    if jar is not None:
        headers.append(b"Cookie: " + jar)
    kind = draw(
        st.one_of(
            st.none(),
            st.sampled_from([b"application/x-www-form-urlencoded", b"application/json"]),
            chunks,
        )
    )
    if kind is not None:
        headers.append(b"Content-Type: " + kind)
    length = draw(
        st.one_of(
            st.just(str(len(body)).encode()),
            st.sampled_from([b"abc", b"-1", b"9" * 30, b"0", b"20000000"]),
            st.none(),
        )
    )
    if length is not None:
        headers.append(b"Content-Length: " + length)
    headers += draw(
        st.lists(st.tuples(chunks, chunks).map(lambda p: p[0] + b": " + p[1]), max_size=2)
    )
    version = draw(st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/9.9", b""]))
    return (
        method
        + b" "
        + target
        + b" "
        + version
        + b"\r\n"
        + b"\r\n".join(headers)
        + (b"\r\n\r\n" + body)
    )


def check_answer(answer: bytes) -> None:
    """A status line of the expected set, headers, and a body of the dashboard's own."""
    line = _STATUS_LINE.match(answer)
    assert line is not None, answer[:300]
    status = int(line[1])
    assert status in EXPECTED | SERVER_STATUSES, answer[:500]
    head, _, body = answer.partition(b"\r\n\r\n")
    headers = {
        name.strip().lower(): value.strip()
        for name, _, value in (h.partition(b":") for h in head.split(b"\r\n")[1:])
    }
    assert b"x-injected" not in headers, head
    assert b"<script" not in body.lower() or body.lower().count(b"<script") == 1, body[:500]
    kind = headers.get(b"content-type", b"").decode("latin-1")
    if not body:
        return  # HEAD: the headers alone
    if kind.startswith(("text/html", "application/json")):
        check_body(kind, body)
    else:
        assert not CONTROL.search(body.decode("latin-1")), body[:300]
        assert b"<" not in body, body[:300]


def test_generated_raw_requests_to_the_beats_server(served: int) -> None:
    """Every generated request gets an answer of the expected set (never a 500), and the
    probe answers after every twenty and at the end."""
    port = served
    cookie = sign_in(port)
    sent = [0]
    signed_in = b"Host: x\r\nConnection: close\r\nCookie: " + cookie.encode() + b"\r\n\r\n"

    @settings(
        max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None
    )
    @given(raw_requests(cookie))
    @example(b"GET /_scheduler/jobs/cache.warm?said=%3Cscript%3E%1b%5b2J HTTP/1.1\r\n" + signed_in)
    @example(b"GET /_scheduler/?q=%1b]0;t%07%e2%80%ae%ed%a0%80&state=%ff HTTP/1.1\r\n" + signed_in)
    @example(b"POST /_scheduler/login HTTP/1.1\r\nContent-Length: abc\r\n" + signed_in)
    def one(raw: bytes) -> None:
        check_answer(exchange(port, raw))
        sent[0] += 1
        if sent[0] % 20 == 0:
            assert healthy(port), "the probe stopped answering"

    one()
    assert healthy(port)
    # A signed-in page still opens.
    page = exchange(
        port,
        b"GET /_scheduler/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Cookie: " + cookie.encode() + b"\r\n\r\n",
    )
    assert page.startswith(b"HTTP/1.1 200 ") and b"cache.warm" in page
