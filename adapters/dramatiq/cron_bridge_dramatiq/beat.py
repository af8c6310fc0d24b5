"""The beat inside a ``dramatiq`` process tree: ``BeatMiddleware``, or ``--fork-function
cron_bridge_dramatiq.beat:run_beat`` on the command line.

``dramatiq`` starts several worker processes and, once per process tree, each function its
middleware's ``forks`` name (or ``--fork-function`` gives) in a process of its own: so a tree
carries exactly one beat, however many ``--processes`` it runs, beside its workers (never in
one). Every tree of a deployment may carry one: each is a replica, all active, each
occurrence claimed once in the store.

The beat's process imports what the workers import: the modules of ``CRON_BRIDGE_APP``
(space-separated) when it is set, else the broker module and the modules the ``dramatiq``
command was given. Its settings are the environment variables ``cron-bridge beat`` reads
(``CRON_BRIDGE_STORE``, ``CRON_BRIDGE_REPLICA_ID``, ``CRON_BRIDGE_HTTP`` and its secret,
``CRON_BRIDGE_METRICS``, ``CRON_BRIDGE_SHUTDOWN_TIMEOUT``); a bad one is one line and exit 2
of that process, which ``dramatiq`` answers by stopping the tree. On SIGTERM (``dramatiq``
sends it to every process of the tree) the beat stops claiming and drains, within its
``shutdown_timeout``.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
from typing import Any

from dramatiq import Middleware

from cron_bridge.adapters import override
from cron_bridge.commands import HostedBeat

__all__ = ["BeatMiddleware", "run_beat"]

log = logging.getLogger(__name__)


def run_beat() -> int:
    """The beat's process: import the app, run a beat replica until SIGTERM, drain, 0."""
    if not os.environ.get("CRON_BRIDGE_APP"):
        _import_the_workers_modules()
    hosted = HostedBeat(f"dramatiq process tree {os.getppid()}")
    hosted.prepare()
    hosted.start()
    stopped = threading.Event()
    try:
        while not stopped.wait(3600):
            pass
    finally:  # dramatiq's SIGTERM handler raises SystemExit here
        hosted.stop()
    return 0


def _import_the_workers_modules() -> None:
    """The broker module and the modules of the ``dramatiq`` command line this process was
    forked from (or spawned by), as its workers import them: actors and ``@cluster_task``
    jobs are declared there."""
    from dramatiq.cli import make_argument_parser

    try:
        args = make_argument_parser().parse_args(sys.argv[1:])  # type: ignore[no-untyped-call]
    except SystemExit:  # not a dramatiq command line: CRON_BRIDGE_APP names the modules
        log.warning("not started by dramatiq: set CRON_BRIDGE_APP to the modules to import")
        return
    for path in reversed(args.path or []):
        if path not in sys.path:
            sys.path.insert(0, path)
    for module in [args.broker.partition(":")[0], *args.modules]:
        importlib.import_module(module)


class BeatMiddleware(Middleware):
    """``broker.add_middleware(BeatMiddleware())``: one beat per ``dramatiq`` process tree."""

    @property
    @override
    def forks(self) -> list[Any]:
        return [run_beat]
