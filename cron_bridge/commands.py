"""What a drop-in command of an adapter distribution is built from: the pieces of the
``cron-bridge`` command line, for the click commands adapters register under the entry point
groups ``cron_bridge.commands`` (``rq-cron``, ``periodiq``: the library's own declarations run
as a beat) and ``cron_bridge.importers`` (``import rq-scheduler``).

Apart from ``cron_bridge.adapters`` because it loads click and the command line (and through
``run_beat`` the web surface): a worker that imports an adapter never loads this. A command
that runs a beat takes every option of ``cron-bridge beat`` with ``beat_options`` and calls
``run_beat``; every command wraps its body in ``one_line_errors``. A worker that carries a beat
(``celery worker --beat --scheduler cron_bridge``, RQ's ``BeatWorker``, Dramatiq's
``BeatMiddleware``) reads and checks its options with ``HostedOptions`` and serves its HTTP and
metrics with ``HostedEndpoints``: loaded in the worker only when it carries a beat.
"""

from cron_bridge.cli.beat import beat_options, run_beat
from cron_bridge.cli.common import (
    load_app,
    one_line_errors,
    open_store,
    optional_app_option,
    print_table,
    store_option,
)
from cron_bridge.cli.hosted import HostedBeat, HostedEndpoints, HostedOptions

__all__ = [
    "HostedBeat",
    "HostedEndpoints",
    "HostedOptions",
    "beat_options",
    "load_app",
    "one_line_errors",
    "open_store",
    "optional_app_option",
    "print_table",
    "run_beat",
    "store_option",
]
