"""What every command shares: one-line errors and exit codes, loading the user's modules,
opening the store, the common options, tables.

Exit codes: 0 when the job completed, was enqueued or was already claimed; 1 when it
failed; 2 when it did not run for a reason the caller must fix (an unknown job, a module
that does not import, a bad or unreachable store), with one line on stderr.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, tzinfo
from typing import Any, NoReturn, TypeVar

import click

from cron_bridge.clock import in_zone
from cron_bridge.errors import ConfigError, CronBridgeError, StoreUnavailable
from cron_bridge.jobs import Job
from cron_bridge.plumbing.outbound import TRACEBACK_MAX, described, sanitize
from cron_bridge.registry import default_registry
from cron_bridge.schedules import load_zone, local_zone_name
from cron_bridge.stores import Store, store_from_url
from cron_bridge.stores.urls import DEFAULT_STORE

__all__ = [
    "EXIT_FAILED",
    "EXIT_USAGE",
    "FiniteRange",
    "StreamedTable",
    "app_option",
    "fail",
    "load_app",
    "one_line_errors",
    "open_existing_store",
    "open_store",
    "optional_app_option",
    "print_table",
    "say",
    "store_option",
    "tz_option",
    "zoned",
]

log = logging.getLogger(__name__)

EXIT_FAILED = 1
EXIT_USAGE = 2
F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """One line on stderr, then exit."""
    click.echo(f"cron-bridge: {sanitize(message)}", err=True)
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
            fail(f"cannot import {module!r}: {described(exc)}")
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
        "-A",
        "--app",
        "app",
        multiple=True,
        envvar="CRON_BRIDGE_APP",
        metavar="MODULE",
        help=help_text,
    )


def store_option(func: F) -> F:
    help_text = f"Store URL (default: $CRON_BRIDGE_STORE, else {DEFAULT_STORE})."
    return click.option("--store", metavar="URL", default=None, help=help_text)(func)


CELL_MAX = 4000  # a record's error, as kept


def say(text: str, *, lines: bool = False) -> None:
    """Print what a record, a job or the store says, sanitised: no escape sequence, bell or
    other control character reaches the terminal, piped or not.

    Args:
        text: the line (or, with ``lines``, the lines: a traceback, its end kept) to print.
        lines: keep the text's newlines.
    """
    click.echo(
        sanitize(text, TRACEBACK_MAX, lines=True, keep="tail")
        if lines
        else sanitize(text, CELL_MAX)
    )


def print_table(rows: list[list[str]]) -> None:
    """Print ``rows`` as columns, every cell sanitised to one line (``say``)."""
    rows = [[sanitize(cell, CELL_MAX) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        click.echo("  ".join(cells).rstrip())


class StreamedTable:
    """A table printed a block of rows at a time, as they are read: the columns are as wide
    as the header and the first block need (a longer cell later pushes the rest of its row
    along). One block prints as ``print_table`` prints it."""

    def __init__(self, header: list[str]) -> None:
        self._header = header
        self._widths: list[int] | None = None

    def add(self, rows: list[list[str]]) -> None:
        rows = [[sanitize(cell, CELL_MAX) for cell in row] for row in rows]
        if self._widths is None:
            rows = [[sanitize(cell, CELL_MAX) for cell in self._header], *rows]
            self._widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            cells = (cell.ljust(width) for cell, width in zip(row, self._widths, strict=True))
            click.echo("  ".join(cells).rstrip())

    def end(self) -> None:
        if self._widths is None:
            self.add([])


class FiniteRange(click.FloatRange):
    """A float range that refuses nan (which every comparison lets through)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        converted = super().convert(value, param, ctx)
        if not math.isfinite(converted):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return converted


def _zone(ctx: click.Context, param: click.Parameter, value: str | None) -> tzinfo:
    """``--tz``'s zone: UTC when not given, this machine's zone for ``local``."""
    del ctx, param
    if value is None or value.upper() == "UTC":
        return UTC
    try:
        return load_zone(local_zone_name(why="--tz local") if value == "local" else value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from None


tz_option = click.option(
    "--tz",
    "tz",
    metavar="ZONE",
    callback=_zone,
    help="Show record times in this zone (Europe/Warsaw, or local) instead of UTC.",
)


def zoned(at: datetime, tz: tzinfo, timespec: str = "seconds") -> str:
    """``at`` in ``tz``, saying its zone: ``2026-12-02T02:00:00Z`` in UTC, else with the
    offset (``2026-12-02T03:00:00+01:00``). Never raises: a time ``tz`` cannot hold (at the
    ends of the calendar) is shown in UTC, one without a zone as its own ISO text."""
    local = in_zone(at, tz)
    shown = local.isoformat(timespec=timespec)
    return shown.removesuffix("+00:00") + "Z" if UTC in (tz, local.tzinfo) else shown
