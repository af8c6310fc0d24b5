"""The project's Celery app, configured from the Django settings (``CELERY_*``)."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.apps.djproj.settings")

if os.environ.get("CB_TEST_SENTRY_DSN"):  # Sentry's cron monitoring on (test_sentry_beat.py)
    import sentry_sdk
    from sentry_sdk.integrations.celery import CeleryIntegration

    sentry_sdk.init(
        dsn=os.environ["CB_TEST_SENTRY_DSN"],
        default_integrations=False,
        integrations=[CeleryIntegration(monitor_beat_tasks=True)],
        environment="twin",
    )

app = Celery("djproj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
