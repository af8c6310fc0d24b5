"""The panel mounted in FastAPI, Starlette, Flask and Django (``examples/web``), each served
the way its users serve it (uvicorn, ``flask run``, ``django runserver``) and used over HTTP:
the app's own route, the health probe, the trigger, the login form, a pause from the page."""

from __future__ import annotations

import http.client
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from cron_bridge.control import pause as control
from cron_bridge.stores import store_from_url
from tests.e2e.processes import REPO, command_env
from tests.servers import free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent


def command(framework: str, port: int) -> list[str]:
    if framework in ("fastapi", "starlette"):
        return [str(BIN / "uvicorn"), f"examples.web.{framework}_app:app", "--port", str(port)]
    if framework == "flask":
        return [str(BIN / "flask"), "--app", "examples.web.flask_app", "run", "--port", str(port)]
    return [
        sys.executable,
        "-m",
        "django",
        "runserver",
        f"127.0.0.1:{port}",
        "--noreload",
        "--settings=examples.web.django_app",
    ]


class Client:
    def __init__(self, port: int) -> None:
        self.port = port

    def call(
        self,
        method: str,
        path: str,
        body: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            sent = dict(headers or {})
            data = None
            if body is not None:
                data = urlencode(body)
                sent["Content-Type"] = "application/x-www-form-urlencoded"
            conn.request(method, path, body=data, headers=sent)
            answer = conn.getresponse()
            return (
                answer.status,
                {k.lower(): v for k, v in answer.getheaders()},
                (answer.read().decode()),
            )
        finally:
            conn.close()

    def up(self) -> bool:
        try:
            return self.call("GET", "/")[0] == 200
        except OSError:
            return False


@pytest.fixture(params=["fastapi", "starlette", "flask", "django"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Client, str, str]]:
    """The example app of one framework, served on a port of its own."""
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    secret = secrets.token_urlsafe(24)
    port = free_port()
    env = command_env(CRON_BRIDGE_STORE=store_url, CRON_BRIDGE_SECRET=secret)
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            command(request.param, port), env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT
        )
    client = Client(port)
    try:
        wait_for(lambda: client.up() or server.poll() is not None, 60, "the web app")
        assert server.poll() is None, log.read_text()[-2000:]
        yield client, store_url, secret
    finally:
        server.terminate()
        server.wait(20)


def test_the_panel_serves_from_the_web_app(served: tuple[Client, str, str]) -> None:
    client, store_url, secret = served
    bearer = {"Authorization": f"Bearer {secret}"}
    assert client.call("GET", "/")[0] == 200, "the app's own routes stay"

    status, _, body = client.call("GET", "/_scheduler/healthz")
    assert status == 200 and '"role": "panel"' in body and '"store_reachable": true' in body

    status, _, body = client.call("POST", "/_scheduler/run/cache.rebuild", headers=bearer)
    assert (status, '"outcome": "completed"' in body) == (200, True), body
    assert client.call("POST", "/_scheduler/run/cache.rebuild")[0] == 401
    assert client.call("GET", "/_scheduler/run/nope", headers=bearer)[0] == 404

    status, _, _ = client.call("POST", "/_scheduler/login", {"secret": "wrong" * 5})
    assert status == 401
    status, headers, _ = client.call("POST", "/_scheduler/login", {"secret": secret})
    assert status == 303 and headers["location"] == "/_scheduler/", headers
    cookie = headers["set-cookie"].split(";", 1)[0]
    assert "Path=/_scheduler/" in headers["set-cookie"]
    status, _, page = client.call("GET", "/_scheduler/", headers={"Cookie": cookie})
    assert status == 200 and "cache.rebuild" in page
    found = re.search(r'name=csrf value="([^"]+)"', page)
    assert found, page[:2000]
    status, headers, _ = client.call(
        "POST",
        "/_scheduler/api/jobs/cache.rebuild/pause",
        {"csrf": found[1], "reason": "from the page"},
        headers={"Cookie": cookie},
    )
    assert status == 303, headers
    status, _, body = client.call("GET", "/_scheduler/api/jobs/cache.rebuild", headers=bearer)
    assert status == 200 and "from the page" in body

    store = store_from_url(store_url)
    try:
        assert control.paused(store)["cache.rebuild"].reason == "from the page"
        assert [r.outcome for r in store.history("cache.rebuild")] == ["completed"]
        assert store.replicas() == [], "the panel runs no timers: no heartbeat"
    finally:
        store.close()
