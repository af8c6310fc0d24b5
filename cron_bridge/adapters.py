"""The interface the core declares for adapter distributions: everything ``cron-bridge-celery``,
``-rq`` and ``-dramatiq`` (and a fourth library's adapter) import from the core, except the
command line's pieces (``cron_bridge.commands``), and nothing else (an import-linter contract
keeps them to it). What a worker loads with an adapter: it imports neither click nor the
command line nor the web surface (another contract).

An adapter subclasses ``Adapter`` (every member, the optional ones with their default; its
traits as class keywords, each override marked ``@override``) and registers the class under
the entry point group ``cron_bridge.adapters``; the core finds it there and hands it
``Dispatch`` values to send. On the worker its task wrapper calls ``run_delivery`` with what
its queue library says of the message, and its stored-schedule task ``run_stored_schedule``.
A sender of another scheduler's declarations as that scheduler sends them subclasses
``DropInSender``; one whose library waits for the broker's answer after each message sends a
large batch with ``SendThreads``.
"""

from cron_bridge.beat.replica import Beat
from cron_bridge.control.schedules import ScheduleEntry, StoredSchedules
from cron_bridge.errors import (
    ConfigError,
    InvalidMessage,
    QueueRetry,
    RefusedTask,
    StoreUnavailable,
)
from cron_bridge.jobs import NAME_PATTERN, Job, Occurrence, name_for
from cron_bridge.plumbing.redaction import redact_url
from cron_bridge.queues.adapter import Adapter, Dispatch, TaskRef, override
from cron_bridge.queues.installed import register
from cron_bridge.queues.sending import DropInSender, SendThreads
from cron_bridge.refusals import refuse
from cron_bridge.registry import default_registry
from cron_bridge.run.delivery import META_KEY, flush_worker_records, run_delivery
from cron_bridge.run.stored import run_stored as run_stored_schedule
from cron_bridge.schedules import EPOCH, Cron, Every, Schedule, load_zone, local_zone_name
from cron_bridge.storable import HANDLER_ATTR, listed
from cron_bridge.stores import Store, store_from_url
from cron_bridge.windows import NEVER, At, Window

__all__ = [
    "EPOCH",
    "HANDLER_ATTR",
    "META_KEY",
    "NAME_PATTERN",
    "NEVER",
    "Adapter",
    "At",
    "Beat",
    "ConfigError",
    "Cron",
    "Dispatch",
    "DropInSender",
    "Every",
    "InvalidMessage",
    "Job",
    "Occurrence",
    "QueueRetry",
    "RefusedTask",
    "Schedule",
    "ScheduleEntry",
    "SendThreads",
    "Store",
    "StoreUnavailable",
    "StoredSchedules",
    "TaskRef",
    "Window",
    "default_registry",
    "flush_worker_records",
    "listed",
    "load_zone",
    "local_zone_name",
    "name_for",
    "override",
    "redact_url",
    "refuse",
    "register",
    "run_delivery",
    "run_stored_schedule",
    "store_from_url",
]
