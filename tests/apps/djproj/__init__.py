"""A Django project with django-celery-beat, as projects have it: the admin, the rows, a task.

Its database is ``CB_TEST_DJANGO_DB`` (``sqlite:///path`` or a ``postgresql://`` URL)."""

from tests.apps.djproj.celery import app

__all__ = ["app"]
