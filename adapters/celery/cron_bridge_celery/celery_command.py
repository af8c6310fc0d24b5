"""``celery cron-bridge-check`` (hidden): what Celery's ``celery.commands`` entry point names,
so that Celery loads ``cron_bridge_celery.worker_check`` into every ``celery`` command and the
check of a worker's embedded beat runs whether or not the app imports cron-bridge."""

from __future__ import annotations

import click

from cron_bridge_celery import worker_check

__all__ = ["command"]


@click.command("cron-bridge-check", hidden=True)
def command() -> None:
    """Say how cron-bridge checks a worker's embedded beat."""
    click.echo(
        "cron-bridge checks the embedded beat of every celery worker at start "
        f"({', '.join(worker_check.SCHEDULERS)} are its schedulers); {worker_check.FIX}"
    )
