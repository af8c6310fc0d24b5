"""``cron-bridge beat``: a beat replica, with the HTTP trigger, dashboard and metrics when
asked for."""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

import click

from cron_bridge.beat.enqueue import TAKE_OVER
from cron_bridge.beat.replica import Beat
from cron_bridge.cli.common import (
    app_option,
    fail,
    load_app,
    one_line_errors,
    open_store,
    store_option,
)
from cron_bridge.errors import ConfigError
from cron_bridge.http.apps import asgi_app
from cron_bridge.http.serve import HttpServer, serve
from cron_bridge.jobs import Job
from cron_bridge.monitors import set_default as set_default_monitor
from cron_bridge.plumbing.secret import check_secret
from cron_bridge.queues.installed import installed_adapters
from cron_bridge.stores import Store
from cron_bridge.telemetry import serve_metrics, watch_replica

__all__ = [
    "beat",
    "beat_options",
    "host_port",
    "read_secret",
    "run_beat",
    "serve_beat_http",
    "serve_beat_metrics",
]

log = logging.getLogger(__name__)


_OPTIONS = [
    store_option,
    click.option(
        "--http",
        "http_bind",
        envvar="CRON_BRIDGE_HTTP",
        metavar="HOST:PORT",
        help="Serve the HTTP trigger here (default: $CRON_BRIDGE_HTTP).",
    ),
    click.option(
        "--secret",
        envvar="CRON_BRIDGE_SECRET",
        help="Bearer token for --http (prefer $CRON_BRIDGE_SECRET or --secret-file: an option "
        "shows in ps).",
    ),
    click.option(
        "--secret-file",
        envvar="CRON_BRIDGE_SECRET_FILE",
        type=click.Path(dir_okay=False),
        help="Read the bearer token for --http from this file (default: $CRON_BRIDGE_SECRET_FILE).",
    ),
    click.option(
        "--forwarded-allow-ips",
        envvar="CRON_BRIDGE_FORWARDED_ALLOW_IPS",
        default="127.0.0.1",
        show_default=True,
        help="Proxies whose X-Forwarded-Proto/-For are believed (comma-separated, or *).",
    ),
    click.option(
        "--metrics",
        "metrics_bind",
        envvar="CRON_BRIDGE_METRICS",
        metavar="HOST:PORT",
        help="Serve Prometheus metrics (needs prometheus-client) on http://HOST:PORT/metrics "
        "(default: $CRON_BRIDGE_METRICS).",
    ),
    click.option(
        "--monitor",
        envvar="CRON_BRIDGE_MONITOR",
        # Checked by set_default, not a click.Choice: click's error would echo the value
        # whole, and a DSN put there by mistake holds its key.
        metavar="sentry",
        default=None,
        help="Check in every job without a monitor= of its own (its inline runs here; set "
        "CRON_BRIDGE_MONITOR on the workers for queue jobs).",
    ),
    click.option(
        "--replica-id",
        envvar="CRON_BRIDGE_REPLICA_ID",
        default=None,
        help="This replica's name (default: $CRON_BRIDGE_REPLICA_ID, else host-pid-random).",
    ),
    click.option(
        "--shutdown-timeout",
        envvar="CRON_BRIDGE_SHUTDOWN_TIMEOUT",
        default="25s",
        show_default=True,
        help="How long a stop waits for runs in flight before aborting them (reason shutdown).",
    ),
    click.option(
        "--take-over",
        envvar="CRON_BRIDGE_TAKE_OVER",
        # Checked by the beat, not a click.Choice: one line naming the option, as for every
        # other bad value, not click's usage text with the value echoed whole.
        metavar="|".join(TAKE_OVER),
        default="refused",
        show_default=True,
        help="What a replica sends in place of one that claimed it and died before sending: "
        "the jobs whose second copy the worker refuses, or all (a drop-in's plain tasks too; "
        "a copy the dead replica did send then runs twice).",
    ),
    click.option(
        "--namespace",
        "namespaces",
        metavar="NAME=STORE_URL",
        multiple=True,
        help="Also show this namespace (another store, prefix or schema) on the --http "
        "dashboard, read-only; repeat for more.",
    ),
]

