"""The interface the core declares for adapter distributions: everything ``cron-bridge-celery``,
``-rq`` and ``-dramatiq`` (and a fourth library's adapter) import from the core, and nothing
else (an import-linter contract keeps them to it).

An adapter registers an ``Adapter`` under the entry point group ``cron_bridge.adapters``
(``ENTRY_POINT_GROUP``); the core finds it there (``cron_bridge.plugins``) and hands it
``Dispatch`` values to send. On the worker its task wrapper calls ``run_delivery`` with what
its queue library says of the message, and its stored-schedule task ``run_stored_schedule``.
A command that runs the library's own schedule declarations as a beat (``rq-cron``) registers
a click command under ``cron_bridge.commands`` with ``beat_options``, and calls ``run_beat``;
one that moves another scheduler's stored jobs into stored schedules (``import rq-scheduler``)
registers one under ``cron_bridge.importers``, and writes them with ``Schedules``.
"""

from cron_bridge.beat.replica import Beat
from cron_bridge.cli.beat import beat_options, run_beat
from cron_bridge.cli.common import (
    load_app,
    one_line_errors,
    open_store,
    optional_app_option,
    print_table,
    store_option,
)
from cron_bridge.control.schedules import Schedules, StoredSchedule
from cron_bridge.errors import (
    ConfigError,
    InvalidMessage,
    QueueRetry,
    RefusedTask,
    StoreUnavailable,
)
from cron_bridge.jobs import NAME_PATTERN, Job, Occurrence, name_for
from cron_bridge.plugins import (
    ENTRY_POINT_GROUP,
    Adapter,
    Dispatch,
    Sender,
    Senders,
    TaskRef,
    get_adapter,
    register,
)
from cron_bridge.redaction import redact_url
from cron_bridge.refusals import Refusal, refuse
from cron_bridge.registry import default_registry
from cron_bridge.run.delivery import (
    META_KEY,
    Delivery,
    flush_worker_records,
    run_delivery,
    worker_store,
)
from cron_bridge.run.stored import run_stored as run_stored_schedule
from cron_bridge.schedules import EPOCH, Cron, Every, Schedule, load_zone, local_zone_name
from cron_bridge.storable import HANDLER_ATTR, listed
from cron_bridge.stores import Store, store_from_url
from cron_bridge.untrusted import loads as loads_untrusted
from cron_bridge.windows import NEVER, At, Window

__all__ = [
    "ENTRY_POINT_GROUP",
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
    "Delivery",
    "Dispatch",
    "Every",
    "InvalidMessage",
    "Job",
    "Occurrence",
    "QueueRetry",
    "Refusal",
    "RefusedTask",
    "Schedule",
    "Schedules",
    "Sender",
    "Senders",
    "Store",
    "StoreUnavailable",
    "StoredSchedule",
    "TaskRef",
    "Window",
    "beat_options",
    "default_registry",
    "flush_worker_records",
    "get_adapter",
    "listed",
    "load_app",
    "load_zone",
    "loads_untrusted",
    "local_zone_name",
    "name_for",
    "one_line_errors",
    "open_store",
    "optional_app_option",
    "print_table",
    "redact_url",
    "refuse",
    "register",
    "run_beat",
    "run_delivery",
    "run_stored_schedule",
    "store_from_url",
    "store_option",
    "worker_store",
]
