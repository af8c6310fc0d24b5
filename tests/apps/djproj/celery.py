"""The project's Celery app, configured from the Django settings (``CELERY_*``)."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.apps.djproj.settings")

app = Celery("djproj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
