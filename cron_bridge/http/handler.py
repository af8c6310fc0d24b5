"""The request handler: routing, authentication, health, the trigger and the dashboard under
one secret (served by ``cron_bridge.http.apps`` as ASGI or WSGI).

No web framework is needed: both apps share one small request handler.

- ``GET`` or ``POST <path>/run/<job>`` with ``Authorization: Bearer <secret>``:
  ``200 {"outcome", "occurrence_id", "duration_ms"}`` once the job finished (a queue target:
  once enqueued), ``401`` for a wrong or missing token, ``404`` for an unknown job, ``500``
  when the run failed, ``503`` when the store could not be reached (the job did not run).
- ``POST <path>/api/schedules:add-many`` (``:update-many``, ``:remove-many``) with the bearer
  secret: many stored schedules at once, in a body of up to ``BULK_BODY``; the route and the
  secret are checked before any of the body is read (``body_bound``), so a caller without
  the secret is refused at once and can never make the server hold more than ``MAX_BODY``.
- ``GET <path>/healthz`` needs no token: ``200 {"replica", "running", "store_reachable",
  "claiming"}`` while the beat's loop runs, ``503`` once it stopped or failed its last ticks (with
  ``"failing"`` saying so; a liveness probe).
- ``<path>/`` is the dashboard (``cron_bridge.http.dashboard``): the bearer token, or a login form
  that sets a signed, expiring session cookie (HttpOnly, SameSite=Strict, Secure over https;
  ``cron_bridge.http.sessions``). Without either it shows nothing of the jobs. Its buttons post
  forms carrying a CSRF token of the session.

Failed authentications are throttled per client (``cron_bridge.http.throttle``): 429 with
``Retry-After``. The secret must look like one: not a known placeholder, at least 16 bytes.
Paths arrive percent-decoded from the server (ASGI ``path``, WSGI ``PATH_INFO``) and are not
decoded again.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, urlencode

from cron_bridge.control.schedules import StoredSchedules
from cron_bridge.errors import ConfigError, StoreUnavailable
from cron_bridge.http import dashboard
from cron_bridge.http.api_control import ACTIONS, control_response
from cron_bridge.http.api_schedules import BULK_ACTIONS, bulk_response, schedules_response
from cron_bridge.http.auth import Auth
from cron_bridge.http.tally import Tally
from cron_bridge.http.wire import BULK_BODY, MAX_BODY, Request, Response, redirect
from cron_bridge.plumbing.secret import check_secret
from cron_bridge.stores import Store, store_from_url

if TYPE_CHECKING:
    from cron_bridge.beat.replica import Beat

__all__ = ["StoreProbe", "TriggerHandler", "open_namespaces"]

log = logging.getLogger(__name__)

NAMESPACE_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_FAILED = {"failed", "aborted"}


class StoreProbe:
    """Whether a store answers, pinged in a background thread at most every ``interval``
    seconds; until the first answer it is taken to be reachable."""

    def __init__(self, store: Store, interval: float = 5.0) -> None:
        self.store = store
        self.interval = interval
        self._ok = True
        self._next = 0.0
        self._busy = False
        self._lock = threading.Lock()

    def reachable(self) -> bool:
        now = time.monotonic()
        with self._lock:
            if not self._busy and now >= self._next:
                self._busy, self._next = True, now + self.interval
                threading.Thread(target=self._ping, name="cron-bridge-probe", daemon=True).start()
        return self._ok

    def _ping(self) -> None:
        try:
            self.store.ping()
            self._ok = True
        except StoreUnavailable:
            self._ok = False
        finally:
            with self._lock:
                self._busy = False


class TriggerHandler:
    """The request logic both apps share: routing, health, the trigger and the dashboard's
    pages, each route through ``Auth`` first (``/healthz`` excepted)."""

    def __init__(
        self,
        beat: Beat,
        secret: str,
        path: str,
        namespaces: Mapping[str, str | Store] | None = None,
    ) -> None:
        self.beat = beat
        self.namespaces = open_namespaces(namespaces or {})
        self.base = path.rstrip("/")
        self.auth = Auth(check_secret(secret), beat.store, self.base)
        self.prefix = self.base + "/run/"
        self.api_prefix = self.base + "/api/jobs/"
        self.schedules_path = self.base + "/api/schedules"
        self.tally = Tally()  # the overview's counts, shared by every tab
        # ":" is in no schedule's name: <path>/api/schedules/<name> never meets these.
        self.bulk_paths = {f"{self.schedules_path}:{action}": action for action in BULK_ACTIONS}
        self.health_path = self.base + "/healthz"
        self._probe = StoreProbe(beat.store)

    def body_bound(self, head: Request) -> int | Response:
        """The bytes of body ``head`` (a request whose body is not read yet) may send, or the
        answer it gets at once: ``BULK_BODY`` for a ``POST`` to a bulk route with the bearer
        secret, its refusal (``401``, counted; ``429``) without it, ``MAX_BODY`` for any
        other request. No I/O: the ASGI app asks it on its event loop."""
        if head.method != "POST" or head.path not in self.bulk_paths:
            return MAX_BODY
        caller = self.auth.caller(head)  # no body, so no form: the bearer secret or nothing
        return caller if isinstance(caller, Response) else BULK_BODY

    def respond(self, request: Request) -> Response:
        path = request.path
        if path == self.health_path:
            # For liveness probes, without the secret: says nothing of the jobs.
            return self._health()
        try:
            if path in (self.base, self.base + "/", self.base + "/login", self.base + "/logout"):
                return self._dashboard(request)
            if path.startswith(self.base + "/jobs/"):
                return self._dashboard(request)
            if path.startswith(self.prefix) and "/" not in path[len(self.prefix) :]:
                return self._run(request)
            if path.startswith(self.api_prefix) and len(path) > len(self.api_prefix):
                return self._control(request)
            if path == self.schedules_path or path.startswith(self.schedules_path + "/"):
                return self._schedules(request)
            if path in self.bulk_paths:
                return self._bulk(request)
        except StoreUnavailable as exc:
            return Response(503, {"error": str(exc)})
        return Response(404, {"error": "not found"})

    def _health(self) -> Response:
        health = self.beat.health()
        if self.beat.started:
            return Response(200 if health["running"] else 503, health)
        # A panel: mounted in a web app that runs no timers (the beat runs elsewhere). It is
        # healthy while it can reach the store it shows, as last seen by a background probe:
        # no store I/O on the request (ASGI answers this on its event loop), and however
        # often strangers call it, at most one store ping per interval.
        reachable = self._probe.reachable()
        health.update(store_reachable=reachable, role="panel")
        return Response(200 if reachable else 503, health)

    def _control(self, request: Request) -> Response:
        caller = self.auth.caller(request)
        if isinstance(caller, Response):
            return caller
        rest = request.path[len(self.api_prefix) :]
        suffixes = tuple(f"/{action}" for action in ACTIONS)
        name, _, action = rest.rpartition("/") if rest.endswith(suffixes) else (rest, "", "")
        if "/" in name or not name:
            return Response(404, {"error": "not found"})
        return control_response(
            self.beat,
            request,
            name,
            action or None,
            from_page=caller,
            back=lambda said: self._back(request, name, said),
        )

    def _schedules(self, request: Request) -> Response:
        caller = self.auth.caller(request)
        if isinstance(caller, Response):
            return caller
        name = request.path[len(self.schedules_path) + 1 :] or None
        if name is not None and "/" in name:
            return Response(404, {"error": "not found"})
        return schedules_response(StoredSchedules(self.beat.store), request, name)

    def _bulk(self, request: Request) -> Response:
        caller = self.auth.caller(request)
        if isinstance(caller, Response):
            return caller
        schedules = StoredSchedules(self.beat.store)
        return bulk_response(schedules, request, self.bulk_paths[request.path])

    def _run(self, request: Request) -> Response:
        caller = self.auth.caller(request)
        if isinstance(caller, Response):
            return caller
        from_page = caller
        if request.method not in ("GET", "POST"):
            return Response(405, {"error": "use GET or POST"}, (("Allow", "GET, POST"),))
        form = request.form()
        name = request.path[len(self.prefix) :]
        if self.beat.job(name) is None:
            return Response(404, {"error": f"no job called {name!r}"})
        result = self.beat.trigger(name, force=from_page and form.get("force") == "1")
        if from_page:
            said = dashboard.run_now_words(
                result.outcome,
                result.occurrence_id,
                result.replica,
                result.error or result.reason,
                result.duration_ms,
            )
            return self._back(request, name, said)
        body: dict[str, Any] = {
            "outcome": result.outcome,
            "occurrence_id": result.occurrence_id,
            "duration_ms": result.duration_ms,
        }
        if result.error or result.reason:
            body["error"] = result.error or result.reason
        return Response(500 if result.outcome in _FAILED else 200, body)

    def _back(self, request: Request, name: str, said: str) -> Response:
        """Back to the job's page after a button press, saying ``said`` there, sealed for the
        session whose form it was (its token checked by ``Auth.caller``)."""
        seal = self.auth.sessions.seal(request.form()["csrf"], said)
        query = urlencode({"said": said, "seal": seal})
        return redirect(f"{self.base}/jobs/{quote(name, safe='')}?{query}")

    def _dashboard(self, request: Request) -> Response:
        path = request.path
        if path == self.base + "/login":
            return self.auth.login(request)
        session = self.auth.reader(request)
        if isinstance(session, Response):
            return session
        csrf = self.auth.sessions.csrf(session)
        if path == self.base + "/logout":
            return self.auth.logout(request, csrf)
        if request.method != "GET":
            return Response(405, {"error": "use GET"}, (("Allow", "GET"),))
        query = parse_qs(request.query)
        namespace = query.get("ns", [""])[-1] or None
        if namespace is not None and namespace not in self.namespaces:
            return Response(404, {"error": "no such namespace"})
        view = dashboard.View(self.beat, self.namespaces, namespace)
        number = _page_number(query.get("page", ["1"])[-1])
        if path in (self.base, self.base + "/"):
            return Response(
                200,
                dashboard.overview_page(
                    view,
                    self.base,
                    csrf,
                    query.get("q", [""])[-1],
                    query.get("state", ["all"])[-1],
                    number,
                    self.tally,
                ),
            )
        name = path[len(self.base + "/jobs/") :]
        found = view.infos([name])
        if not found:
            return Response(404, dashboard.not_found_page(self.base, name, view.names()))
        said = self.auth.sessions.unsealed(
            csrf, query.get("said", [None])[-1], query.get("seal", [None])[-1]
        )
        return Response(
            200,
            dashboard.job_page(
                view, self.base, csrf, *found[0], said, query.get("state", ["all"])[-1], number
            ),
        )


def _page_number(text: str) -> int:
    """A page's number from the query: 1 for anything else."""
    return int(text) if text.isascii() and text.isdigit() and len(text) < 7 else 1


def open_namespaces(given: Mapping[str, str | Store]) -> dict[str, Store]:
    """The stores of the other namespaces a dashboard shows, by name.

    Raises:
        ConfigError: a name that is not ``[A-Za-z0-9._-]``, up to 64, or a bad store URL.
    """
    opened = {}
    for name, store in given.items():
        if not isinstance(name, str) or not NAMESPACE_NAME.fullmatch(name):
            raise ConfigError(
                "a namespace name is [A-Za-z0-9._-], up to 64 characters",
                option="namespace",
                value=name,
            )
        opened[name] = store_from_url(store) if isinstance(store, str) else store
    return opened
