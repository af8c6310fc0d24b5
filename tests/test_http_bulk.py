"""The bulk routes of the schedules API (``POST <path>/api/schedules:add-many``,
``:update-many``, ``:remove-many``), through the real WSGI and ASGI apps: JSON lines bodies
past the 16 KiB every other route takes, up to ``BULK_BODY``, only with the bearer secret,
which is checked before any of the body is read; and, served by the beat's own server, only
as many bulk bodies read at once as the ASGI app has threads."""

from __future__ import annotations

import asyncio
import json
import socket
from io import BytesIO
from typing import Any

import pytest

from cron_bridge import Beat, declare
from cron_bridge.control.schedules import StoredSchedules
from cron_bridge.http import asgi_app, wsgi_app
from cron_bridge.http import serve as serving
from cron_bridge.http.wire import BULK_BODY, MAX_BODY
from cron_bridge.stores import MemoryStore
from tests.servers import free_port

SECRET = "c2VjcmV0LWZvci10ZXN0cy1vbmx5LTMyYnl0ZXM"
API = "/_scheduler/api/schedules"
NDJSON = "application/x-ndjson"
CHUNK = 64 * 1024


@pytest.fixture(autouse=True)
def _storable_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRON_BRIDGE_STORED_TASKS", "proj.*")


def _lines(entries: list[Any]) -> bytes:
    return b"".join(json.dumps(entry).encode() + b"\n" for entry in entries)


def _tenants(count: int) -> list[dict[str, Any]]:
    return [
        {
            "name": f"tenant-{n}.report",
            "library": "rq",
            "task": "proj.reports.report",
            "cron": f"{n % 60} 3 * * *",
            "tz": "Europe/Warsaw",
            "kwargs": {"tenant": n, "note": "x" * 60},
        }
        for n in range(count)
    ]


class Apps:
    """One beat's WSGI and ASGI apps on a memory store, called in this process."""

    def __init__(self) -> None:
        job = declare("bulk.ok", every="1h", target="inline", handler=lambda ctx: None)
        self.store = MemoryStore(allow_local_cluster=True)
        beat = Beat(self.store, [job], replica_id="bulk-1")
        self.wsgi = wsgi_app(beat, secret=SECRET)
        self.asgi = asgi_app(beat, secret=SECRET)
        self.read = 0  # bytes the app read of the last body

    def call_wsgi(
        self,
        path: str,
        body: bytes,
        *,
        token: str | None = SECRET,
        length: int | None = None,
        method: str = "POST",
        content_type: str = NDJSON,
        client: str = "10.0.0.1",
    ) -> tuple[int, dict[str, Any]]:
        apps = self

        class Input(BytesIO):
            def read(self, size: int | None = -1) -> bytes:
                data = super().read(size)
                apps.read += len(data)
                return data

        self.read = 0
        environ: dict[str, Any] = {
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "QUERY_STRING": "",
            "CONTENT_TYPE": content_type,
            "CONTENT_LENGTH": str(len(body) if length is None else length),
            "wsgi.input": Input(body),
            "REMOTE_ADDR": client,
            "wsgi.url_scheme": "http",
        }
        if token is not None:
            environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"
        started: list[Any] = []
        answer = b"".join(self.wsgi(environ, lambda status, headers: started.append(status)))
        return int(started[0].split()[0]), json.loads(answer)

    def call_asgi(
        self,
        path: str,
        body: bytes,
        *,
        token: str | None = SECRET,
        length: int | None = None,
        chunked: bool = False,
        client: str = "10.0.0.1",
    ) -> tuple[int, dict[str, Any]]:
        """Sent in chunks of 64 KiB, with its length unless ``chunked``."""
        chunks = [body[i : i + CHUNK] for i in range(0, len(body), CHUNK)] or [b""]
        sent: list[dict[str, Any]] = []
        self.read = 0

        async def receive() -> dict[str, Any]:
            if not chunks:
                return {"type": "http.disconnect"}
            chunk = chunks.pop(0)
            self.read += len(chunk)
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

        async def send(message: Any) -> None:
            sent.append(message)

        headers = [(b"content-type", NDJSON.encode())]
        if not chunked:
            headers.append(
                (b"content-length", str(len(body) if length is None else length).encode())
            )
        if token is not None:
            headers.append((b"authorization", f"Bearer {token}".encode()))
        scope = {
            "type": "http",
            "method": "POST",
            "path": path,
            "headers": headers,
            "query_string": b"",
            "client": (client, 5000),
            "scheme": "http",
        }
        asyncio.run(self.asgi(scope, receive, send))
        return int(sent[0]["status"]), json.loads(sent[1]["body"])


