"""A Django project as dramatiq-crontab users run it (tests/e2e/test_dramatiq_crontab.py):
dramatiq-crontab installed, the tasks in an app's ``tasks`` module, Django's zone Warsaw, no
Redis lock (REDIS_URL unset: its lock is a no-op, one scheduler is run)."""

SECRET_KEY = "tests-only"
INSTALLED_APPS = ["dramatiq_crontab", "tests.apps.crontabproj.reports"]
USE_TZ = True
TIME_ZONE = "Europe/Warsaw"
DATABASES: dict[str, dict[str, str]] = {}
DRAMATIQ_CRONTAB: dict[str, object] = {}
