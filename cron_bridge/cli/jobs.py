"""``cron-bridge run`` and ``history``: a run now, what the store says of a job."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime, tzinfo

import click

from cron_bridge.beat.replica import Beat
from cron_bridge.cli.common import (
    EXIT_FAILED,
    app_option,
    fail,
    load_app,
    one_line_errors,
    open_existing_store,
    open_store,
    optional_app_option,
    print_table,
    say,
    store_option,
    tz_option,
    zoned,
)
from cron_bridge.cli.listing import listed_jobs
from cron_bridge.cli.names import check_name
from cron_bridge.control import catalog, lost_claims
from cron_bridge.control import pause as control
from cron_bridge.control.audit import Audit, OccurrenceReport, audit, occurrence_report
from cron_bridge.control.schedules import StoredSchedules
from cron_bridge.errors import ConfigError
from cron_bridge.jobs import Job, Occurrence
from cron_bridge.schedules import Schedule, parse_duration
from cron_bridge.stores import RunRecord, Store

__all__ = ["history", "run"]

log = logging.getLogger(__name__)


@click.command()
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


@click.command()
@click.argument("name")
@store_option
@click.option(
    "-n",
    "--limit",
    "count",
    default=20,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="How many runs (or changes), newest first: a page.",
)
@click.option(
    "--offset",
    default=0,
    show_default=True,
    type=click.IntRange(0, 100_000),
    help="Skip this many of the newest runs (or changes) before the page.",
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
@tz_option
def history(
    name: str,
    store: str | None,
    count: int,
    offset: int,
    as_json: bool,
    occurrence_id: str | None,
    audit_window: bool,
    changes: bool,
    since: str,
    grace: str,
    app: tuple[str, ...],
    tz: tzinfo,
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
        # The app's jobs as `list -A` shows them: a drop-in's entries (beat_schedule) too.
        listed = listed_jobs(load_app(app), app) if audit_window and app else []
        jobs = {job.name: job for job, _ in listed}
        opened = open_existing_store(store)
        if opened is None:
            fail("no store: give --store or set CRON_BRIDGE_STORE")
        try:
            check_name(opened, name, app, records=True)
            if changes:
                _show_changes(control.changes(opened, name)[offset : offset + count], as_json, tz)
                return
            if occurrence_id is not None:
                _show_occurrence(occurrence_report(opened, occurrence), as_json, tz)
                return
            if audit_window:
                schedule = _audited_schedule(opened, name, jobs, app)
                now = datetime.now(UTC)
                found = audit(
                    opened,
                    name,
                    now - window[0],
                    now - window[1],
                    schedule,
                    first_seen=catalog.first_seen(opened, name),
                )
                _show_audit(found, as_json)
                sys.exit(0 if found.clean else EXIT_FAILED)
            # Every record kept, then the page: a page is then a slice of one list, whatever
            # was recorded late or cannot be read (history_limit bounds the read).
            kept = lost_claims.history(opened, name, max(offset + count, opened.history_limit))
            records = kept[offset : offset + count]
        finally:
            opened.close()
    if as_json:
        click.echo(json.dumps([r.to_json() for r in records], indent=2))
        return
    print_table(_record_rows(records, tz))


def _audited_schedule(
    store: Store, name: str, jobs: dict[str, Job], app: tuple[str, ...]
) -> Schedule | None:
    """The schedule ``--audit`` holds the records against: the job's in ``-A``, else the
    stored schedule's of that name; None (records alone) without either."""
    if name in jobs:
        return jobs[name].schedule
    spec = StoredSchedules(store).get(name)
    if spec is not None:
        try:
            return spec.job().schedule
        except ConfigError as exc:
            log.warning("the stored schedule %s cannot be read: %s", name, exc)
    if app:
        fail(f"no job called {name!r} in {' '.join(app)} or among the stored schedules")
    return None


def _show_changes(found: list[control.Change], as_json: bool, tz: tzinfo) -> None:
    if as_json:
        click.echo(json.dumps([change.to_json() for change in found], indent=2))
        return
    rows = [["AT", "ACTION", "BY", "REASON"]]
    rows += [[zoned(c.at, tz), c.action, c.by, c.reason] for c in found]
    print_table(rows)


def _record_rows(records: list[RunRecord], tz: tzinfo) -> list[list[str]]:
    rows = [["OCCURRENCE", "OUTCOME", "TRIGGER", "ATTEMPT", "REPLICA", "STARTED", "MS", "DETAIL"]]
    for r in records:
        rows.append(
            [
                r.occurrence_id,
                r.outcome,
                r.trigger,
                str(r.attempt),
                r.replica,
                zoned(r.started_at, tz, "milliseconds"),
                "" if r.duration_ms is None else f"{r.duration_ms:.0f}",
                r.error or r.reason or "",
            ]
        )
    return rows


def _show_occurrence(report: OccurrenceReport, as_json: bool, tz: tzinfo) -> None:
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
        return
    say(f"occurrence  {report.occurrence_id}")
    say(f"due         {zoned(report.scheduled_at, tz)}")
    say(f"claimed by  {report.claimed_by or '- (no claim kept: never claimed, or expired)'}")
    say(f"final       {report.final}")
    if report.records:
        click.echo("")
        print_table(_record_rows(report.records, tz))
    for record in report.records:  # oldest attempt first, as they happened
        if record.traceback:
            click.echo("")
            say(f"attempt {record.attempt} on {record.replica}, {zoned(record.started_at, tz)}:")
            say(record.traceback.rstrip("\n"), lines=True)


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
    if found.first_seen is not None:
        click.echo(
            f"first declared by a replica at {found.first_seen.isoformat()[:19]} UTC: "
            "the occurrences due before it are left out"
        )
    header = ["OCCURRENCES", "COMPLETED ONCE", "NEVER COMPLETED", "MORE THAN ONCE"]
    counts = [found.occurrences, found.once, len(found.never), len(found.more)]
    if found.sent:  # plain tasks: their workers record no completion
        header.insert(2, "SENT (PLAIN TASK)")
        counts.insert(2, found.sent)
    print_table([[*header, "BEYOND HISTORY"], [str(n) for n in [*counts, found.beyond_history]]])
    for occurrence_id, why in list(found.why.items())[:20]:
        say(f"never completed: {occurrence_id}: {why}")
    for occurrence_id, times in list(found.more.items())[:20]:
        click.echo(f"completed {times} times: {occurrence_id}")
    if found.sent:
        click.echo(
            f"{found.sent} occurrence(s) sent; completion not recorded (plain task: a "
            "drop-in's task runs without the guard, so no worker records its run)"
        )
    if found.beyond_history:
        click.echo(
            f"{found.beyond_history} occurrence(s) are older than the records the store keeps "
            "(history_limit): not judged"
        )
