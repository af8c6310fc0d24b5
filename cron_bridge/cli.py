"""The ``cron-bridge`` command: ``beat``, ``list``, ``run``, ``history``.

Exit codes: 0 when the job completed, was enqueued or was already claimed; 1 when it
failed; 2 when it did not run for a reason the caller must fix (an unknown job, a module
that does not import, a bad or unreachable store), with one line on stderr.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import json
import logging
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from cron_bridge import aside, control
from cron_bridge.adapters import installed_adapters
from cron_bridge.audit import Audit, OccurrenceReport, audit, occurrence_report
from cron_bridge.beat import Beat
from cron_bridge.bounded import NEVER
from cron_bridge.errors import ConfigError, CronBridgeError, StoreUnavailable
from cron_bridge.http import check_secret
from cron_bridge.jobs import Job, Occurrence
from cron_bridge.registry import default_registry
from cron_bridge.schedules import Schedule, parse_duration
from cron_bridge.stored import Schedules
from cron_bridge.stores import RunRecord, Store, store_from_url

if TYPE_CHECKING:
    from cron_bridge.serve import HttpServer

__all__ = ["main"]

log = logging.getLogger("cron_bridge.cli")

DEFAULT_STORE = "sqlite:///cron-bridge.db"
EXIT_FAILED = 1
EXIT_USAGE = 2
F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """One line on stderr, then exit."""
    click.echo(f"cron-bridge: {message}", err=True)
    sys.exit(code)


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Turn our errors into one line on stderr and exit 2: no tracebacks for users."""
    try:
        yield
    except (ConfigError, StoreUnavailable) as exc:
        fail(str(exc))
    except CronBridgeError as exc:
        fail(str(exc), EXIT_FAILED)


