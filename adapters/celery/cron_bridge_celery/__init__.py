"""The Celery adapter of cron-bridge, and ``celery beat -S cron_bridge``.

Both classes are imported on first use: a worker imports this package for the adapter alone,
never celery beat, and every ``celery`` command imports it for the check of a worker's
embedded beat (``cron_bridge_celery.worker_check``, through the ``celery.commands`` entry
point), which must not cost them the core.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cron_bridge_celery.adapter import CeleryAdapter
    from cron_bridge_celery.scheduler import ClusterScheduler

__all__ = ["CeleryAdapter", "ClusterScheduler"]


def __getattr__(name: str) -> Any:
    if name == "CeleryAdapter":
        from cron_bridge_celery.adapter import CeleryAdapter

        return CeleryAdapter
    if name == "ClusterScheduler":
        from cron_bridge_celery.scheduler import ClusterScheduler

        return ClusterScheduler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