F = TypeVar("F", bound=Callable[..., Any])


def beat_options(func: F) -> F:
    """Every option of ``cron-bridge beat`` but ``-A``: for the commands that run other
    declarations as a beat (``rq-cron``, ``periodiq``), which pass them on to ``run_beat``."""
    for option in reversed(_OPTIONS):
        func = option(func)
    return func


@click.command()
@app_option
@beat_options
def beat(app: tuple[str, ...], **options: Any) -> None:
    """Run a beat replica until SIGTERM or SIGINT, then drain and exit."""

    def jobs() -> list[Job]:
        found = load_app(app)
        _say_what_else(app, declared=bool(found))
        return found

    run_beat(jobs, options)


Arm = Callable[[Store, list[Job]], tuple[list[Job], Mapping[str, datetime]]]
"""Given the opened store and the loaded jobs: the jobs to run, and the times to arm some of
them from instead of the start (their first occurrence is the first after that time)."""


def run_beat(
    load: Callable[[], list[Job]], options: Mapping[str, Any], *, arm: Arm | None = None
) -> None:
    """Run a beat replica of the jobs ``load`` returns until SIGTERM or SIGINT, with the values
    of the options ``beat_options`` added (other keys are left alone); errors are one line
    and exit 2. ``arm`` reads what the jobs keep in the store before the beat starts (an
    ``rq cron`` interval registration anchored to when the cluster first saw it)."""
    store: str | None = options["store"]
    http_bind: str | None = options["http_bind"]
    secret: str | None = options["secret"]
    forwarded_allow_ips: str = options["forwarded_allow_ips"]
    metrics_bind: str | None = options["metrics_bind"]
    with one_line_errors():
        if options["take_over"] not in TAKE_OVER:  # before the app is imported: at once
            raise ConfigError(
                f"expected one of {', '.join(TAKE_OVER)}",
                option="--take-over",
                value=str(options["take_over"])[:40],
            )
        if http_bind:
            source = click.get_current_context().get_parameter_source("secret")
            if secret and source == click.core.ParameterSource.COMMANDLINE:
                log.warning(
                    "--secret on the command line shows in ps; prefer "
                    "CRON_BRIDGE_SECRET or --secret-file"
                )
            secret = read_secret(secret, options["secret_file"])
            check_secret(secret)
        shown = _namespaces(options["namespaces"])
        if shown and not http_bind:
            fail("--namespace is shown on the dashboard: give --http as well")
        metrics = serve_beat_metrics(metrics_bind) if metrics_bind else None
        set_default_monitor(options.get("monitor"))
        jobs = load()
        opened = open_store(store)
        since: Mapping[str, datetime] = {}
        if arm is not None:
            jobs, since = arm(opened, jobs)
        replica = Beat(
            opened,
            jobs,
            replica_id=options["replica_id"],
            shutdown_timeout=options["shutdown_timeout"],
            handle_signals=True,
            take_over=options["take_over"],
        )
        for job in jobs:
            if job.name in since:
                replica.add(job, since=since[job.name])
        if metrics is not None:
            watch_replica(replica.health, lambda: len(opened.replicas()))
        # What the app declared lives as long as the process: out of the collector's sight,
        # so the collections a burst's allocations set off do not walk every job again.
        gc.freeze()
        server = (
            serve_beat_http(replica, http_bind, secret, forwarded_allow_ips, shown)
            if http_bind and secret
            else None
        )
        try:
            replica.run_forever()
        finally:
            for running in (server, metrics):
                if running is not None:
                    running.shutdown()
            opened.close()