def load_app(modules: str | tuple[str, ...]) -> list[Job]:
    """Import the user's modules (from the working directory too) and return their jobs."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for module in (modules,) if isinstance(modules, str) else modules:
        try:
            importlib.import_module(module)
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - any import failure is the user's module, said in one line
            fail(f"cannot import {module!r}: {type(exc).__name__}: {exc}")
    return default_registry.jobs()


def open_store(url: str | None) -> Store:
    """The store from --store or CRON_BRIDGE_STORE, else the local SQLite default; pinged."""
    chosen = url or os.environ.get("CRON_BRIDGE_STORE")
    if chosen is None:
        log.info("no --store or CRON_BRIDGE_STORE given; using %s", DEFAULT_STORE)
        chosen = DEFAULT_STORE
    try:
        store = store_from_url(chosen)
    except ImportError as exc:
        fail(str(exc))
    store.ping()
    return store


def open_existing_store(url: str | None) -> Store | None:
    """Like ``open_store``, but None instead of creating the default file when it is missing."""
    default_file = DEFAULT_STORE.removeprefix("sqlite:///")
    if url is None and "CRON_BRIDGE_STORE" not in os.environ and not os.path.exists(default_file):
        return None
    return open_store(url)


def app_option(func: F) -> F:
    return click.option(
        "-A",
        "--app",
        "app",
        required=True,
        multiple=True,
        envvar="CRON_BRIDGE_APP",
        metavar="MODULE",
        help="The module that declares the jobs, e.g. proj.tasks; repeat it for several "
        "(default: $CRON_BRIDGE_APP, space-separated).",
    )(func)


def optional_app_option(help_text: str) -> Callable[[F], F]:
    """``-A MODULE`` where a command can do without the app; ``help_text`` says for what."""
    return click.option(
        "-A", "--app", "app", multiple=True, envvar="CRON_BRIDGE_APP", metavar="MODULE",
        help=help_text,
    )  # fmt: skip


def store_option(func: F) -> F:
    help_text = f"Store URL (default: $CRON_BRIDGE_STORE, else {DEFAULT_STORE})."
    return click.option("--store", metavar="URL", default=None, help=help_text)(func)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--log-level",
    default=None,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    help="Default: INFO for beat, WARNING for the other commands.",
)
@click.pass_context
def main(ctx: click.Context, log_level: str | None) -> None:
    """cron-bridge: a cluster-safe beat for Celery, RQ and Dramatiq."""
    level = log_level or ("INFO" if ctx.invoked_subcommand in ("beat", "demo") else "WARNING")
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # The pool logs every reconnect attempt; the beat already says once that the store is down.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)


@main.command()
@app_option
@store_option
@click.option("--http", "http_bind", metavar="HOST:PORT", help="Serve the HTTP trigger here.")
@click.option(
    "--secret",
    envvar="CRON_BRIDGE_SECRET",
    help="Bearer token for --http (prefer $CRON_BRIDGE_SECRET or --secret-file: an option "
    "shows in ps).",
)
@click.option(
    "--secret-file",
    envvar="CRON_BRIDGE_SECRET_FILE",
    type=click.Path(dir_okay=False),
    help="Read the bearer token for --http from this file (default: $CRON_BRIDGE_SECRET_FILE).",
)
@click.option(
    "--forwarded-allow-ips",
    envvar="CRON_BRIDGE_FORWARDED_ALLOW_IPS",
    default="127.0.0.1",
    show_default=True,
    help="Proxies whose X-Forwarded-Proto/-For are believed (comma-separated, or *).",
)
@click.option(
    "--metrics",
    "metrics_bind",
    metavar="HOST:PORT",
    help="Serve Prometheus metrics on http://HOST:PORT/metrics (needs prometheus-client).",
)
@click.option(
    "--replica-id",
    envvar="CRON_BRIDGE_REPLICA_ID",
    default=None,
    help="This replica's name (default: $CRON_BRIDGE_REPLICA_ID, else host-pid-random).",
)
@click.option(
    "--shutdown-timeout", envvar="CRON_BRIDGE_SHUTDOWN_TIMEOUT", default="25s", show_default=True
)
@click.option(
    "--namespace",
    "namespaces",
    metavar="NAME=STORE_URL",
    multiple=True,
    help="Also show this namespace (another store, prefix or schema) on the --http dashboard, "
    "read-only; repeat for more.",
)
def beat(
    app: tuple[str, ...],
    store: str | None,
    http_bind: str | None,
    secret: str | None,
    secret_file: str | None,
    forwarded_allow_ips: str,
    metrics_bind: str | None,
    replica_id: str | None,
    shutdown_timeout: str,
    namespaces: tuple[str, ...],
) -> None:
    """Run a beat replica until SIGTERM or SIGINT, then drain and exit."""
    with one_line_errors():
        if http_bind:
            source = click.get_current_context().get_parameter_source("secret")
            if secret and source == click.core.ParameterSource.COMMANDLINE:
                log.warning("--secret on the command line shows in ps; prefer "
                            "CRON_BRIDGE_SECRET or --secret-file")  # fmt: skip
            secret = _read_secret(secret, secret_file)
            check_secret(secret)
        shown = _namespaces(namespaces)
        if shown and not http_bind:
            fail("--namespace is shown on the dashboard: give --http as well")
        metrics = _serve_metrics(metrics_bind) if metrics_bind else None
        jobs = load_app(app)
        opened = open_store(store)
        replica = Beat(
            opened,
            jobs,
            replica_id=replica_id,
            shutdown_timeout=shutdown_timeout,
            handle_signals=True,
        )
        # What the app declared lives as long as the process: out of the collector's sight,
        # so the collections a burst's allocations set off do not walk every job again.
        gc.freeze()
        server = (
            _serve_http(replica, http_bind, secret, forwarded_allow_ips, shown)
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


def _read_secret(secret: str | None, secret_file: str | None) -> str:
    if secret and secret_file:
        fail("give --secret (CRON_BRIDGE_SECRET) or --secret-file, not both")
    if secret_file:
        try:
            with open(secret_file, "rb") as handle:
                raw = handle.read(4097)
        except OSError as exc:
            fail(f"--secret-file: cannot read {secret_file}: {exc.strerror or exc}")
        if len(raw) > 4096:
            fail(f"--secret-file: {secret_file} is larger than a secret (4 KiB)")
        try:
            return raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            fail(f"--secret-file: {secret_file} is not UTF-8 text")
    if not secret:
        fail("--http refuses to start without a secret: set CRON_BRIDGE_SECRET or give "
             "--secret-file (make one with: python -c 'import secrets; "
             "print(secrets.token_urlsafe(32))')")  # fmt: skip
    return secret


def _host_port(option: str, bind: str) -> tuple[str, int]:
    host, _, port = bind.rpartition(":")
    if not port.isdigit() or not 1 <= int(port) <= 65535 or len(port) > 5:
        fail(f"{option} expects HOST:PORT with a port from 1 to 65535, got {bind!r}")
    if host.startswith("[") != host.endswith("]"):
        fail(f"{option}: a broken IPv6 address in {bind!r} (write [::1]:PORT)")
    return host.strip("[]") or "127.0.0.1", int(port)


def _serve_metrics(bind: str) -> Any:
    from cron_bridge.telemetry import serve_metrics

    host, port = _host_port("--metrics", bind)
    try:
        server = serve_metrics(host, port)
    except OSError as exc:
        fail(f"cannot listen on {bind}: {exc.strerror or exc}")
    log.info("Prometheus metrics on http://%s/metrics", bind)
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


def _serve_http(
    replica: Beat, bind: str, secret: str, forwarded_allow_ips: str,
    namespaces: dict[str, str] | None = None,
) -> HttpServer:  # fmt: skip
    from cron_bridge.http import asgi_app
    from cron_bridge.serve import serve

    host, port = _host_port("--http", bind)
    app = asgi_app(replica, secret=secret, namespaces=namespaces)
    server = serve(app, host, port, forwarded_allow_ips=forwarded_allow_ips)
    log.info("HTTP trigger on http://%s/_scheduler/run/<job>", bind)
    return server


@main.command("list")
@app_option
@store_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per job, in a list.")
def list_jobs(app: tuple[str, ...], store: str | None, as_json: bool) -> None:
    """List the jobs with their schedules, next and last runs: those the modules declare
    (``@cluster_task``, a Celery app's ``beat_schedule``) and the stored schedules."""
    with one_line_errors():
        sources = _listed_jobs(load_app(app), app)
        opened = open_existing_store(store)
        try:
            if opened is not None:
                sources += _stored_jobs(opened, {job.name for job, _ in sources})
            now = datetime.now(UTC)
            rows: list[dict[str, Any]] = []
            paused = control.paused(opened) if opened else {}
            for job, source in sorted(sources, key=lambda pair: pair[0].name):
                last = opened.history(job.name, 1) if opened else []
                pause = paused.get(job.name)
                target = _target(job)
                rows.append(
                    {
                        "name": job.name,
                        "schedule": job.schedule.describe(),
                        "timezone": job.schedule.tz,
                        "scope": job.scope,
                        "target": f"stored:{target}" if source == "stored" else target,
                        "source": source,
                        "next": _next_run(job, now),
                        "last": last[0].to_json() if last else None,
                        "paused": pause.to_json() if pause else None,
                    }
                )
        finally:
            if opened:
                opened.close()
        jobs = [job for job, _ in sources]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = [["NAME", "SCHEDULE", "TIMEZONE", "SCOPE", "TARGET", "NEXT", "LAST"]]
    for row in rows:
        last = row["last"]
        shown_last = (
            f"{last['started_at'][:19]} {last['outcome']} {last['replica']}" if last else "-"
        )
        table.append(
            [
                row["name"],
                row["schedule"],
                row["timezone"],
                row["scope"],
                row["target"],
                "paused" if row["paused"] else (row["next"] or _no_next(jobs, row["name"]))[:19],
                shown_last,
            ]
        )
    print_table(table)


@main.command()
@click.argument("name")
@app_option
@store_option
@click.option("--force", is_flag=True, help="Run a fresh occurrence even if this one ran.")
def run(name: str, app: tuple[str, ...], store: str | None, force: bool) -> None:
    """Run one job now through the normal claim and print the result as JSON."""
    with one_line_errors():
        jobs = load_app(app)
        if name not in {job.name for job in jobs}:
            known = ", ".join(sorted(job.name for job in jobs)) or "none"
            fail(f"no job called {name!r} in {' '.join(app)} (known: {known})")
        opened = open_store(store)
        try:
            result = Beat(opened, jobs).trigger(name, force=force)
        finally:
            opened.close()
    click.echo(json.dumps(result.to_json()))
    sys.exit(EXIT_FAILED if result.outcome in ("failed", "aborted") else 0)


@main.command()
@click.argument("name")
@store_option
@click.option(
    "-n",
    "count",
    default=20,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="How many runs, newest first.",
)
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
@click.option(
    "--occurrence",
    "occurrence_id",
    metavar="ID",
    help="One occurrence: who claimed it, who skipped it, its enqueue, each attempt, the end.",
)
@click.option(
    "--audit",
    "audit_window",
    is_flag=True,
    help="Count the occurrences of --since with zero, one or more completed runs; exit 1 "
    "when any has zero or more than one.",
)
@click.option(
    "--changes",
    "changes",
    is_flag=True,
    help="The operators' changes to the job (pause, resume): who, when, why.",
)
@click.option("--since", default="24h", show_default=True, help="The window of --audit.")
@click.option(
    "--grace",
    default="1m",
    show_default=True,
    help="--audit leaves out occurrences due this recently: they may still be running.",
)
@optional_app_option(
    "For --audit: the module that declares the job, so occurrences that left no record count too."
)
def history(
    name: str,
    store: str | None,
    count: int,
    as_json: bool,
    occurrence_id: str | None,
    audit_window: bool,
    changes: bool,
    since: str,
    grace: str,
    app: tuple[str, ...],
) -> None:
    """Show the recent runs of a job from every replica, one occurrence, an audit, or the
    changes operators made to it."""
    with one_line_errors():
        if (occurrence_id is not None) + audit_window + changes > 1:
            fail("give one of --occurrence, --audit and --changes")
        if occurrence_id is not None:
            try:
                occurrence = Occurrence.parse(occurrence_id)
            except ValueError as exc:
                fail(f"{exc} (expected <job>@<UTC time>, as history prints them)")
            if occurrence.job != name:
                fail(f"occurrence {occurrence_id!r} is not one of {name!r}")
        window = parse_duration(since, option="since"), parse_duration(grace, option="grace")
        jobs = {job.name: job for job in load_app(app)} if audit_window and app else {}
        opened = open_existing_store(store)
        if opened is None:
            fail("no store: give --store or set CRON_BRIDGE_STORE")
        try:
            if changes:
                _show_changes(control.changes(opened, name)[:count], as_json)
                return
            if occurrence_id is not None:
                _show_occurrence(occurrence_report(opened, occurrence), as_json)
                return
            if audit_window:
                schedule = _audited_schedule(opened, name, jobs, app)
                now = datetime.now(UTC)
                found = audit(opened, name, now - window[0], now - window[1], schedule)
                _show_audit(found, as_json)
                sys.exit(0 if found.clean else EXIT_FAILED)
            records = aside.history(opened, name, count)
        finally:
            opened.close()
    if as_json:
        click.echo(json.dumps([r.to_json() for r in records], indent=2))
        return
    print_table(_record_rows(records))


def _listed_jobs(jobs: list[Job], modules: tuple[str, ...]) -> list[tuple[Job, str]]:
    """The jobs of the modules with where each was declared: ``code`` (``@cluster_task``), or
    the queue library's own schedule (an adapter's ``declared_in``, e.g. ``beat_schedule``)."""
    found = [(job, "code") for job in jobs]
    loaded = [sys.modules[name] for name in modules if name in sys.modules]
    names = {job.name for job in jobs}
    for adapter in installed_adapters():
        declared_in = getattr(adapter, "declared_in", None)
        if declared_in is None:
            continue
        for job in declared_in(loaded):
            if job.name not in names:
                names.add(job.name)
                found.append((job, str(getattr(adapter, "declared_as", adapter.name))))
    return found


def _stored_jobs(store: Store, declared: set[str]) -> list[tuple[Job, str]]:
    """The stored schedules a beat would run beside ``declared`` (a name declared in code
    wins), as jobs; one that cannot be read is left out, as the beat leaves it out."""
    found = []
    for name, spec in Schedules(store).list().items():
        if name in declared:
            continue
        try:
            found.append((spec.job(), "stored"))
        except ConfigError as exc:
            log.warning("stored schedule %s is not run: %s", name, exc)
    return found


def _audited_schedule(
    store: Store, name: str, jobs: dict[str, Job], app: tuple[str, ...]
) -> Schedule | None:
    """The schedule ``--audit`` holds the records against: the job's in ``-A``, else the
    stored schedule's of that name; None (records alone) without either."""
    if name in jobs:
        return jobs[name].schedule
    spec = Schedules(store).get(name)
    if spec is not None:
        try:
            return spec.job().schedule
        except ConfigError as exc:
            log.warning("the stored schedule %s cannot be read: %s", name, exc)
    if app:
        fail(f"no job called {name!r} in {' '.join(app)} or among the stored schedules")
    return None


def _next_run(job: Job, now: datetime) -> str | None:
    """ISO time of the next occurrence; None for an external job or one with none left."""
    upcoming = None if job.external else job.schedule.next_after(now)
    return None if upcoming is None or upcoming >= NEVER else upcoming.isoformat()


def _no_next(jobs: list[Job], name: str) -> str:
    """What NEXT says without a time: ``external``, or ``none`` (a one-off that ran, an
    ``end`` that passed)."""
    return "external" if any(job.external for job in jobs if job.name == name) else "none"


def _show_changes(found: list[control.Change], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps([change.to_json() for change in found], indent=2))
        return
    rows = [["AT", "ACTION", "BY", "REASON"]]
    rows += [[c.at.isoformat()[:19], c.action, c.by, c.reason] for c in found]
    print_table(rows)


def _record_rows(records: list[RunRecord]) -> list[list[str]]:
    rows = [["OCCURRENCE", "OUTCOME", "TRIGGER", "ATTEMPT", "REPLICA", "STARTED", "MS", "DETAIL"]]
    for r in records:
        rows.append(
            [
                r.occurrence_id,
                r.outcome,
                r.trigger,
                str(r.attempt),
                r.replica,
                r.started_at.astimezone(UTC).isoformat(timespec="milliseconds")[:23],
                "" if r.duration_ms is None else f"{r.duration_ms:.0f}",
                r.error or r.reason or "",
            ]
        )
    return rows


def _show_occurrence(report: OccurrenceReport, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
        return
    click.echo(f"occurrence  {report.occurrence_id}")
    click.echo(f"claimed by  {report.claimed_by or '- (no claim kept: never claimed, or expired)'}")
    click.echo(f"final       {report.final}")
    if report.records:
        click.echo("")
        print_table(_record_rows(report.records))


def _show_audit(found: Audit, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(found.to_json(), indent=2))
        return
    source = (
        "its schedule" if found.from_schedule else "the records in the store (-A adds the schedule)"
    )
    click.echo(
        f"{found.job}: occurrences due {found.start.isoformat()[:19]} to "
        f"{found.end.isoformat()[:19]} UTC, from {source}"
    )
    header = ["OCCURRENCES", "COMPLETED ONCE", "NEVER COMPLETED", "MORE THAN ONCE"]
    counts = [found.occurrences, found.once, len(found.never), len(found.more)]
    print_table([[*header, "BEYOND HISTORY"], [str(n) for n in [*counts, found.beyond_history]]])
    for occurrence_id, why in list(found.why.items())[:20]:
        click.echo(f"never completed: {occurrence_id}: {why}")
    for occurrence_id, times in list(found.more.items())[:20]:
        click.echo(f"completed {times} times: {occurrence_id}")
    if found.beyond_history:
        click.echo(
            f"{found.beyond_history} occurrence(s) are older than the records the store keeps "
            "(history_limit): not judged"
        )


def _target(job: Job) -> str:
    return "inline" if job.target == "inline" else f"{job.adapter}:{job.queue or 'default'}"


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        click.echo("  ".join(cells).rstrip())


class FiniteRange(click.FloatRange):
    """A float range that refuses nan (which every comparison lets through)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        converted = super().convert(value, param, ctx)
        if not math.isfinite(converted):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return converted


@main.command()
@click.option("--replicas", default=3, show_default=True, type=click.IntRange(1, 20))
@click.option("--duration", default=30, show_default=True, type=FiniteRange(5, 3600),
              help="Seconds to run.")  # fmt: skip
@click.option("--keep", is_flag=True, help="Keep the folder with the store and the logs.")
def demo(replicas: int, duration: float, keep: bool) -> None:
    """Run beat replicas and a Celery worker on SQLite and a filesystem broker, no server."""
    if importlib.util.find_spec("cron_bridge_celery") is None:
        fail('the demo runs Celery: pip install "cron-bridge[celery]"')
    from cron_bridge.demo import run_demo

    totals = run_demo(replicas=replicas, duration=duration, keep=keep, echo=click.echo)
    sys.exit(0 if totals.ok else EXIT_FAILED)


# The commands of other modules, registered on ``main`` when they are imported.
from cron_bridge import cli_control, cli_schedules  # noqa: E402, F401
