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
``CRON_BRIDGE_METRICS``, ``CRON_BRIDGE_SHUTDOWN_TIMEOUT``); a bad one is one line, and the
beat's process stops the tree (SIGTERM to ``dramatiq``'s main process), as a worker that fails
to boot does: never a tree of workers without its beat. On SIGTERM (``dramatiq``
sends it to every process of the tree) the beat stops claiming and drains, within its
``shutdown_timeout``.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import logging
import os
import signal
import sys
import tempfile
import threading
from typing import Any

from dramatiq import Middleware

from cron_bridge.adapters import override
from cron_bridge.commands import HostedBeat

__all__ = ["BeatMiddleware", "run_beat"]

log = logging.getLogger(__name__)


def run_beat() -> int:
    """The beat's process: import the app, run a beat replica until SIGTERM, drain, 0.

    One per tree even when both ``BeatMiddleware`` and ``--fork-function`` name it (a lock
    held by the first, keyed by the tree's main process: the second stands aside). A beat
    that cannot start (a bad setting, its app failing to import) stops the whole tree:
    ``dramatiq`` watches its workers, not its fork processes, and a tree whose beat died
    would go on with none."""
    tree = os.getppid()
    lock = _one_per_tree(tree)
    if lock is None:
        log.warning(
            "dramatiq process tree %d already carries a beat (BeatMiddleware and "
            "--fork-function both name it): this one stands aside",
            tree,
        )
        return 0
    hosted = HostedBeat(f"dramatiq process tree {tree}")
    try:
        if not os.environ.get("CRON_BRIDGE_APP"):
            _import_the_workers_modules()
        hosted.prepare()
        hosted.start()
    except BaseException as exc:
        if not isinstance(exc, SystemExit) or exc.code:
            log.error("the beat of dramatiq process tree %d cannot start: stopping the tree", tree)
            _stop_the_tree(tree)
        raise
    stopped = threading.Event()
    try:
        while not stopped.wait(3600):
            pass
    finally:  # dramatiq's SIGTERM handler raises SystemExit here
        hosted.stop()
        with contextlib.suppress(OSError):
            os.unlink(lock.name)
        lock.close()
    return 0


def _one_per_tree(tree: int) -> Any:
    """An open file this process holds the lock of, or None when another process of the
    tree ``tree`` holds it."""
    path = os.path.join(tempfile.gettempdir(), f"cron-bridge-dramatiq-beat-{tree}.lock")
    handle = open(path, "a")  # noqa: SIM115 - held for the beat's life, closed by run_beat
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    return handle


def _stop_the_tree(tree: int) -> None:
    """SIGTERM to the ``dramatiq`` main process, which stops every process of its tree."""
    if tree > 1:
        with contextlib.suppress(OSError):
            os.kill(tree, signal.SIGTERM)


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
