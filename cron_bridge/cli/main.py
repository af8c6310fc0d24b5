"""The ``cron-bridge`` command group: the log level, then one of the commands the other
modules of ``cron_bridge.cli`` define (attached in its ``__init__``)."""

from __future__ import annotations

import contextlib
import logging
import sys
from importlib.metadata import EntryPoint, PackageNotFoundError, entry_points, version

import click

from cron_bridge.plumbing.outbound import LogFormatter
from cron_bridge.queues.installed import ENTRY_POINT_GROUP

__all__ = ["COMMANDS_GROUP", "IMPORTERS_GROUP", "Commands", "main"]

COMMANDS_GROUP = "cron_bridge.commands"
"""Where adapter distributions register more commands (``cron-bridge rq-cron``): click
commands, loaded only when named (or listed by ``--help``), so no other command imports a
queue library."""

IMPORTERS_GROUP = "cron_bridge.importers"
"""Where adapter distributions register ``cron-bridge import SOURCE`` commands."""

# The commands that run a beat log at INFO by default; the others at WARNING.
RUN_BEATS = {"beat", "demo", "rq-cron", "periodiq", "dramatiq-crontab"}


class Commands(click.Group):
    """The built-in commands, and those the installed adapters register."""

    entry_point_group = COMMANDS_GROUP

    def _installed(self) -> dict[str, EntryPoint]:
        return {point.name: point for point in entry_points(group=self.entry_point_group)}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self._installed()))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is not None:
            return found
        point = self._installed().get(cmd_name)
        if point is None:
            return None
        try:
            loaded = point.load()
        except Exception as exc:  # noqa: BLE001 - a broken adapter: said in one line
            raise click.ClickException(
                f"cannot load the command {cmd_name!r} ({point.value}): {type(exc).__name__}: {exc}"
            ) from None
        return loaded if isinstance(loaded, click.Command) else None


def versions() -> list[str]:
    """A line per installed distribution of cron-bridge, each adapter with its queue
    library's version (an adapter's entry point is named after its library)."""
    lines = [f"cron-bridge {version('cron-bridge')}"]
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        dist = point.dist
        shown = f"{dist.name} {dist.version}" if dist is not None else point.value
        with contextlib.suppress(PackageNotFoundError):  # a fourth library's adapter
            shown += f" ({point.name} {version(point.name)})"
        lines.append(shown)
    return lines


def _print_versions(ctx: click.Context, _: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo("\n".join(versions()))
        ctx.exit()


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_versions,
    help="Show the versions of cron-bridge, its adapters and their queue libraries.",
)
@click.option(
    "--log-level",
    default=None,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    help="Default: INFO for beat, WARNING for the other commands.",
)
@click.pass_context
def main(ctx: click.Context, log_level: str | None) -> None:
    """cron-bridge: a cluster-safe beat for Celery, RQ and Dramatiq."""
    level = log_level or ("INFO" if ctx.invoked_subcommand in RUN_BEATS else "WARNING")
    # Every line sanitised (no password, no control character, no forged line), whoever logs.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler])
    # The pool logs every reconnect attempt; the beat already says once that the store is down.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
