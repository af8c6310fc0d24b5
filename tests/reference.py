"""The generated parts of docs/configuration.md: every job option from its definition
(``cron_bridge.options``), every command's options from the click commands themselves, and
every store URL option from the URL parser.

``python -m tests.reference`` rewrites them in the page; ``tests/test_reference.py`` fails when
the page and the code differ.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import click

PAGE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
BEGIN, END = "<!-- generated: commands -->", "<!-- end generated: commands -->"
OPTIONS_BEGIN, OPTIONS_END = (
    "<!-- generated: job options -->",
    "<!-- end generated: job options -->",
)
STORES_BEGIN, STORES_END = (
    "<!-- generated: store options -->",
    "<!-- end generated: store options -->",
)


def every_command(
    group: click.Group, prefix: str = "cron-bridge"
) -> Iterator[tuple[str, click.Command]]:
    """``group`` and every command under it (entry points' too), with its full name."""
    ctx = click.Context(group, info_name=prefix)
    yield prefix, group
    for name in sorted(group.list_commands(ctx)):
        command = group.get_command(ctx, name)
        assert command is not None, name
        full = f"{prefix} {name}"
        if isinstance(command, click.Group):
            yield from every_command(command, full)
        else:
            yield full, command


def _default(param: click.Option) -> str:
    said = re.search(r"\(default: ([^)]*)\)", param.help or "")
    if said:
        return said[1].replace("|", "\\|")
    value = param.default
    if param.is_flag and not param.secondary_opts:
        return "off"
    if value is None or value == () or callable(value) or type(value).__name__ == "Sentinel":
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"`{value}`"


def commands() -> str:
    """One table per command: each option, its environment variable, default and help."""
    from cron_bridge.cli.main import main

    parts = []
    for full, command in every_command(main):
        rows = []
        for param in command.params:
            if isinstance(param, click.Argument):
                rows.append(f"| `{param.human_readable_name}` (argument) | - | |")
                continue
            if not isinstance(param, click.Option) or param.hidden:
                continue
            flags = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
            env = f" (`${param.envvar}`)" if isinstance(param.envvar, str) else ""
            text = re.sub(r"\s*\(default: [^)]*\)", "", (param.help or "").replace("\n", " "))
            said = text.replace("|", "\\|")
            rows.append(f"| {flags}{env} | {_default(param)} | {said} |")
        if not rows:
            continue
        table = "\n".join(["| option | default | what it does |", "|---|---|---|", *rows])
        parts.append(f"### `{full}`\n\n{table}\n")
    return "\n".join(parts)


def job_options() -> str:
    """Each job option: its default, whether a stored schedule may set it, its flag on
    ``cron-bridge schedule add`` (as the command has it) and its help."""
    from cron_bridge.cli.schedules import add
    from cron_bridge.options import OPTIONS, shown

    flags = {param.name: param.opts[0] for param in add.params if isinstance(param, click.Option)}
    rows = [
        "| option | default | stored schedules | command line | what it does |",
        "|---|---|---|---|---|",
    ]
    for name, option in OPTIONS.items():
        value = option.default
        said = (
            "-"
            if value is None
            else f'`"{value}"`'
            if isinstance(value, str)
            else f"`{shown(value)}`"
        )
        flag = f"`{flags[name]}`" if name in flags else "-"
        text = option.help.replace("|", "\\|")
        rows.append(f"| `{name}` | {said} | {'yes' if option.stored else '-'} | {flag} | {text} |")
    return "\n".join(rows) + "\n"


def store_options() -> str:
    """Each store URL scheme and the query parameters it reads, with their kinds."""
    from cron_bridge.stores.urls import _FAMILY, _OPTIONS

    rows = ["| scheme | query parameters |", "|---|---|"]
    for family, options in _OPTIONS.items():
        schemes = ", ".join(f"`{s}://`" for s, f in _FAMILY.items() if f == family)
        shown = ", ".join(f"`{name}` ({kind.__name__})" for name, kind in options.items())
        rows.append(f"| {schemes} | {shown} |")
    return "\n".join(rows) + "\n"


def _replace(text: str, begin: str, end: str, body: str) -> str:
    head, found, rest = text.partition(begin)
    assert found, f"{PAGE} has no {begin}"
    _, found, tail = rest.partition(end)
    assert found, f"{PAGE} has no {end}"
    return f"{head}{begin}\n\n{body}\n{end}{tail}"


def page() -> str:
    """docs/configuration.md with its generated parts as the code has them now."""
    text = PAGE.read_text()
    text = _replace(text, OPTIONS_BEGIN, OPTIONS_END, job_options())
    text = _replace(text, BEGIN, END, commands())
    return _replace(text, STORES_BEGIN, STORES_END, store_options())


if __name__ == "__main__":
    PAGE.write_text(page())
    sys.stdout.write(f"wrote {PAGE}\n")
