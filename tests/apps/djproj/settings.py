"""Settings of the test Django project (the database, broker and queue from the environment)."""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit


def _database(url: str) -> dict[str, object]:
    if url.startswith("sqlite:///"):
        # Several processes write the file (the admin, the beats' claims): as Django advises
        # for concurrent writers, take the write lock at BEGIN and wait for it.
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": url.removeprefix("sqlite:///"),
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
        }
    parts = urlsplit(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parts.path.lstrip("/"),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


SECRET_KEY = "test-only, not a secret"  # a throwaway test project
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True
TIME_ZONE = "Europe/Warsaw"
DATABASES = {"default": _database(os.environ.get("CB_TEST_DJANGO_DB", "sqlite:///db.sqlite3"))}
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_beat",
    "tests.apps.djproj",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
ROOT_URLCONF = "tests.apps.djproj.urls"
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

CELERY_BROKER_URL = os.environ.get("CB_TEST_BROKER", "redis://127.0.0.1:6379/0")
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CB_TEST_QUEUE", "celery")
CELERY_TIMEZONE = TIME_ZONE
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_RESULT_EXPIRES = None  # no celery.backend_cleanup row: no result backend here
# Kept in code as well as in the table: the beat writes it into the table at start.
CELERY_BEAT_SCHEDULE = {
    "from settings": {"task": "djproj.tick", "schedule": 3.0, "args": ["settings"]},
}
