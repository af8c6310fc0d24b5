"""A beat inside another program's process (a Celery, RQ or Dramatiq worker): its options, read
one way for every queue, checked before the host starts, and its HTTP and metrics endpoints.

Each option of ``cron-bridge beat`` is read from the host's setting ``cron_bridge_<option>``
(Celery's ``app.conf``; ``CELERY_CRON_BRIDGE_<OPTION>`` in Django settings) when the host has
settings, and else from the environment variable ``cron-bridge beat`` reads,
``CRON_BRIDGE_<OPTION>``: ``store``, ``replica_id``, ``http``, ``secret``, ``secret_file``,
``forwarded_allow_ips``, ``metrics``, ``shutdown_timeout``, ``monitor``, ``take_over``.

``check`` runs in the host before it starts (before any fork), so a bad value is one line and
exit 2 where the operator sees it, not a beat that dies inside a worker that lives on. A store
that does not answer at that moment is not an error: the hosted beat asks it again at every
tick and claims nothing until it answers (its health says so), as a standalone beat does after
its start.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Any

from cron_bridge.beat.enqueue import TAKE_OVER
from cron_bridge.beat.replica import Beat
from cron_bridge.cli.beat import host_port, read_secret, serve_beat_http
from cron_bridge.cli.common import fail, load_app
from cron_bridge.errors import ConfigError, StoreUnavailable
from cron_bridge.jobs import Job
from cron_bridge.monitors import resolve as resolve_monitor
from cron_bridge.monitors import set_default as set_default_monitor
from cron_bridge.plumbing.identity import check_replica_id
from cron_bridge.plumbing.secret import check_secret
from cron_bridge.registry import default_registry
from cron_bridge.schedules import parse_duration
from cron_bridge.stores import Store, store_from_url
from cron_bridge.stores.urls import DEFAULT_STORE
from cron_bridge.telemetry import serve_metrics, watch_replica

__all__ = ["HostedBeat", "HostedEndpoints", "HostedOptions"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HostedOptions:
    """The options of a beat hosted by a worker, as ``cron-bridge beat`` names them."""

    store: str | None = None
    replica_id: str | None = None
    http: str | None = None
    secret: str | None = None
    secret_file: str | None = None
    forwarded_allow_ips: str = "127.0.0.1"
    metrics: str | None = None
    shutdown_timeout: str = "25s"
    monitor: str | None = None
    take_over: str = "refused"
    # Whether the host has settings (Celery's app.conf): then errors name both places.
    has_settings: bool = field(default=False, compare=False, repr=False)

    @classmethod
    def read(
        cls,
        setting: Callable[[str], Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> HostedOptions:
        """Each option from ``setting("cron_bridge_<name>")``, else ``CRON_BRIDGE_<NAME>``.

        Raises:
            ConfigError: a setting that is not text, or a ``take_over`` that is not one of
                ``TAKE_OVER``, naming it.
        """
        environ = os.environ if environ is None else environ
        found: dict[str, str] = {}
        for option in fields(cls):
            if option.name == "has_settings":
                continue
            name = f"cron_bridge_{option.name}"
            value = setting(name) if setting is not None else None
            if value in (None, ""):
                value = environ.get(name.upper()) or None
            if value is None:
                continue
            if option.name == "shutdown_timeout" and isinstance(value, int | float | timedelta):
                value = f"{parse_duration(value, option=name).total_seconds()}s"
            if not isinstance(value, str):
                shown = "***" if option.name == "secret" else value
                raise ConfigError("expected text", option=name, value=shown)
            found[option.name] = value
        read = cls(**found, has_settings=setting is not None)
        read.check_take_over()
        return read

    def check_take_over(self) -> None:
        """Raise ``ConfigError`` for a ``take_over`` that is not one of ``TAKE_OVER``."""
        if self.take_over not in TAKE_OVER:
            raise ConfigError(
                f"expected one of {', '.join(TAKE_OVER)}",
                option=self.label("take_over"),
                value=self.take_over,
            )

    def label(self, option: str) -> str:
        """How an error names ``option``: the setting and the variable, or the variable."""
        variable = f"CRON_BRIDGE_{option.upper()}"
        return f"cron_bridge_{option} ({variable})" if self.has_settings else variable

    def check(self) -> None:
        """Exit 2 with one line on a value the hosted beat could not start with: a shutdown
        timeout that is not a duration, a replica id that is not a name, a store URL that is
        malformed or names a driver not installed, an HTTP or metrics address that is not
        HOST:PORT, HTTP without a secret, a monitor that is not known. A store that does
        not answer now is left to the beat, which asks it again at every tick."""
        try:
            parse_duration(self.shutdown_timeout, option=self.label("shutdown_timeout"))
            if self.replica_id is not None:
                check_replica_id(self.replica_id)
            if self.store is not None:
                try:
                    store_from_url(self.store).close()
                except StoreUnavailable as exc:
                    log.warning("the store does not answer yet (%s); the beat asks again", exc)
            if self.http is not None:
                host_port(self.label("http"), self.http)
                check_secret(read_secret(self.secret, self.secret_file))
            if self.metrics is not None:
                host_port(self.label("metrics"), self.metrics)
            resolve_monitor(self.monitor, job="*")
            self.check_take_over()
        except (ConfigError, ImportError) as exc:
            fail(str(exc))

    def apply_monitor(self) -> None:
        """Make ``monitor`` (when set) the monitor of every job without one, in this process
        and the processes it forks: a worker's task runs, the beat's inline runs."""
        if self.monitor is not None:
            set_default_monitor(self.monitor)


class HostedEndpoints:
    """The hosted beat's HTTP (trigger, dashboard, ``/healthz``) and metrics, when its options
    ask for them; ``shutdown()`` stops both."""

    def __init__(self, replica: Beat, store: Store, options: HostedOptions) -> None:
        self._servers: list[Any] = []
        # An endpoint that cannot be served (its port taken: two workers on one host with one
        # CRON_BRIDGE_HTTP) is an ERROR, and the beat runs on without it: a host's beat that
        # claims nothing because of its probe would be the worse failure.
        if options.metrics is not None:
            host, port = host_port(options.label("metrics"), options.metrics)
            try:
                self._servers.append(serve_metrics(host, port))
            except (ConfigError, OSError) as exc:
                log.error("metrics not served on %s, the beat runs on: %s", options.metrics, exc)
            else:
                watch_replica(replica.health, lambda: len(store.replicas()))
        if options.http is not None:
            secret = read_secret(options.secret, options.secret_file)
            check_secret(secret)
            try:
                server = serve_beat_http(replica, options.http, secret, options.forwarded_allow_ips)
            except (ConfigError, OSError) as exc:
                log.error("HTTP not served on %s, the beat runs on: %s", options.http, exc)
            else:
                self._servers.append(server)

    def shutdown(self) -> None:
        for server in self._servers:
            server.shutdown()
        self._servers.clear()


class HostedBeat:
    """A beat replica on a thread of a worker's main process (RQ's ``BeatWorker``,
    Dramatiq's ``BeatMiddleware``), with its endpoints; its options and its jobs' modules
    (``CRON_BRIDGE_APP``, space-separated, as ``cron-bridge beat`` reads it; without it, the
    jobs the host's own imports declared) from the environment.

    ``prepare()`` (in the host, before it forks anything) imports the modules and checks the
    options, exiting 2 with one line on a bad one; ``start()`` opens the store without asking
    it (one that does not answer yet is asked at every tick, see ``HostedOptions``) and starts
    the beat's thread; ``stop()`` drains it, within its ``shutdown_timeout``.
    """

    def __init__(self, host: str, environ: Mapping[str, str] | None = None) -> None:
        self.host = host
        self._environ = os.environ if environ is None else environ
        self.options = HostedOptions()
        self.jobs: list[Job] = []
        self.replica: Beat | None = None
        self._store: Store | None = None
        self._endpoints: HostedEndpoints | None = None
        self._stopping = threading.Lock()  # a signal's stop and the host's own may meet

    def prepare(self) -> None:
        try:
            self.options = HostedOptions.read(None, self._environ)
        except ConfigError as exc:
            fail(str(exc))
        self.options.check()
        self.options.apply_monitor()
        modules = tuple(self._environ.get("CRON_BRIDGE_APP", "").split())
        # Without CRON_BRIDGE_APP, what the host imported itself (a dramatiq command line's
        # modules): the jobs declared so far.
        self.jobs = load_app(modules) if modules else default_registry.jobs()
        if not self.jobs:
            log.warning(
                "%s carries a beat with no job declared%s: set CRON_BRIDGE_APP to the modules "
                "that declare them (stored schedules still run)",
                self.host,
                f" in {' '.join(modules)}" if modules else "",
            )

    def start(self) -> None:
        url = self.options.store or DEFAULT_STORE
        try:
            self._store = store_from_url(url)
            self.replica = Beat(
                self._store,
                self.jobs,
                replica_id=self.options.replica_id,
                shutdown_timeout=self.options.shutdown_timeout,
                take_over=self.options.take_over,
            )
            self.replica.start()
            self._endpoints = HostedEndpoints(self.replica, self._store, self.options)
        except (ConfigError, ImportError) as exc:
            fail(str(exc))
        log.info("%s carries beat %s", self.host, self.replica.replica_id)

    def stop(self) -> None:
        with self._stopping:
            if self._endpoints is not None:
                self._endpoints.shutdown()
                self._endpoints = None
            if self.replica is not None:
                self.replica.stop()
            if self._store is not None:
                self._store.close()
                self._store = None
