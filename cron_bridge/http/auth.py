"""Who may do what on the web surface: the bearer secret (compared in constant time),
dashboard sessions (a login form sets a signed cookie; every form carries the session's
token), and the throttle on failed attempts from one address."""

from __future__ import annotations

import hmac

from cron_bridge.http import dashboard
from cron_bridge.http.sessions import Sessions
from cron_bridge.http.throttle import AuthThrottle
from cron_bridge.http.wire import COOKIE, Request, Response, redirect
from cron_bridge.stores import Store

__all__ = ["Auth"]


class Auth:
    """The checks every route but ``/healthz`` goes through.

    Args:
        secret: the secret, as bytes (``check_secret``).
        store: where sessions are revoked (so every replica refuses a signed-out cookie).
        base: the path the apps are served under.
    """

    def __init__(self, secret: bytes, store: Store, base: str) -> None:
        self._secret = secret
        self.base = base
        self.sessions = Sessions(secret, store)
        self.throttle = AuthThrottle()

    def bearer_ok(self, authorization: str | None) -> bool:
        scheme, _, token = (authorization or "").partition(" ")
        # Header values arrive as latin-1 text (ASGI and WSGI alike): their bytes are what
        # the client sent, so a UTF-8 secret compares byte for byte.
        given = token.strip().encode("latin-1", "replace")
        return scheme.lower() == "bearer" and hmac.compare_digest(given, self._secret)

    def session(self, request: Request) -> str | None:
        return self.sessions.check(request.cookie(COOKIE))

    def throttled(self, request: Request) -> Response | None:
        wait = self.throttle.retry_after(request.client)
        if wait is None:
            return None
        return Response(
            429,
            {"error": "too many failed attempts; wait and try again"},
            (("Retry-After", str(wait)),),
        )

    def refused(self, request: Request, response: Response) -> Response:
        """Count a failed authentication of this client, then answer ``response``."""
        self.throttle.failed(request.client)
        return response

    def caller(self, request: Request) -> Response | bool:
        """An action's caller: the refusal to answer, or whether it came from the dashboard
        (a session and its form token) rather than with the bearer secret. Checked before
        the job name, so a caller without the secret learns nothing."""
        throttled = self.throttled(request)
        if throttled is not None:
            return throttled
        form = request.form()
        session = self.session(request) if "csrf" in form else None
        from_page = session is not None
        if not from_page and not self.bearer_ok(request.headers.get("authorization")):
            return self.refused(
                request, Response(401, {"error": "unauthorized"}, (("WWW-Authenticate", "Bearer"),))
            )
        csrf = self.sessions.csrf(session)
        if from_page and not hmac.compare_digest(form["csrf"].encode(), csrf.encode()):
            return Response(403, {"error": "bad form token; reload the page"})
        return from_page

    def reader(self, request: Request) -> Response | str | None:
        """A page's reader: the refusal to answer (the login form), or the session (None when
        the bearer secret came instead)."""
        throttled = self.throttled(request)
        if throttled is not None:
            return throttled
        session = self.session(request)
        if session is None and not self.bearer_ok(request.headers.get("authorization")):
            if request.cookie(COOKIE) or request.headers.get("authorization"):
                return self.refused(request, Response(401, dashboard.login_page(self.base)))
            return Response(401, dashboard.login_page(self.base))
        return session

    def login(self, request: Request) -> Response:
        if request.method != "POST":
            return redirect(self.base + "/")
        throttled = self.throttled(request)
        if throttled is not None:
            return throttled
        given = request.form().get("secret", "").encode()
        if not hmac.compare_digest(given, self._secret):
            wrong = Response(401, dashboard.login_page(self.base, wrong=True))
            return self.refused(request, wrong)
        cookie = self.cookie(request, self.sessions.issue(), self.sessions.max_age())
        return redirect(self.base + "/", ("Set-Cookie", cookie))

    def logout(self, request: Request, csrf: str) -> Response:
        token = request.form().get("csrf", "").encode()
        if request.method != "POST" or not hmac.compare_digest(token, csrf.encode()):
            return Response(403, {"error": "sign out with the page's button"})
        self.sessions.revoke(request.cookie(COOKIE))
        return redirect(self.base + "/", ("Set-Cookie", self.cookie(request, "", 0)))

    def cookie(self, request: Request, value: str, max_age: int) -> str:
        secure = "; Secure" if request.https else ""
        return (
            f"{COOKIE}={value}; Path={self.base}/; Max-Age={max_age}; HttpOnly; "
            f"SameSite=Strict{secure}"
        )
