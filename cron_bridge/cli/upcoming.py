"""``cron-bridge next JOB``: the next occurrences of a job in its zone, with the ones daylight
saving time moves or repeats marked."""

from __future__ import annotations

import difflib
import json
from datetime import UTC, datetime

import click

from cron_bridge.cli.common import (
    fail,
    load_app,
    one_line_errors,
    open_existing_store,
    optional_app_option,
    print_table,
    say,
    store_option,
)
from cron_bridge.cli.names import check_name
from cron_bridge.control.schedules import StoredSchedules
from cron_bridge.errors import ConfigError
from cron_bridge.jobs import Job
from cron_bridge.windows import upcoming

__all__ = ["next_runs"]


def _job(name: str, app: tuple[str, ...], store: str | None) -> Job:
    """The job: from ``app``, else the stored schedule of the name; an unknown name is one
    line with the closest known names."""
    declared = {job.name: job for job in load_app(app)} if app else {}
    if name in declared:
        return declared[name]
    opened = open_existing_store(store)
    if opened is None:
        close = difflib.get_close_matches(name, declared, n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
        where = f" in {' '.join(app)}" if app else ": give the module that declares it with -A"
        fail(f"no job called {name!r}{hint}{where}")
    try:
        spec = StoredSchedules(opened).get(name)
        if spec is not None:
            return spec.job()
        check_name(opened, name, app)  # unknown: one line with the closest names
    finally:
        opened.close()
    fail(f"{name!r} is declared in code: give its module with -A to read its schedule")


@click.command("next")
@click.argument("name")
@click.option(
    "-n",
    "count",
    default=10,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="How many occurrences.",
)
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
@optional_app_option("The module that declares the job (else the stored schedule of the name).")
@store_option
def next_runs(
    name: str, count: int, as_json: bool, app: tuple[str, ...], store: str | None
) -> None:
    """List a job's next occurrences in its zone (with the UTC time), marking those daylight
    saving time moves or repeats."""
    with one_line_errors():
        job = _job(name, app, store)
        rows = [
            {
                "at": u.local.isoformat(timespec="seconds"),
                "utc": u.at.isoformat(timespec="seconds"),
                "note": u.note,
            }
            for u in upcoming(job.schedule, datetime.now(UTC), count)
        ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        raise ConfigError(
            "no occurrence left (a one-off that ran, an end that passed)",
            job=name,
            option="schedule",
            value=job.schedule.describe(),
        )
    say(f"{name}: {job.schedule.describe()} in {job.schedule.tz}")
    print_table([["OCCURRENCE", "UTC", "NOTE"]] + [[r["at"], r["utc"], r["note"]] for r in rows])
