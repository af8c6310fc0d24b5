"""The path the ``celery.beat_schedulers`` entry points name (``-S cron_bridge``), and that
celery configs may name themselves (``-S cron_bridge.schedulers:ClusterScheduler``): wire, kept
as it is. The classes live in ``cron_bridge.queues.celery_beat``."""

from cron_bridge.queues.celery_beat import ClusterScheduler, DjangoClusterScheduler

__all__ = ["ClusterScheduler", "DjangoClusterScheduler"]
