"""The web surface: the HTTP trigger, the JSON API and the dashboard, under one secret.

``apps`` (ASGI and WSGI), ``handler`` (routing, authentication, health), ``wire`` (requests
and responses), ``sessions`` and ``throttle`` (login and guessing), ``api_control`` and
``api_schedules`` (the JSON API), ``dashboard``, ``overview``, ``job_page``, ``views``,
``strips`` and ``occurrences`` (the pages), ``layout`` and ``html`` (their frame, of escaped
values), ``serve``
(uvicorn in the beat), ``mounts`` (inside a web app you already run).
"""

from cron_bridge.http.apps import asgi_app, wsgi_app

__all__ = ["asgi_app", "wsgi_app"]
