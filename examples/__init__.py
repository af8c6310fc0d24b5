"""Example apps: the same kinds of jobs on Celery, RQ and Dramatiq.

Each module shows a cron job in a time zone, an interval job, a job retried with backoff, and
a job that skips an occurrence while the previous one still runs. ``docker-compose.yml`` and
``deploy/k8s/`` run them; the test ``tests/e2e/test_compose.py`` runs the same commands as local
processes.
"""
