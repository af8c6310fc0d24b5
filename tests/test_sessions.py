"""Dashboard sessions and the throttle on failed authentication, on a fake clock."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cron_bridge import Beat, ConfigError, declare
from cron_bridge.http import asgi_app
from cron_bridge.http.sessions import Sessions
from cron_bridge.http.throttle import AuthThrottle
from cron_bridge.plumbing.secret import check_secret
from cron_bridge.stores import MemoryStore
from tests.waiting import waited

SECRET = "a-secret-for-the-session-tests"
JOB = declare("asgi.job", every="1h", target="inline", handler=lambda ctx: None)


class App:
    """The ASGI app driven in-process, as a server would."""

    def __init__(self, store: MemoryStore, secret: str = SECRET) -> None:
        self.app = asgi_app(Beat(store, [JOB]), secret=secret)

    def __call__(
        self,
        path: str,
        *,
        method: str = "GET",
        headers: dict[str, str] | None = None,
        body: bytes = b"",
        scheme: str = "http",
        client: str = "10.0.0.1",
    ) -> tuple[int, dict[str, str], bytes]:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: Any) -> None:
            sent.append(message)

        raw = [(k.lower().encode(), v.encode("utf-8")) for k, v in (headers or {}).items()]
        scope = {
            "type": "http",
            "method": method,
            "path": path,
            "headers": raw,
            "scheme": scheme,
            "client": (client, 50000),
        }
        asyncio.run(self.app(scope, receive, send))
        head = {k.decode(): v.decode("latin-1") for k, v in sent[0]["headers"]}
        return int(sent[0]["status"]), head, sent[1]["body"]

    def login(self, secret: str = SECRET, **options: Any) -> tuple[int, dict[str, str], bytes]:
        form = {"content-type": "application/x-www-form-urlencoded"}
        return self(
            "/_scheduler/login",
            method="POST",
            headers=form,
            body=b"secret=" + secret.encode(),
            **options,
        )


def cookie_of(response: tuple[int, dict[str, str], bytes]) -> str:
    return response[1]["set-cookie"].split(";")[0]


def test_every_login_gets_its_own_session_which_sign_out_ends() -> None:
    """Two logins, two cookies; after sign-out the cookie opens nothing, the other still does."""
    app = App(MemoryStore())
    first, second = cookie_of(app.login()), cookie_of(app.login())
    assert first != second and SECRET not in first
    assert app("/_scheduler/", headers={"cookie": first})[0] == 200
    page = app("/_scheduler/", headers={"cookie": first})[2].decode()
    csrf = page.split('name=csrf value="')[1].split('"')[0]
    form = {"cookie": first, "content-type": "application/x-www-form-urlencoded"}
    out = app("/_scheduler/logout", method="POST", body=f"csrf={csrf}".encode(), headers=form)
    assert out[0] == 303 and "Max-Age=0" in out[1]["set-cookie"]
    assert app("/_scheduler/", headers={"cookie": first})[0] == 401
    assert app("/_scheduler/", headers={"cookie": second})[0] == 200


def test_sign_out_is_seen_by_every_replica_on_the_store() -> None:
    """Another replica (another app on the same store) refuses the signed-out cookie too."""
    store = MemoryStore()
    here, there = App(store), App(store)
    cookie = cookie_of(here.login())
    assert there("/_scheduler/", headers={"cookie": cookie})[0] == 200
    Sessions(SECRET.encode(), store).revoke(cookie.split("=", 1)[1])
    assert there("/_scheduler/", headers={"cookie": cookie})[0] == 401


def test_a_new_secret_ends_every_session() -> None:
    """The cookie is signed with the secret: after rotating it, old cookies open nothing."""
    store = MemoryStore()
    cookie = cookie_of(App(store).login())
    rotated = App(store, secret="the-rotated-secret-of-the-tests")
    assert rotated("/_scheduler/", headers={"cookie": cookie})[0] == 401


def test_a_session_expires_after_its_lifetime() -> None:
    """A session is good for its lifetime (12 h by default), not a second longer."""
    now = [1_800_000_000.0]
    sessions = Sessions(SECRET.encode(), MemoryStore(), clock=lambda: now[0])
    cookie = sessions.issue()
    now[0] += timedelta(hours=11, minutes=59).total_seconds()
    assert sessions.check(cookie) is not None
    now[0] += 120
    assert sessions.check(cookie) is None
    assert sessions.check(cookie.replace(cookie[-1], "0" if cookie[-1] != "0" else "1")) is None


def test_the_cookie_is_secure_over_https_only() -> None:
    """Secure when the request came over https (the server sets the scheme, from a trusted
    proxy's X-Forwarded-Proto too); never on plain http, where the browser would drop it."""
    app = App(MemoryStore())
    assert "; Secure" in app.login(scheme="https")[1]["set-cookie"]
    assert "Secure" not in app.login(scheme="http")[1]["set-cookie"]
    assert "Max-Age=43200" in app.login()[1]["set-cookie"]


def test_guessing_is_throttled_per_client_and_never_locks_out_another() -> None:
    """After ten wrong guesses a client gets 429 with Retry-After, even with the right secret;
    another client signs in with the right secret at once."""
    app = App(MemoryStore())
    bad = {"authorization": "Bearer wrong-wrong-wrong-wrong"}
    statuses = [app("/_scheduler/run/asgi.job", method="POST", headers=bad)[0] for _ in range(12)]
    assert statuses[:10] == [401] * 10 and statuses[10:] == [429, 429]
    right = {"authorization": f"Bearer {SECRET}"}
    throttled = app("/_scheduler/run/asgi.job", method="POST", headers=right)
    assert throttled[0] == 429 and int(throttled[1]["retry-after"]) >= 1
    assert app.login()[0] == 429
    other = app("/_scheduler/run/asgi.job", method="POST", headers=right, client="10.0.0.2")
    assert other[0] == 200
    assert app.login(client="10.0.0.3")[0] == 303


def test_the_throttle_lets_a_client_back_in_as_time_passes() -> None:
    """One more try every two seconds once the burst is spent."""
    now = [0.0]
    throttle = AuthThrottle(burst=3, rate=0.5, clock=lambda: now[0])
    for _ in range(3):
        throttle.failed("a")
    assert throttle.retry_after("a") == 2 and throttle.retry_after("b") is None
    now[0] += 2
    assert throttle.retry_after("a") is None


def test_a_utf8_secret_works_as_a_bearer_token() -> None:
    """Header bytes are compared as sent: a non-ASCII secret opens the trigger."""
    secret = "zażółć-gęślą-jaźń-sekret"
    app = App(MemoryStore(), secret=secret)
    status = app(
        "/_scheduler/run/asgi.job", method="POST", headers={"authorization": f"Bearer {secret}"}
    )[0]
    assert status == 200
    assert app.login(secret=secret)[0] == 303


@pytest.mark.parametrize("secret", ["", "change-me", "CHANGE-ME", "s3cret", "short-secret"])
def test_a_placeholder_or_short_secret_is_refused_with_how_to_make_one(secret: str) -> None:
    """No secret, a known placeholder, or fewer than 16 bytes: ConfigError saying how."""
    with pytest.raises(ConfigError, match="token_urlsafe"):
        check_secret(secret)


def test_a_panels_health_probe_pings_the_store_in_the_background_at_most_once_per_interval(
    tmp_path: Path,
) -> None:
    """A panel's healthz never waits on the store and never pings it more than once per
    interval, however often it is called; an unreachable store turns it to False."""
    from cron_bridge.http.handler import StoreProbe
    from cron_bridge.stores import store_from_url

    store = store_from_url(f"sqlite:///{tmp_path}/no-such-dir/x.db")  # ping fails: no folder
    pings = []
    real_ping = store.ping

    def counted() -> None:
        pings.append(time.monotonic())
        real_ping()

    store.ping = counted  # type: ignore[method-assign]
    probe = StoreProbe(store, interval=60)
    for _ in range(200):
        probe.reachable()  # True until the background ping answers (it may already have)
    waited(lambda: not probe.reachable(), 30, every=0.01)
    assert probe.reachable() is False
    assert len(pings) == 1


def test_an_unknown_job_page_is_an_html_404_with_the_closest_names() -> None:
    """Not raw JSON: a page that says what was not found, links the closest job, and leads
    back; the name from the URL is escaped."""
    app = App(MemoryStore())
    cookie = cookie_of(app.login())
    status, head, body = app("/_scheduler/jobs/asgi.jbo", headers={"cookie": cookie})
    page = body.decode()
    assert status == 404 and head["content-type"].startswith("text/html")
    assert "No job called &#x27;asgi.jbo&#x27;" in page
    assert '<a href="/_scheduler/jobs/asgi.job">asgi.job</a>' in page
    assert '<a href="/_scheduler/">All jobs</a>' in page
    hostile = app("/_scheduler/jobs/<script>x</script>", headers={"cookie": cookie})
    assert hostile[0] == 404 and b"<script>x" not in hostile[2]
