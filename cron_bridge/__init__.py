"""cron-bridge: a cluster-safe beat for Celery, RQ and Dramatiq.

Run any number of beat replicas, all active: each occurrence of each job is claimed once in
a shared store and handed to the queue the job belongs to.
"""

from cron_bridge.beat.replica import Beat, RunResult
from cron_bridge.context import AbortSignal, JobContext
from cron_bridge.control.schedules import StoredSchedules
from cron_bridge.errors import (
    Aborted,
    ConfigError,
    CronBridgeError,
    InvalidMessage,
    RefusedTask,
    StoreUnavailable,
)
from cron_bridge.jobs import Backoff, Job, Occurrence, declare
from cron_bridge.monitors import Monitor, Ping, Sentry
from cron_bridge.options import JobOptions
from cron_bridge.registry import Registry, cluster_task, default_registry
from cron_bridge.schedules import Cron, Every, Schedule
from cron_bridge.storable import storable
from cron_bridge.stores import Store, store_from_url

__all__ = [
    "AbortSignal",
    "Aborted",
    "Backoff",
    "Beat",
    "ConfigError",
    "Cron",
    "CronBridgeError",
    "Every",
    "InvalidMessage",
    "Job",
    "JobContext",
    "JobOptions",
    "Monitor",
    "Occurrence",
    "Ping",
    "RefusedTask",
    "Registry",
    "RunResult",
    "Schedule",
    "Sentry",
    "Store",
    "StoreUnavailable",
    "StoredSchedules",
    "cluster_task",
    "declare",
    "default_registry",
    "storable",
    "store_from_url",
]

__version__ = "0.1.0"
