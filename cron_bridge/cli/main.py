"""The ``cron-bridge`` command group: the log level, then one of the commands the other
modules of ``cron_bridge.cli`` define (attached in its ``__init__``)."""

from __future__ import annotations

import logging
import sys

import click

__all__ = ["main"]


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
