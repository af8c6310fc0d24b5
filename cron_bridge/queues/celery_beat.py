"""What ``celery beat -S cron_bridge`` and ``-S cron_bridge_django`` resolve to.

Celery looks the name up in its entry point group ``celery.beat_schedulers`` and, when no
distribution registers it, imports a module of that name: without the Celery adapter, the
core package itself, and a 50-line traceback ("'module' object is not callable"). So the core
registers both names (under the path ``cron_bridge.schedulers``, which re-exports these), and
each resolves to the Celery adapter's scheduler, which the adapter registers under
``cron_bridge.celery_schedulers``; without it, one line says what to install, with exit 2.
"""

from __future__ import annotations

import sys
from importlib.metadata import entry_points
from typing import Any

__all__ = ["GROUP", "ClusterScheduler", "DjangoClusterScheduler"]

GROUP = "cron_bridge.celery_schedulers"


class _Forward:
    """Builds the adapter's scheduler of ``name``: what Celery gets when it calls this class."""

    name = ""
    cron_bridge_scheduler = True  # the Celery adapter's worker check knows them by this

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        for point in entry_points(group=GROUP):
            if point.name == cls.name:
                return point.load()(*args, **kwargs)
        sys.stderr.write(
            f"cron-bridge: celery beat -S {cls.name} needs the Celery adapter, "
            "which is not installed: pip install cron-bridge-celery\n"
        )
        raise SystemExit(2)


class ClusterScheduler(_Forward):
    """``celery beat -S cron_bridge``: the Celery adapter's ``ClusterScheduler``."""

    name = "cron_bridge"


class DjangoClusterScheduler(_Forward):
    """``celery beat -S cron_bridge_django``: the Celery adapter's scheduler of
    django-celery-beat's rows."""

    name = "cron_bridge_django"
