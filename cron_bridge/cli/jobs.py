"""``cron-bridge list``, ``run`` and ``history``: the jobs, a run now, what the store says."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime, tzinfo
from typing import Any

import click

from cron_bridge import refusals
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
from cron_bridge.cli.names import check_name
from cron_bridge.clock import in_zone
from cron_bridge.control import catalog, lost_claims
from cron_bridge.control import pause as control
from cron_bridge.control.audit import Audit, OccurrenceReport, audit, occurrence_report
from cron_bridge.control.schedules import StoredSchedules
from cron_bridge.errors import ConfigError
from cron_bridge.jobs import Job, Occurrence
from cron_bridge.queues.installed import installed_adapters
from cron_bridge.schedules import Schedule, load_zone, parse_duration
from cron_bridge.stores import RunRecord, Store
from cron_bridge.windows import NEVER

__all__ = ["history", "list_jobs", "run"]

log = logging.getLogger(__name__)


@click.command("list")
@app_option
@store_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per job, in a list.")
@tz_option
def list_jobs(app: tuple[str, ...], store: str | None, as_json: bool, tz: tzinfo) -> None:
    """List the jobs with their schedules, next and last runs: those the modules declare
    (``@cluster_task``, a Celery app's ``beat_schedule``) and the stored schedules."""
    with one_line_errors():
        sources = _listed_jobs(load_app(app), app)
        opened = open_existing_store(store)
        try:
            if opened is not None:
                sources += _stored_jobs(opened, {job.name for job, _ in sources})
            now = datetime.now(UTC)
            rows: list[dict[str, Any]] = []
            paused = control.paused(opened) if opened else {}
            shown_as = _as_listed(opened, [job for job, _ in sources])
            for job, source in sorted(sources, key=lambda pair: pair[0].name):
                as_listed = shown_as.get(job.name)
                note = as_listed if isinstance(as_listed, str) else None
                last = opened.history(job.name, 1) if opened else []
                pause = paused.get(job.name)
                target = _target(job)
                rows.append(
                    {
                        "name": job.name,
                        "schedule": job.schedule.describe(),
                        "timezone": job.schedule.tz,
                        "scope": job.scope,
                        "target": f"stored:{target}" if source == "stored" else target,
                        "source": source,
                        "next": None if note else _next_run(_or(as_listed, job), now),
                        "last": last[0].to_json() if last else None,
                        "paused": pause.to_json() if pause else None,
                        **({"next_note": note} if note else {}),
                    }
                )
        finally:
            if opened:
                opened.close()
        jobs = [job for job, _ in sources]
        # Declarations read from the modules and not run (an rq cron registration RQ
        # refuses): listed, so a job that will never run is seen, not just logged.
        for refusal in refusals.refused():
            rows.append(
                {
                    "name": refusal.name,
                    "schedule": "-",
                    "timezone": "-",
                    "scope": "-",
                    "target": "-",
                    "source": refusal.source,
                    "next": None,
                    "last": None,
                    "paused": None,
                    "refused": refusal.reason,
                }
            )
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = [["NAME", "SCHEDULE", "TIMEZONE", "SCOPE", "TARGET", "NEXT", "LAST"]]
    for row in rows:
        if row.get("refused"):
            continue  # in a table of their own: a refusal's name may be a running job's
        last = row["last"]
        shown_last = (
            f"{zoned(datetime.fromisoformat(last['started_at']), tz)} {last['outcome']} "
            f"{last['replica']}"
            if last
            else "-"
        )
        table.append(
            [
                row["name"],
                row["schedule"],
                row["timezone"],
                row["scope"],
                row["target"],
                _shown_next(row, jobs),
                shown_last,
            ]
        )
    print_table(table)
    refused = [["DECLARATION", "DECLARED IN", "WHY"]]
    refused += [[row["name"], row["source"], row["refused"]] for row in rows if row.get("refused")]
    if len(refused) > 1:
        click.echo(f"\nRefused declarations ({len(refused) - 1}): not run; the jobs above run.")
        print_table(refused)


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
    "count",
    default=20,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="How many runs, newest first.",
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
        listed = _listed_jobs(load_app(app), app) if audit_window and app else []
        jobs = {job.name: job for job, _ in listed}
        opened = open_existing_store(store)
        if opened is None:
            fail("no store: give --store or set CRON_BRIDGE_STORE")
        try:
            check_name(opened, name, app, records=True)
            if changes:
                _show_changes(control.changes(opened, name)[:count], as_json, tz)
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
            records = lost_claims.history(opened, name, count)
        finally:
            opened.close()
    if as_json:
        click.echo(json.dumps([r.to_json() for r in records], indent=2))
        return
    print_table(_record_rows(records, tz))


def _shown_next(row: dict[str, Any], jobs: list[Job]) -> str:
    if row["paused"]:
        return "paused"
    return row["next"] or row.get("next_note") or _no_next(jobs, row["name"])


def _as_listed(store: Store | None, jobs: list[Job]) -> dict[str, Job | str]:
    """How the adapters show some of their jobs in a listing (``as_listed``): an ``rq cron``
    interval registration anchored where the store keeps its anchor, or a note for NEXT."""
    found: dict[str, Job | str] = {}
    for adapter in installed_adapters():
        found.update(adapter.as_listed(store, jobs))
    return found


def _or(shown: Job | str | None, job: Job) -> Job:
    return shown if isinstance(shown, Job) else job


def _listed_jobs(jobs: list[Job], modules: tuple[str, ...]) -> list[tuple[Job, str]]:
    """The jobs of the modules with where each was declared: ``code`` (``@cluster_task``), or
    the queue library's own schedule (an adapter's ``declared_in``, e.g. ``beat_schedule``)."""
    found = [(job, "code") for job in jobs]
    loaded = [sys.modules[name] for name in modules if name in sys.modules]
    names = {job.name for job in jobs}
    for adapter in installed_adapters():
        for job in adapter.declared_in(loaded):
            if job.name not in names:
                names.add(job.name)
                found.append((job, adapter.declared_as))
    return found


def _stored_jobs(store: Store, declared: set[str]) -> list[tuple[Job, str]]:
    """The stored schedules a beat would run beside ``declared`` (a name declared in code
    wins), as jobs; one that cannot be read is left out, as the beat leaves it out."""
    found = []
    for name, spec in StoredSchedules(store).list().items():
        if name in declared:
            continue
        try:
            found.append((spec.job(), "stored"))
        except ConfigError as exc:
            log.warning("stored schedule %s is not run: %s", name, exc)
    return found


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


def _next_run(job: Job, now: datetime) -> str | None:
    """ISO time of the next occurrence in the job's zone, with its UTC offset (what a person
    thinks in: ``0 3 * * *`` in Warsaw is 03:00+01:00, not 02:00); None for an on-demand
    job or one with none left."""
    upcoming = None if job.on_demand else job.schedule.next_after(now)
    if upcoming is None or upcoming >= NEVER:
        return None
    return in_zone(upcoming, load_zone(str(job.schedule.tz))).isoformat(timespec="seconds")


def _no_next(jobs: list[Job], name: str) -> str:
    """What NEXT says without a time: ``on-demand``, or ``none`` (a one-off that ran, an
    ``end`` that passed)."""
    return "on-demand" if any(job.on_demand for job in jobs if job.name == name) else "none"


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


def _target(job: Job) -> str:
    return "inline" if job.target == "inline" else f"{job.adapter}:{job.queue or 'default'}"
