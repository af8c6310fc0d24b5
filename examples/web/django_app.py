"""Django: a settings module that is also its URLconf, with the panel as a view."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path, re_path

from cron_bridge.http import wsgi_app
from cron_bridge.http.mounts import django_view
from examples.web.jobs import PATH, SECRET, panel

SECRET_KEY = SECRET or "set CRON_BRIDGE_SECRET"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = __name__
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
INSTALLED_APPS: list[str] = []
DATABASES: dict[str, dict[str, str]] = {}


def home(request: HttpRequest) -> HttpResponse:
    return HttpResponse("shop")


urlpatterns = [
    path("", home),
    re_path(
        rf"^{PATH.strip('/')}(?:/.*)?$", django_view(wsgi_app(panel(), secret=SECRET, path=PATH))
    ),
]
