"""Serving the trigger and the dashboard from a web app you already run.

The apps of ``cron_bridge.http`` are plain ASGI and WSGI callables, so FastAPI, Starlette
(``app.mount``) and Flask (werkzeug's ``DispatcherMiddleware``) mount them as they are. Django
routes to views, not to WSGI apps: ``django_view`` makes one.

In a web app, build the ``Beat`` and never start it: it then runs no timers (the beat runs in
a deployment of its own) and only serves the panel: the jobs it knows, their history and
controls from the store, and runs on demand. Its ``<path>/healthz`` answers 200 while the
store does.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["django_view"]

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def django_view(app: WSGIApp) -> Callable[..., Any]:
    """A Django view that answers with ``app`` (``cron_bridge.http.wsgi_app``): route every
    path under the app's ``path`` to it, e.g.
    ``re_path(r"^_scheduler(?:/.*)?$", django_view(wsgi_app(beat, secret=...)))``.

    The view is exempt from Django's CSRF check: the dashboard's forms carry a token of its own
    session, and the API takes the bearer secret. Django reads the body (within
    ``DATA_UPLOAD_MAX_MEMORY_SIZE``); the app bounds it again.
    """
    from django.http import HttpRequest, HttpResponse
    from django.views.decorators.csrf import csrf_exempt

    def view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        body = request.body
        environ = dict(request.META)
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        # The full path, so the app finds its own prefix whatever Django's routing did.
        environ["SCRIPT_NAME"] = ""
        environ["PATH_INFO"] = request.path
        started: list[Any] = []

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Callable[[bytes], None]:
            started[:] = [status, headers]
            return lambda data: None

        content = b"".join(app(environ, start_response))
        status, headers = started
        response = HttpResponse(content, status=int(status.split(" ", 1)[0]))
        for name, value in headers:  # one of each, Set-Cookie included
            response[name] = value
        return response

    exempt: Callable[..., Any] = csrf_exempt(view)
    return exempt