def _say_what_else(modules: tuple[str, ...], *, declared: bool) -> None:
    """Say once, at start, what the modules hold that this beat does not run (a Celery
    ``beat_schedule``, ``rq cron`` registrations, periodiq actors, with the command that runs
    each), and when they declare no job at all."""
    loaded = [sys.modules[name] for name in modules if name in sys.modules]
    elsewhere = []
    for adapter in installed_adapters():
        found = adapter.declared_in(loaded)
        if found:
            command = adapter.runs_with.format(modules=" ".join(modules))
            shown = adapter.declared_as
            elsewhere.append(
                f"{len(found)} {shown} entr{'y' if len(found) == 1 else 'ies'}"
                + (f", which `{command}` runs" if command else "")
            )
    if not declared:
        log.warning(
            "no job is declared in %s (imported): put @cluster_task(...) above a task there%s; "
            "stored schedules still run",
            ", ".join(modules),
            f"; it has {', '.join(elsewhere)}" if elsewhere else "",
        )
    elif elsewhere:
        log.warning(
            "%s also has %s: this beat runs only the @cluster_task jobs",
            ", ".join(modules),
            "; ".join(elsewhere),
        )


def read_secret(secret: str | None, secret_file: str | None) -> str:
    if secret and secret_file:
        fail("give --secret (CRON_BRIDGE_SECRET) or --secret-file, not both")
    if secret_file:
        try:
            with open(secret_file, "rb") as handle:
                raw = handle.read(4097)
        except OSError as exc:
            fail(f"cannot read the --secret-file {secret_file}: {exc.strerror or exc}")
        if len(raw) > 4096:
            fail(f"the --secret-file {secret_file} is larger than a secret (4 KiB)")
        try:
            return raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            fail(f"the --secret-file {secret_file} is not UTF-8 text")
    if not secret:
        fail(
            "--http refuses to start without a secret; set CRON_BRIDGE_SECRET or give "
            "--secret-file (make one with: python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))')"
        )
    return secret


def host_port(option: str, bind: str) -> tuple[str, int]:
    host, _, port = bind.rpartition(":")
    if not port.isdigit() or not 1 <= int(port) <= 65535 or len(port) > 5:
        fail(f"{option} expects HOST:PORT with a port from 1 to 65535, got {bind!r}")
    if host.startswith("[") != host.endswith("]"):
        fail(f"{option}: a broken IPv6 address in {bind!r} (write [::1]:PORT)")
    return host.strip("[]") or "127.0.0.1", int(port)


def _url(host: str, port: int) -> str:
    """The address to open: an IPv6 host in brackets, and the loopback for every interface
    (``0.0.0.0``), which a browser on this host can open."""
    shown = {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(host, f"[{host}]" if ":" in host else host)
    return f"http://{shown}:{port}"


def serve_beat_metrics(bind: str) -> Any:
    host, port = host_port("--metrics", bind)
    try:
        server = serve_metrics(host, port)
    except OSError as exc:
        fail(f"cannot listen on {bind}: {exc.strerror or exc}")
    log.info("Prometheus metrics on %s/metrics", _url(host, port))
    return server


def _namespaces(given: tuple[str, ...]) -> dict[str, str]:
    """``NAME=STORE_URL`` pairs, each URL checked as a store URL (not yet connected)."""
    found: dict[str, str] = {}
    for pair in given:
        name, sep, url = pair.partition("=")
        if not sep or not name or not url:
            fail("--namespace expects NAME=STORE_URL")
        if name in found:
            fail(f"--namespace {name!r} is given twice")
        found[name] = url
    return found


def serve_beat_http(
    replica: Beat,
    bind: str,
    secret: str,
    forwarded_allow_ips: str,
    namespaces: dict[str, str] | None = None,
) -> HttpServer:
    host, port = host_port("--http", bind)
    app = asgi_app(replica, secret=secret, namespaces=namespaces)
    server = serve(app, host, port, forwarded_allow_ips=forwarded_allow_ips)
    where = _url(host, port)
    log.info(
        "dashboard on %s/_scheduler/ (log in with the secret); HTTP trigger on "
        "%s/_scheduler/run/<job>",
        where,
        where,
    )
    return server
