"""The Celery adapter of cron-bridge."""

from cron_bridge_celery.adapter import CeleryAdapter

__all__ = ["CeleryAdapter"]
