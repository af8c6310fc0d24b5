"""``cron-bridge pause`` and ``resume``: operator control of jobs across the cluster."""

from __future__ import annotations

import json

import click

from cron_bridge.beat.replica import Beat
from cron_bridge.cli.common import (
    fail,
    load_app,
    one_line_errors,
    open_store,
    optional_app_option,
    store_option,
)
from cron_bridge.cli.names import check_name
from cron_bridge.control import pause as control

__all__ = ["pause", "resume"]

_app = optional_app_option(
    "The module that declares the job, for a name no beat has published to the store yet."
)


@click.command()
@click.argument("name")
@click.option("--reason", default="", help="Why, for the history and the dashboard.")
@_app
@store_option
def pause(name: str, reason: str, app: tuple[str, ...], store: str | None) -> None:
    """Pause a job on every replica: its occurrences are recorded skipped-paused, not run.

    Runs already in flight, and messages already in a queue, are not stopped.
    """
    with one_line_errors():
        opened = open_store(store)
        try:
            check_name(opened, name, app)
            record = control.pause(opened, name, reason=reason, by=control.cli_actor())
        finally:
            opened.close()
    click.echo(json.dumps({"job": name, "paused": record.to_json()}))


@click.command()
@click.argument("name")
@click.option(
    "--catch-up",
    "catch_up",
    is_flag=True,
    help="Also run the latest occurrence the pause held back, once (needs -A).",
)
@_app
@store_option
def resume(name: str, catch_up: bool, app: tuple[str, ...], store: str | None) -> None:
    """Resume a paused job: its next occurrence runs; the paused ones are not caught up
    unless --catch-up asks for the latest of them."""
    if catch_up and not app:
        fail("--catch-up runs the job: give its module with -A (or CRON_BRIDGE_APP)")
    with one_line_errors():
        opened = open_store(store)
        try:
            check_name(opened, name, app)
            if catch_up:
                replica = Beat(opened, load_app(app))
                ended, ran = replica.resume(name, by=control.cli_actor(), catch_up=True)
            else:
                ended, ran = control.resume(opened, name, by=control.cli_actor()), None
        finally:
            opened.close()
    answer = {"job": name, "was_paused": ended.to_json() if ended else None}
    if catch_up:
        answer["caught_up"] = ran.to_json() if ran else None
    click.echo(json.dumps(answer))