@pytest.mark.extras  # checked by the adapter it names (RQ's)
def test_a_bulk_body_past_16_kib_is_taken_with_the_secret_by_both_apps() -> None:
    """2,000 tenants (some 300 KB of JSON lines) added through the WSGI app, changed and
    removed through the ASGI app, sent in chunks; the same body to the one-schedule route
    is refused (413): the larger bound is the bulk routes' alone."""
    apps = Apps()
    body = _lines(_tenants(2_000))
    assert len(body) > 15 * MAX_BODY
    assert apps.call_wsgi(f"{API}:add-many", body) == (200, {"added": 2_000})
    assert len(StoredSchedules(apps.store).list()) == 2_000
    changes = _lines([{"name": f"tenant-{n}.report", "queue": "reports"} for n in range(2_000)])
    assert apps.call_asgi(f"{API}:update-many", changes, chunked=True) == (200, {"updated": 2_000})
    assert StoredSchedules(apps.store).get("tenant-7.report").queue == "reports"  # type: ignore[union-attr]
    names = _lines([{"name": f"tenant-{n}.report"} for n in range(1_000)] + [{"name": "nope"}])
    assert apps.call_asgi(f"{API}:remove-many", names) == (
        200,
        {"removed": 1_000, "missing": ["nope"]},
    )
    assert len(StoredSchedules(apps.store).list()) == 1_000
    assert apps.call_wsgi(API, body, content_type="application/json")[0] == 413
    assert apps.call_asgi(API, body)[0] == 413


def test_without_the_secret_a_bulk_route_is_refused_before_its_body_is_read() -> None:
    """No token or a wrong one: 401 at once (counted as a failed authentication, then 429),
    whatever length the body says, and none of it read: a caller without the secret can
    never make the server hold more than 16 KiB."""
    apps = Apps()
    body = _lines(_tenants(1_000))
    for token in (None, "wrong"):
        status, _ = apps.call_wsgi(f"{API}:add-many", body, token=token, client="10.0.0.2")
        assert (status, apps.read) == (401, 0)
        status, _ = apps.call_asgi(
            f"{API}:add-many", body, token=token, length=BULK_BODY * 4, client="10.0.0.3"
        )
        assert (status, apps.read) == (401, 0)
        status, _ = apps.call_asgi(
            f"{API}:update-many", body, token=token, chunked=True, client="10.0.0.4"
        )
        assert (status, apps.read) == (401, 0)
    statuses = [
        apps.call_wsgi(f"{API}:remove-many", b"", token="wrong", client="10.0.0.5")[0]
        for _ in range(30)
    ]
    assert statuses[0] == 401 and statuses[-1] == 429, statuses
    assert StoredSchedules(apps.store).list() == {}


