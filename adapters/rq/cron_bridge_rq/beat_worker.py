"""``rq worker -w cron_bridge_rq.BeatWorker``: an RQ worker that carries a cluster-safe beat.

Every worker of a deployment may carry one: each is a replica, all active, each occurrence
claimed once in the store. The beat runs on a thread of the worker's main process, never in a
work horse: RQ forks a horse per job from that process, and the fork copies only the thread
that forks, so no beat runs in a horse; the beat's store is its own (the horse opens the
guard's store anew, ``worker_store`` is per process), and a horse drops its copy of the beat
at once (``os.register_at_fork``), so it never uses a connection of the beat's.

A job whose queue is given by name goes to the worker's own Redis when ``RQ_REDIS_URL`` is not
set. Its options come from the environment variables ``cron-bridge beat`` reads
(``CRON_BRIDGE_STORE``, ``CRON_BRIDGE_APP`` for the modules that declare the jobs,
``CRON_BRIDGE_REPLICA_ID``, ``CRON_BRIDGE_HTTP`` and its secret, ``CRON_BRIDGE_METRICS``,
``CRON_BRIDGE_SHUTDOWN_TIMEOUT``), checked before the worker takes a job: a bad one is one
line and exit 2.

Shutdown follows RQ's: on the first SIGTERM or SIGINT (warm) the beat stops claiming at once
and drains, while the worker finishes its job; on the second (cold) the worker kills its horse
and exits, the beat with it. ``BeatSimpleWorker`` and ``BeatSpawnWorker`` carry it over RQ's
other worker classes.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from rq import SimpleWorker, SpawnWorker, Worker
from rq.logutils import setup_loghandlers

from cron_bridge.commands import HostedBeat
from cron_bridge_rq.adapter import use_worker_connection

__all__ = ["BeatSimpleWorker", "BeatSpawnWorker", "BeatWorker", "CarriesBeat"]


class CarriesBeat:
    """The part of an RQ worker class that carries the beat: put it first in the bases."""

    _hosted: HostedBeat | None = None

    def work(self, *args: Any, **kwargs: Any) -> bool:
        hosted = HostedBeat(f"rq worker {getattr(self, 'name', '')}".strip())
        hosted.prepare()  # a bad option: one line and exit 2, before the worker registers
        self._hosted = hosted
        _forget_in_children(self)
        try:
            worked: bool = super().work(*args, **kwargs)  # type: ignore[misc]
            return worked
        finally:
            hosted.stop()

    def bootstrap(self, *args: Any, **kwargs: Any) -> None:
        """RQ's start (its log handlers, the worker's birth), then the beat's, its lines
        printed as RQ prints the worker's (unless the app set up logging itself)."""
        super().bootstrap(*args, **kwargs)  # type: ignore[misc]
        log: Any = getattr(self, "log", None)
        level = log.getEffectiveLevel() if log is not None else "INFO"
        formats = dict(zip(("date_format", "log_format"), args[1:3], strict=False))
        formats.update((k, v) for k, v in kwargs.items() if k in ("date_format", "log_format"))
        setup_loghandlers(level, name="cron_bridge", **formats)
        # Queues given by name, without RQ_REDIS_URL: on this worker's Redis.
        use_worker_connection(getattr(self, "connection", None))
        if self._hosted is not None:
            self._hosted.start()

    def handle_warm_shutdown_request(self) -> None:
        super().handle_warm_shutdown_request()  # type: ignore[misc]
        hosted = self._hosted
        if hosted is not None:
            # In RQ's signal handler: the beat's drain must not hold up the worker's.
            threading.Thread(target=hosted.stop, name="cron-bridge-stop", daemon=True).start()


def _forget_in_children(worker: CarriesBeat) -> None:
    """A process forked from this one (a work horse) drops the beat it inherited: it never
    runs there (its thread is not copied) and none of its connections is used there."""
    ref = weakref.ref(worker)

    def forget() -> None:
        found = ref()
        if found is not None:
            found._hosted = None

    os.register_at_fork(after_in_child=forget)


class BeatWorker(CarriesBeat, Worker):
    """``rq worker -w cron_bridge_rq.BeatWorker``: RQ's forking worker, with the beat."""


class BeatSimpleWorker(CarriesBeat, SimpleWorker):
    """RQ's ``SimpleWorker`` (jobs in the worker's own process), with the beat."""


class BeatSpawnWorker(CarriesBeat, SpawnWorker):
    """RQ's ``SpawnWorker`` (a spawned process per job), with the beat."""
