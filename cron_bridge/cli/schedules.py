"""``cron-bridge schedule add|update|remove|list``: stored schedules from the command line."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

from cron_bridge import untrusted
from cron_bridge.cli.common import (
    load_app,
    one_line_errors,
    open_store,
    optional_app_option,
    print_table,
    store_option,
)
from cron_bridge.control import pause as control
from cron_bridge.control.schedules import LIBRARIES, SPEC_MAX, Schedules, StoredSchedule
from cron_bridge.errors import ConfigError

__all__ = ["schedule"]

F = TypeVar("F", bound=Callable[..., Any])

# Options given as text on the command line, read as the Python API reads them.
_TEXT_OPTIONS = (
    "cron",
    "every",
    "at",
    "tz",
    "offset",
    "start",
    "end",
    "jitter",
    "misfire",
    "misfire_grace",
    "overlap",
    "lock_ttl",
    "timeout",
)


_WHEN = ("cron", "every", "at", "tz", "offset", "start", "end", "jitter")


_HELP = {
    "cron": "A 5-field cron expression, or @hourly, @daily, @weekly, @monthly, @yearly.",
    "every": "An interval: 90s, 5m, 1h, 1d, or seconds (at least 1s).",
    "at": "One time for a one-off run, ISO 8601 with its zone (2026-12-01T09:00:00+01:00).",
    "tz": "The IANA zone the cron fields are read in (default UTC).",
    "offset": "Shift an --every from the epoch multiples (--every 1h --offset 15m: at :15).",
    "start": "No occurrence before this time (ISO 8601 with its zone).",
    "end": "No occurrence after this time (ISO 8601 with its zone).",
    "jitter": "Delay each occurrence by up to this much, the same on every replica.",
    "misfire": "skip (default), or run-once: run the latest occurrence missed while down.",
    "misfire_grace": "How late an occurrence may still start (default 30s).",
    "overlap": "skip (default) or allow: a run while the previous one still runs.",
    "lock_ttl": "The overlap lock's lifetime, renewed by the heartbeat (default 30s).",
    "timeout": "Abort the run (ctx.signal, reason timeout) after this long.",
}


def _spec_options(func: F) -> F:
    for option in reversed(_TEXT_OPTIONS):
        flag = "--" + option.replace("_", "-")
        func = click.option(flag, option, default=None, help=_HELP[option])(func)
    func = click.option(
        "--attempts",
        type=click.IntRange(1, 1000),
        default=None,
        help="Total tries, the first included.",
    )(func)
    func = click.option("--queue", default=None, help="The queue (default: the task's).")(func)
    func = click.option(
        "--args",
        "args_json",
        default=None,
        metavar="JSON",
        help="Positional arguments, a JSON list.",
    )(func)
    func = click.option(
        "--kwargs",
        "kwargs_json",
        default=None,
        metavar="JSON",
        help="Keyword arguments, a JSON object.",
    )(func)
    return func


def _json(value: str | None, option: str, kind: type) -> Any:
    if value is None:
        return None
    try:
        parsed = untrusted.loads(value, max_bytes=SPEC_MAX)
    except ValueError as exc:
        raise ConfigError(f"expected JSON ({exc})", option=option, value=value[:80]) from None
    if not isinstance(parsed, kind):
        raise ConfigError(
            f"expected a JSON {'list' if kind is list else 'object'}",
            option=option,
            value=value[:80],
        )
    return parsed


def _given(values: dict[str, Any]) -> dict[str, Any]:
    options = {k: values[k] for k in (*_TEXT_OPTIONS, "attempts") if values.get(k) is not None}
    fields = {
        "args": _json(values.get("args_json"), "args", list),
        "kwargs": _json(values.get("kwargs_json"), "kwargs", dict),
        "queue": values.get("queue"),
    }
    return options | {k: v for k, v in fields.items() if v is not None}


_app = optional_app_option(
    "The module that declares the task (repeatable; default $CRON_BRIDGE_APP): imported to "
    "check that stored schedules may name it (@cluster_task, @storable or "
    "CRON_BRIDGE_STORED_TASKS); without it only CRON_BRIDGE_STORED_TASKS can agree."
)


def _echo(spec: StoredSchedule) -> None:
    click.echo(json.dumps(spec.to_json()))


@click.group()
def schedule() -> None:
    """Stored schedules: jobs added at run time, run by every replica."""


@schedule.command("add")
@click.argument("name")
@click.option(
    "--task",
    required=True,
    help="The task the workers know: a Celery task name, "
    "a Dramatiq actor name, an RQ function's dotted path.",
)
@click.option(
    "--library",
    required=True,
    type=click.Choice(LIBRARIES),
    help="The queue library whose workers run the task.",
)
@_spec_options
@_app
@store_option
def add(
    name: str, task: str, library: str, app: tuple[str, ...], store: str | None, **values: Any
) -> None:
    """Store a new schedule (one of --cron, --every, --at)."""
    with one_line_errors():
        given = _given(values)
        if app:
            load_app(app)
        opened = open_store(store)
        try:
            spec = Schedules(opened).add(
                name, task=task, library=library, by=control.cli_actor(), **given
            )
        finally:
            opened.close()
    _echo(spec)


@schedule.command("update")
@click.argument("name")
@click.option("--task", default=None, help="Another task for the schedule (checked as by add).")
@click.option(
    "--library",
    default=None,
    type=click.Choice(LIBRARIES),
    help="The queue library whose workers run the task.",
)
@_spec_options
@_app
@store_option
def update(
    name: str,
    task: str | None,
    library: str | None,
    app: tuple[str, ...],
    store: str | None,
    **values: Any,
) -> None:
    """Change some of a stored schedule's options; the others stay."""
    with one_line_errors():
        given = _given(values)
        if app:
            load_app(app)
        if task is not None:
            given["task"] = task
        if library is not None:
            given["library"] = library
        if not given:
            raise ConfigError("nothing to change", job=name, option="name", value=name)
        opened = open_store(store)
        try:
            spec = Schedules(opened).update(name, by=control.cli_actor(), **given)
        finally:
            opened.close()
    _echo(spec)


@schedule.command("remove")
@click.argument("name")
@store_option
def remove(name: str, store: str | None) -> None:
    """Stop a stored schedule on every replica."""
    with one_line_errors():
        opened = open_store(store)
        try:
            gone = Schedules(opened).remove(name, by=control.cli_actor())
        finally:
            opened.close()
    click.echo(json.dumps({"name": name, "removed": gone.to_json() if gone else None}))


@schedule.command("list")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
@store_option
def list_schedules(as_json: bool, store: str | None) -> None:
    """The stored schedules."""
    with one_line_errors():
        opened = open_store(store)
        try:
            found = Schedules(opened).list()
        finally:
            opened.close()
    if as_json:
        click.echo(json.dumps([found[name].to_json() for name in sorted(found)], indent=2))
        return
    rows = [["NAME", "LIBRARY", "TASK", "SCHEDULE", "QUEUE"]]
    for name in sorted(found):
        spec = found[name]
        when = " ".join(f"{k}={v}" for k, v in spec.options.items() if k in _WHEN)
        rows.append([name, spec.library, spec.task, when, spec.queue or "-"])
    print_table(rows)
