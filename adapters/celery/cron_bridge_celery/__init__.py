"""The Celery adapter of cron-bridge, and ``celery beat -S cron_bridge``."""

from cron_bridge_celery.adapter import CeleryAdapter
from cron_bridge_celery.scheduler import ClusterScheduler

__all__ = ["CeleryAdapter", "ClusterScheduler"]
