"""Benchmarks: cron-bridge against celery beat and RedBeat on the same machine (make bench)."""
