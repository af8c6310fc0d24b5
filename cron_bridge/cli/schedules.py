"""``cron-bridge schedule add|add-many|update|update-many|remove|remove-many|list``: stored
schedules from the command line."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from cron_bridge.cli.common import (
    fail,
    load_app,
    one_line_errors,
    open_store,
    optional_app_option,
    print_table,
    store_option,
)
from cron_bridge.control import pause as control
from cron_bridge.control.bulk import json_lines, line_of
from cron_bridge.control.schedules import LIBRARIES, SPEC_MAX, ScheduleEntry, StoredSchedules
from cron_bridge.errors import ConfigError
from cron_bridge.options import OPTIONS, WHEN, Option, shown
from cron_bridge.plumbing import inbound

__all__ = ["schedule"]

F = TypeVar("F", bound=Callable[..., Any])

# The job options a stored schedule may set that have a flag, each as the definition reads it
# (cron_bridge.options): --misfire-grace for misfire_grace.
_FLAGS = {name: option for name, option in OPTIONS.items() if option.cli is not None}


def _reader(option: Option) -> click.IntRange | type[str]:
    """The flag's reader: a whole number in the option's ``range``, else text, which the
    options read as the Python API reads text ("30s", "5")."""
    if isinstance(option.cli, range):
        return click.IntRange(option.cli.start, option.cli.stop - 1)
    return str


def _spec_options(*, defaults: bool) -> Callable[[F], F]:
    """The flags of the job options and of a stored schedule's own fields; with ``defaults``,
    each option's help says the default a schedule without it gets."""

    def attach(func: F) -> F:
        for name, option in reversed(_FLAGS.items()):
            said = option.help
            if defaults and option.default is not None:
                said = f"{said} (default: {shown(option.default)})"
            flag = "--" + name.replace("_", "-")
            func = click.option(flag, name, type=_reader(option), default=None, help=said)(func)
        func = click.option("--queue", default=None, help="The queue (default: the task's).")(func)
        func = click.option(
            "--args",
            "args_json",
            default=None,
            metavar="JSON",
            help="Positional arguments, a JSON list.",
        )(func)
        return click.option(
            "--kwargs",
            "kwargs_json",
            default=None,
            metavar="JSON",
            help="Keyword arguments, a JSON object.",
        )(func)

    return attach


def _json(value: str | None, option: str, kind: type) -> Any:
    if value is None:
        return None
    try:
        parsed = inbound.loads(value, max_bytes=SPEC_MAX)
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
    options = {k: values[k] for k in _FLAGS if values.get(k) is not None}
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


def _echo(spec: ScheduleEntry) -> None:
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
@_spec_options(defaults=True)
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
            spec = StoredSchedules(opened).add(
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
@_spec_options(defaults=False)
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
            spec = StoredSchedules(opened).update(name, by=control.cli_actor(), **given)
        finally:
            opened.close()
    _echo(spec)


class _Source(click.File):
    """A JSON lines file, or ``-`` for standard input: one that cannot be opened (standard
    input closed, a directory, no such file) is click's one-line usage error, not a
    traceback."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except (RuntimeError, OSError) as exc:  # no standard input to read
            self.fail(f"{value!r}: {exc}", param, ctx)


SOURCE = _Source("rb")


@schedule.command("add-many")
@click.argument("source", type=SOURCE)
@_app
@store_option
def add_many(source: Any, app: tuple[str, ...], store: str | None) -> None:
    """Store many new schedules from SOURCE, a JSON lines file (``-``: standard input): one
    object per line, as the API's POST takes ({"name", "library", "task", "cron"|"every"|
    "at", ...}). Every line is checked before anything is written; then they are written a
    few thousand at a time, each batch whole or not at all. Prints how many were added."""
    with one_line_errors():
        lines = json_lines(source.readline)
        if app:
            load_app(app)
        with _lines_named(lines), _opened(store) as schedules:
            added = schedules.add_many([e for _, e in lines], by=control.cli_actor())
    click.echo(json.dumps({"added": len(added)}))


@schedule.command("update-many")
@click.argument("source", type=SOURCE)
@_app
@store_option
def update_many(source: Any, app: tuple[str, ...], store: str | None) -> None:
    """Change many stored schedules from SOURCE, a JSON lines file (``-``: standard input):
    one object per line, the schedule's "name" and the fields to change, as the API's PATCH
    takes them (null drops an option). Every line is checked as update checks it (the
    schedule must exist) before anything is written; then they are written a few thousand
    at a time. Prints how many were updated."""
    with one_line_errors():
        lines = json_lines(source.readline)
        if app:
            load_app(app)
        with _lines_named(lines), _opened(store) as schedules:
            updated = schedules.update_many([e for _, e in lines], by=control.cli_actor())
    click.echo(json.dumps({"updated": len(updated)}))


@schedule.command("remove-many")
@click.argument("source", type=SOURCE)
@store_option
def remove_many(source: Any, store: str | None) -> None:
    """Stop many stored schedules on every replica, from SOURCE, a JSON lines file (``-``:
    standard input): one object per line with the schedule's "name" (other fields are not
    read, so an add-many file removes what it added). Prints how many were removed and the
    names that were not stored."""
    with one_line_errors():
        lines = json_lines(source.readline)
        names: list[Any] = [entry.get("name") for _, entry in lines]  # checked by remove_many
        with _lines_named(lines), _opened(store) as schedules:
            gone = schedules.remove_many(names, by=control.cli_actor())
    missing = [name for name, spec in gone.items() if spec is None]
    click.echo(json.dumps({"removed": len(gone) - len(missing), "missing": missing}))


@contextmanager
def _opened(url: str | None) -> Iterator[StoredSchedules]:
    """The stored schedules of the store at ``url``, closed after."""
    opened = open_store(url)
    try:
        yield StoredSchedules(opened)
    finally:
        opened.close()


@contextmanager
def _lines_named(lines: Sequence[tuple[int, Any]]) -> Iterator[None]:
    """A refusal of an entry within, one line on stderr naming the entry's line (exit 2)."""
    try:
        yield
    except ConfigError as exc:
        line = line_of(exc, [number for number, _ in lines])
        if line is None:
            raise
        fail(f"line {line}: {exc}")


@schedule.command("remove")
@click.argument("name")
@store_option
def remove(name: str, store: str | None) -> None:
    """Stop a stored schedule on every replica."""
    with one_line_errors():
        opened = open_store(store)
        try:
            gone = StoredSchedules(opened).remove(name, by=control.cli_actor())
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
            found = StoredSchedules(opened).list()
        finally:
            opened.close()
    if as_json:
        click.echo(json.dumps([found[name].to_json() for name in sorted(found)], indent=2))
        return
    rows = [["NAME", "LIBRARY", "TASK", "SCHEDULE", "QUEUE"]]
    for name in sorted(found):
        spec = found[name]
        when = " ".join(f"{k}={v}" for k, v in spec.options.items() if k in WHEN)
        rows.append([name, spec.library, spec.task, when, spec.queue or "-"])
    print_table(rows)