def test_a_body_past_the_bulk_bound_is_refused_with_413() -> None:
    """A length past ``BULK_BODY`` is refused before any of the body is read; a body sent
    in chunks without one is read no further than a chunk past it; nothing is written."""
    apps = Apps()
    assert apps.call_wsgi(f"{API}:add-many", b"", length=BULK_BODY + 1)[0] == 413
    assert apps.read == 0
    assert apps.call_asgi(f"{API}:add-many", b"", length=BULK_BODY + 1)[0] == 413
    assert apps.read == 0
    line = json.dumps({"name": "x", "pad": "y" * 1_000}).encode() + b"\n"
    body = line * (BULK_BODY // len(line) + 200)  # past the bound, by some 200 KB
    assert apps.call_asgi(f"{API}:add-many", body, chunked=True)[0] == 413
    assert BULK_BODY < apps.read <= BULK_BODY + CHUNK
    assert StoredSchedules(apps.store).list() == {}


@pytest.mark.extras  # checked by the adapter it names (RQ's)
def test_a_refused_entry_is_a_400_naming_it_and_nothing_is_written() -> None:
    """A bad entry: 400 with its number among the entries, its line in the body, its name
    and the option, and nothing written; a line that is not a JSON object, a body that is
    not JSON lines, another method: refused too."""
    apps = Apps()
    tenants = _tenants(3)
    tenants[2]["cron"] = "61 * * * *"
    body = _lines(tenants[:1]) + b"\n" + _lines(tenants[1:])
    status, answer = apps.call_wsgi(f"{API}:add-many", body)
    assert status == 400, answer
    assert {k: answer[k] for k in ("entry", "line", "name", "option")} == {
        "entry": 2,
        "line": 4,
        "name": "tenant-2.report",
        "option": "cron",
    }
    assert "61 * * * *" in answer["error"]
    assert StoredSchedules(apps.store).list() == {}
    status, answer = apps.call_wsgi(f"{API}:update-many", b'{"name": "tenant-0.report"}\n')
    assert (status, answer["option"], answer["line"]) == (400, "name", 1)
    assert "no stored schedule" in answer["error"]
    status, answer = apps.call_wsgi(f"{API}:remove-many", b'{"name": "a"}\n{"name": 7}\n')
    assert (status, answer["option"], answer["entry"], answer["line"]) == (400, "name", 1, 2)
    assert "name" not in answer  # the entry has none: it is said by number
    status, answer = apps.call_wsgi(f"{API}:add-many", _lines(tenants[:1]) + b"[1]\n")
    assert (status, answer["option"]) == (400, "line") and "line 2" in answer["error"]
    status, answer = apps.call_wsgi(
        f"{API}:add-many", json.dumps(tenants[:1]).encode(), content_type="application/json"
    )
    assert status == 400 and "x-ndjson" in answer["error"]
    assert apps.call_wsgi(f"{API}:add-many", b"", method="GET")[0] == 405
    assert StoredSchedules(apps.store).list() == {}


def _head(sock: socket.socket, path: str, length: int) -> bytes:
    """Send the head of a bulk write with the secret, declaring ``length`` bytes of body and
    asking for ``100 Continue`` before any of it is sent; what the server first answers."""
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {SECRET}\r\n"
        f"Content-Type: {NDJSON}\r\nContent-Length: {length}\r\n"
        "Expect: 100-continue\r\n\r\n".encode()
    )
    return _answered_head(sock)


def _answered_head(sock: socket.socket) -> bytes:
    """What the server sends on ``sock`` up to the end of an answer's head."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(4096)
        assert chunk, f"closed before it answered: {answer!r}"
        answer += chunk
    return answer


def _answer(sock: socket.socket) -> tuple[bytes, bytes]:
    """A whole response's head and its body (read by its Content-Length)."""
    top, _, rest = _answered_head(sock).partition(b"\r\n\r\n")
    [length] = [
        int(line.partition(b":")[2])
        for line in top.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    ]
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, f"closed before the end of its answer: {top + rest!r}"
        rest += chunk
    return top, rest


def test_a_bulk_write_past_the_pool_is_refused_before_its_body_is_read() -> None:
    """Served by the beat's own server with a pool of one: a bulk write holds the pool's slot
    from before its body is read, so a second one is answered 503 while its body is still
    unsent (no ``100 Continue`` asked for it first) and its connection closed; the first then
    sends its body and is answered, and the slot serves the next."""
    store = MemoryStore(allow_local_cluster=True)
    job = declare("bulk.ok", every="1h", target="inline", handler=lambda ctx: None)
    app = asgi_app(Beat(store, [job], replica_id="bulk-1"), secret=SECRET, max_concurrency=1)
    port = free_port()
    server = serving.serve(app, "127.0.0.1", port)
    body = _lines([{"name": f"tenant-{n}.report"} for n in range(1_000)])
    assert len(body) > MAX_BODY
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as first:
            # 100 Continue: the app has asked for the body, so it holds the slot.
            continued = _head(first, f"{API}:remove-many", len(body))
            assert continued.startswith(b"HTTP/1.1 100 "), continued
            with socket.create_connection(("127.0.0.1", port), timeout=10) as second:
                refused = _head(second, f"{API}:add-many", BULK_BODY)
                assert refused.startswith(b"HTTP/1.1 503 "), refused
                assert b"\r\nconnection: close\r\n" in refused.lower(), refused
                rest = b""
                while chunk := second.recv(4096):  # until the server closes it
                    rest += chunk
                assert b"busy; try again" in refused + rest
            first.sendall(body)
            top, answer = _answer(first)
            assert top.startswith(b"HTTP/1.1 200 "), top
            assert json.loads(answer)["removed"] == 0
        with socket.create_connection(("127.0.0.1", port), timeout=10) as third:
            assert _head(third, f"{API}:remove-many", len(body)).startswith(b"HTTP/1.1 100 ")
            third.sendall(body)
            assert _answer(third)[0].startswith(b"HTTP/1.1 200 ")
    finally:
        server.shutdown()
