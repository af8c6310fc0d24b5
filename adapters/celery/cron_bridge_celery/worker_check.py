"""``celery worker --beat``: what the worker's embedded beat would run, checked before it starts.

On ``celery worker``, ``-S`` is ``--statedb``, not ``--scheduler``: ``celery worker --beat -S
cron_bridge``, written the way ``celery beat -S cron_bridge`` reads, runs Celery's own
``PersistentScheduler`` in every worker (each entry sent once per worker, with no warning) and
keeps the worker's state in ``cron_bridge.db``. Such a worker is refused with one line and exit
2, naming the fix, before it starts anything:

- its state file is named after a cron-bridge scheduler (``-S cron_bridge``): nobody means that;
- its embedded beat (``-B``) runs another scheduler while cron-bridge is configured for the app
  (``cron_bridge_store`` or ``CRON_BRIDGE_STORE``, or a ``@cluster_task`` of this app): every
  worker started that way sends every ``beat_schedule`` entry.

A worker whose embedded beat is cron-bridge's has its beat's options checked here too (the
store URL, the HTTP and metrics addresses, the secret: ``cron_bridge.commands.HostedOptions``),
so a bad value stops the worker where it is seen, instead of a beat process that dies inside a
worker that lives on; and the beat is told it is embedded, so a store that does not answer is
retried rather than fatal.

Celery loads this module into every ``celery`` command through its ``celery.commands`` entry
point (``cron_bridge_celery.celery_command``, the hidden ``celery cron-bridge-check``), so the
check runs in a worker whether or not its app imports cron-bridge; the adapter imports it too.
What a beat needs (``cron_bridge.commands``) is imported only in a worker that carries one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any, NoReturn

from celery.signals import celeryd_init

__all__ = ["embedded", "problem"]

SCHEDULERS = ("cron_bridge", "cron_bridge_django")
FIX = "write: celery worker --beat --scheduler cron_bridge"

_embedded = False


def embedded() -> bool:
    """Whether this process is (or forked from) a worker started with cron-bridge's beat."""
    return _embedded


def problem(options: Mapping[str, Any], conf: Any, environ: Mapping[str, str]) -> str | None:
    """Why a worker started with these options (what ``celery worker`` passes ``app.Worker``)
    must not start, or None."""
    statedb = options.get("statedb")
    if isinstance(statedb, str) and _stem(statedb) in SCHEDULERS:
        return (
            f"-S {statedb} is --statedb on celery worker, not the scheduler: this worker "
            f"would {'run celery beat' if options.get('beat') else 'run no beat'} and keep "
            f"its state in a file named {statedb}; {FIX}"
        )
    if not options.get("beat"):
        return None
    scheduler = options.get("scheduler") or conf.get("beat_scheduler")
    if _ours(scheduler):
        return None
    if not _configured(conf, environ):
        return None
    name = _name(scheduler)
    fix = FIX + ("_django" if "django" in name.lower() else "")
    return (
        f"this worker's embedded beat (-B) runs {name}, not cron-bridge's, while cron-bridge "
        "is set up for this app: its entries would be sent outside the store's claims (by "
        f"every worker started with -B, for celery beat's own scheduler); {fix} (every "
        "worker may carry it), or drop -B"
    )


def _stem(path: str) -> str:
    name = PurePath(path).name
    for suffix in (".db", ".dat", ".dir", ".bak", ".pag"):
        name = name.removesuffix(suffix)
    return name


def _ours(scheduler: Any) -> bool:
    """Whether Celery would build one of cron-bridge's schedulers from ``scheduler`` (an alias,
    a ``module:Class`` path or a class), resolved as Celery resolves it."""
    if scheduler is None:
        return False
    if isinstance(scheduler, str) and scheduler in SCHEDULERS:
        return True
    from celery.utils.imports import load_extension_class_names, symbol_by_name

    try:
        aliases = dict(load_extension_class_names("celery.beat_schedulers"))
        found = symbol_by_name(scheduler, aliases=aliases)
    except Exception:  # noqa: BLE001 - Celery says it, with its traceback, when it builds it
        return False
    # ClusterScheduler and its subclasses, and the core's classes that forward to them.
    return getattr(found, "cron_bridge_scheduler", False) is True


def _configured(conf: Any, environ: Mapping[str, str]) -> bool:
    if conf.get("cron_bridge_store") or environ.get("CRON_BRIDGE_STORE"):
        return True
    if "cron_bridge" not in sys.modules:  # no @cluster_task can have been declared
        return False
    from cron_bridge.adapters import default_registry

    return any(job.adapter == "celery" for job in default_registry.jobs())


def _name(scheduler: Any) -> str:
    if scheduler is None:
        return "celery.beat:PersistentScheduler"
    if isinstance(scheduler, type):
        return f"{scheduler.__module__}:{scheduler.__qualname__}"
    return str(scheduler)[:200]


def _check(sender: Any = None, conf: Any = None, options: Any = None, **_: Any) -> None:
    """``celeryd_init``: sent in the worker's main process once its app's modules are
    imported, before its embedded beat, its pool or its state file exist."""
    global _embedded
    options = options if isinstance(options, Mapping) else {}
    if conf is None:
        return
    found = problem(options, conf, os.environ)
    if found is not None:
        _refuse(found)
    if options.get("beat") and _ours(options.get("scheduler") or conf.get("beat_scheduler")):
        from cron_bridge.adapters import ConfigError
        from cron_bridge.commands import HostedOptions

        try:
            hosted = HostedOptions.read(conf.get, os.environ)
        except ConfigError as exc:  # Celery's dispatch would log it and start the worker
            _refuse(str(exc))
        hosted.check()
        hosted.apply_monitor()  # before the pool forks: every task process has it
        _embedded = True


def _refuse(message: str) -> NoReturn:
    # Before the worker set up its logging: the real stderr, one line, exit 2 (SystemExit
    # passes through Celery's signal dispatch, which catches Exception).
    # One line, whatever the command line held: control characters shown as "?", cut.
    line = "".join(ch if ch.isprintable() else "?" for ch in message[:2000])
    stream = sys.__stderr__ or sys.stderr
    stream.write(f"cron-bridge: {line}\n")
    stream.flush()
    raise SystemExit(2)


celeryd_init.connect(_check, weak=False, dispatch_uid="cron_bridge_worker_check")
