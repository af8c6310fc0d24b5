"""The HTTP trigger over a real socket, served by ``cron-bridge beat --http``."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from cron_bridge import Beat, ConfigError, declare
from cron_bridge.http import asgi_app, wsgi_app
from cron_bridge.stores import MemoryStore
from tests.apps import journal
from tests.e2e.processes import BeatProcess, command_env
from tests.servers import free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

SECRET = "c2VjcmV0LWZvci10ZXN0cy1vbmx5LTMyYnl0ZXM"  # a test secret long enough to be one


def call(
    url: str, token: str | None = None, method: str = "POST", body: Any = None
) -> tuple[int, dict[str, Any]]:
    """A request with the bearer token (and a JSON body); the status and the JSON answer."""
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    request = urllib.request.Request(url, method=method, data=data)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_http_trigger_over_a_real_socket(tmp_path: Path) -> None:
    """200 with outcome, occurrence_id and duration_ms; 401; 404; 500 for a failing job;
    the health endpoint without a token."""
    port = free_port()
    beat = BeatProcess(
        "http",
        tmp_path,
        command_env(),
        app="tests.apps.cli_app",
        store_url=f"sqlite:///{tmp_path}/s.db",
        extra=["--http", f"127.0.0.1:{port}", "--secret", SECRET],
    ).start()
    base = f"http://127.0.0.1:{port}/_scheduler/run"
    try:
        wait_for(lambda: "HTTP trigger on" in beat.output(), 30, "the HTTP server")
        status, body = call(f"{base}/reports.minutely", SECRET)
        assert status == 200, body
        assert body["outcome"] == "completed"
        assert body["occurrence_id"].startswith("reports.minutely@")
        assert isinstance(body["duration_ms"], float)
        status, body = call(f"{base}/reports.minutely", SECRET, method="GET")
        assert (status, body["outcome"]) == (200, "skipped-claimed")
        assert call(f"{base}/reports.minutely")[0] == 401
        assert call(f"{base}/reports.minutely", "wrong")[0] == 401
        assert call(f"{base}/nope", SECRET)[0] == 404
        status, body = call(f"{base}/billing.broken", SECRET)
        assert status == 500
        assert body["outcome"] == "failed"
        assert "ledger" in body["error"]
        status, body = call(f"http://127.0.0.1:{port}/_scheduler/healthz", method="GET")
        assert status == 200, body
        assert body == {
            "replica": "http-1",
            "running": True,
            "store_reachable": True,
            "claiming": True,
            "clock_offset_ms": None,
        }  # SQLite: the host's own clock
        beat.terminate()
    finally:
        beat.ensure_stopped()


def test_the_apps_refuse_to_start_without_a_secret() -> None:
    """Both apps raise ConfigError without a secret."""
    beat = Beat(MemoryStore(), [])
    with pytest.raises(ConfigError, match="secret"):
        wsgi_app(beat, secret="")
    with pytest.raises(ConfigError, match="secret"):
        asgi_app(beat, secret="")


def test_the_asgi_app_answers_like_the_wsgi_app() -> None:
    """Driven through the ASGI protocol: 401 without the token, 404 for an unknown job; the
    login form's body arrives in two chunks and sets the cookie that opens the dashboard."""
    job = declare("asgi.job", every="1h", target="inline", handler=lambda ctx: None)
    beat = Beat(MemoryStore(allow_local_cluster=True), [job])
    app = asgi_app(beat, secret=SECRET)

    def request(
        headers: list[tuple[bytes, bytes]],
        path: str,
        method: str = "POST",
        body: bytes = b"",
        root_path: str = "",
    ) -> tuple[int, dict[bytes, bytes], bytes]:
        sent: list[dict[str, Any]] = []
        chunks = [body[: len(body) // 2], body[len(body) // 2 :]]

        async def receive() -> dict[str, Any]:
            chunk = chunks.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

        async def send(message: Any) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "method": method,
            "path": path,
            "headers": headers,
            "root_path": root_path,
        }
        asyncio.run(app(scope, receive, send))
        return int(sent[0]["status"]), dict(sent[0]["headers"]), sent[1]["body"]

    assert request([], "/_scheduler/run/x")[0] == 401
    # Health needs no token. A beat never started is a web app's panel: live while its store
    # answers (also mounted where the server strips the prefix off the path).
    status, _, body = request([], "/_scheduler/healthz", method="GET")
    assert status == 200 and b'"role": "panel"' in body
    stripped = request([], "/healthz", method="GET", root_path="/_scheduler")
    assert stripped[0] == 200 and b'"role": "panel"' in stripped[2]
    assert (
        request([(b"authorization", b"Bearer " + SECRET.encode())], "/_scheduler/run/x")[0] == 404
    )
    page = request([], "/_scheduler/", method="GET")
    assert page[0] == 401 and b"asgi.job" not in page[2]
    form = [(b"content-type", b"application/x-www-form-urlencoded")]
    signed = request(form, "/_scheduler/login", body=b"secret=" + SECRET.encode())
    assert signed[0] == 303
    cookie = signed[1][b"set-cookie"].split(b";")[0]
    assert b"HttpOnly" in signed[1][b"set-cookie"] and SECRET.encode() not in cookie
    page = request([(b"cookie", cookie)], "/_scheduler/", method="GET")
    assert page[0] == 200 and b"asgi.job" in page[2]
    assert page[1][b"content-type"].startswith(b"text/html")
    beat.start()
    beat.stop()
    assert request([], "/_scheduler/healthz", method="GET")[0] == 503, "a stopped beat is not live"


def test_concurrent_triggers_of_an_overlap_skip_job_run_it_once(tmp_path: Path) -> None:
    """Twelve triggers at once of an instance job with overlap="skip": one run, eleven
    skipped-overlap, and never two handlers at the same time (they go through the beat's
    pool and overlap rule, not the HTTP threads)."""
    port = free_port()
    notes = tmp_path / "journal.jsonl"
    beat = BeatProcess(
        "http",
        tmp_path,
        command_env(notes),
        app="tests.apps.triggered",
        store_url=f"sqlite:///{tmp_path}/s.db",
        extra=["--http", f"127.0.0.1:{port}", "--secret", SECRET],
    ).start()
    url = f"http://127.0.0.1:{port}/_scheduler/run/cache.rebuild"
    try:
        wait_for(lambda: "HTTP trigger on" in beat.output(), 30, "the HTTP server")
        with ThreadPoolExecutor(12) as pool:
            results = list(pool.map(lambda _: call(url, SECRET), range(12)))
    finally:
        beat.terminate()
    outcomes = sorted(body["outcome"] for _, body in results)
    assert outcomes == ["completed"] + ["skipped-overlap"] * 11, results
    events = journal.read(notes)
    assert [e["event"] for e in events] == ["start", "end"]
