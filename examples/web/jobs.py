"""The jobs, shared by the beat deployment and the web app's panel."""

from __future__ import annotations

import logging
import os

from cron_bridge import Beat, JobContext, cluster_task

STORE = os.environ.get("CRON_BRIDGE_STORE", "sqlite:///cron-bridge.db")
SECRET = os.environ.get("CRON_BRIDGE_SECRET", "")  # the panel refuses to start without one
PATH = "/_scheduler"

log = logging.getLogger(__name__)


@cluster_task(cron="0 * * * *", target="inline", name="cache.rebuild")
def rebuild_cache(ctx: JobContext) -> None:
    """Hourly in the beat deployment; on demand from the panel ("run now", the trigger)."""
    log.info("rebuilding the cache for %s", ctx.occurrence_id)


def panel() -> Beat:
    """The web app's beat: knows the jobs, reads the store, never started (no timers)."""
    return Beat(STORE)
