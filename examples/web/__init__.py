"""The trigger and the dashboard served from the web app a team already runs.

``jobs`` declares the jobs and the panel's ``Beat`` (never started: no timers in a web pod;
the beat runs in its own deployment with ``cron-bridge beat -A examples.web.jobs``). Each
module mounts it in one framework under ``/_scheduler``:

- ``fastapi_app`` and ``starlette_app``: ``uvicorn examples.web.fastapi_app:app``
- ``flask_app``: ``flask --app examples.web.flask_app run``
- ``django_app``: ``python -m django runserver --settings=examples.web.django_app``
"""
