"""The Celery adapter of cron-bridge, and ``celery beat -S cron_bridge``.

``ClusterScheduler`` (what the entry point ``cron_bridge_celery:ClusterScheduler`` names) is
imported on first use: a worker imports this package for the adapter alone, never celery beat.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cron_bridge_celery.adapter import CeleryAdapter

if TYPE_CHECKING:
    from cron_bridge_celery.scheduler import ClusterScheduler

__all__ = ["CeleryAdapter", "ClusterScheduler"]


def __getattr__(name: str) -> Any:
    if name == "ClusterScheduler":
        from cron_bridge_celery.scheduler import ClusterScheduler

        return ClusterScheduler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
