"""``cron-bridge list``: the jobs by name, a page at a time or all of them as they are read.

The names come first and cheaply: the jobs the modules declare, and the stored schedules'
names (their keys, not their records). Sorted, they give the page (``--offset``,
``--limit``); the page is then read a block of ``BLOCK`` jobs at a time, each block in a few
round trips whatever its size (the stored schedules, the pauses and the latest run of its
jobs). A table is printed a block at a time, so the first lines of 100,000 stored schedules
come as fast as those of a hundred; JSON is written whole once read, so that a failure
midway leaves one error line and no half list.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any

import click

from cron_bridge import refusals
from cron_bridge.cli.common import (
    StreamedTable,
    app_option,
    load_app,
    one_line_errors,
    open_existing_store,
    store_option,
    tz_option,
    zoned,
)
from cron_bridge.clock import in_zone
from cron_bridge.control import pause as control
from cron_bridge.control.schedules import StoredSchedules
from cron_bridge.errors import ConfigError
from cron_bridge.jobs import Job
from cron_bridge.queues.installed import imported_adapters
from cron_bridge.schedules import load_zone
from cron_bridge.stores import Store
from cron_bridge.windows import NEVER

__all__ = ["list_jobs", "listed_jobs"]

log = logging.getLogger(__name__)

BLOCK = 500  # jobs read and printed at a time
HEADER = ["NAME", "SCHEDULE", "TIMEZONE", "SCOPE", "TARGET", "NEXT", "LAST"]


@dataclass(frozen=True, slots=True)
class Entry:
    """A job of the listing before it is read: its name, and the job itself when the
    modules declare it (None: a stored schedule, read with its block)."""

    name: str
    job: Job | None
    source: str


@click.command("list")
@app_option
@store_option
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON object per job, in a list.",
)
@click.option(
    "--limit",
    type=click.IntRange(1, None),
    default=None,
    help="At most this many jobs, by name: a page. All of them by default, printed as they "
    "are read.",
)
@click.option(
    "--offset",
    type=click.IntRange(0, None),
    default=0,
    show_default=True,
    help="Skip this many jobs, by name, before the first one listed.",
)
@tz_option
def list_jobs(
    app: tuple[str, ...],
    store: str | None,
    as_json: bool,
    limit: int | None,
    offset: int,
    tz: tzinfo,
) -> None:
    """List the jobs with their schedules, next and last runs: those the modules declare
    (``@cluster_task``, a Celery app's ``beat_schedule``) and the stored schedules, by name."""
    rows: list[dict[str, Any]] = []  # JSON: written whole, so a failure leaves no half list
    table = StreamedTable(HEADER)
    with one_line_errors():
        declared = {job.name: (job, source) for job, source in listed_jobs(load_app(app), app)}
        opened = open_existing_store(store)
        try:
            names, count = _names(declared, opened, None if limit is None else offset + limit)
            # Declarations read from the modules and not run (an rq cron registration RQ
            # refuses) come after the last job, so a job that will never run is seen; pages
            # count them as they count jobs.
            refused = [_refused_row(r) for r in refusals.refused()]
            total = count + len(refused)
            end = total if limit is None else min(total, offset + limit)
            now = datetime.now(UTC)
            for start in range(offset, min(end, len(names)), BLOCK):
                block = [
                    Entry(name, *declared.get(name, (None, "stored")))
                    for name in names[start : min(start + BLOCK, end)]
                ]
                rows_read = _rows(block, opened, now)
                if as_json:
                    rows += [row for _, row in rows_read]
                else:
                    table.add([_table_row(job, row, tz) for job, row in rows_read])
        finally:
            if opened:
                opened.close()
        refused = refused[max(0, offset - count) : max(0, end - count)]
    if as_json:
        click.echo(json.dumps(rows + refused, indent=2))
        return
    table.end()
    if refused:
        click.echo(f"\nRefused declarations ({len(refused)}): not run; the jobs above run.")
        refusals_table = StreamedTable(["DECLARATION", "DECLARED IN", "WHY"])
        refusals_table.add([[row["name"], row["source"], row["refused"]] for row in refused])


def _names(
    declared: Collection[str], store: Store | None, first: int | None
) -> tuple[list[str], int]:
    """The names of the listing, sorted (the first ``first`` of them, or all), and how many
    there are: the jobs the modules declare and the stored schedules, each name once. Plain
    text: an ``Entry`` is made for the jobs of a block, not for every stored schedule."""
    names = sorted(declared)
    if store is None:
        return names[:first], len(names)
    schedules = StoredSchedules(store)
    if first is None:
        stored = schedules.names()
        merged = sorted({*stored, *names}) if names else stored
        return merged, len(merged)
    # A page: the first names of the stored schedules in order, as many as the page reaches
    # (a name the merged list shows among its first ``first`` is among them), and how many.
    stored, stored_count = schedules.first_names(first)
    if len(stored) < min(first, stored_count):
        # The store left out names among the first that no reader takes (more than 1,000
        # bytes, not UTF-8, written past it): their places would go to later names, and to
        # declared ones out of order. Read whole, as a listing of every name does.
        merged, count = _names(declared, store, None)
        return merged[:first], count
    seen = set(stored)
    also_stored = schedules.stored_of([name for name in names if name not in seen])
    merged = sorted({*stored, *names})[:first]
    count = stored_count + sum(1 for name in names if name not in seen and name not in also_stored)
    return merged, count


def _rows(
    block: Sequence[Entry], store: Store | None, now: datetime
) -> list[tuple[Job, dict[str, Any]]]:
    """Each job of a block of entries with its row, in a few round trips: the stored
    schedules among them, then the pauses and the latest run of every job."""
    specs = {}
    if store is not None:
        specs = StoredSchedules(store).get_many([e.name for e in block if e.job is None])
    jobs: list[tuple[Job, str]] = []
    for entry in block:
        if entry.job is not None:
            jobs.append((entry.job, entry.source))
            continue
        spec = specs.get(entry.name)  # None: removed since, or unreadable (logged)
        if spec is None:
            continue
        try:
            jobs.append((spec.job(), "stored"))
        except ConfigError as exc:  # left out, as the beat leaves it out
            log.warning("stored schedule %s is not run: %s", entry.name, exc)
    names = [job.name for job, _ in jobs]
    paused = control.pauses_of(store, names) if store is not None else {}
    latest = store.latest_runs(names) if store is not None else {}
    shown_as = _as_listed(store, [job for job, _ in jobs])
    rows = []
    for job, source in jobs:
        as_listed = shown_as.get(job.name)
        note = as_listed if isinstance(as_listed, str) else None
        last = latest.get(job.name)
        pause = paused.get(job.name)
        target = _target(job)
        rows.append(
            (
                job,
                {
                    "name": job.name,
                    "schedule": job.schedule.describe(),
                    "timezone": job.schedule.tz,
                    "scope": job.scope,
                    "target": f"stored:{target}" if source == "stored" else target,
                    "source": source,
                    "next": None if note else _next_run(_or(as_listed, job), now),
                    "last": last.to_json() if last else None,
                    "paused": pause.to_json() if pause else None,
                    **({"next_note": note} if note else {}),
                },
            )
        )
    return rows


def _table_row(job: Job, row: dict[str, Any], tz: tzinfo) -> list[str]:
    last = row["last"]
    shown_last = (
        f"{zoned(datetime.fromisoformat(last['started_at']), tz)} {last['outcome']} "
        f"{last['replica']}"
        if last
        else "-"
    )
    return [
        row["name"],
        row["schedule"],
        row["timezone"],
        row["scope"],
        row["target"],
        _shown_next(job, row),
        shown_last,
    ]


def _refused_row(refusal: refusals.Refusal) -> dict[str, Any]:
    return {
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


def _shown_next(job: Job, row: dict[str, Any]) -> str:
    """NEXT: ``paused``, the time, the adapter's note, or without a time ``on-demand`` or
    ``none`` (a one-off that ran, an ``end`` that passed)."""
    if row["paused"]:
        return "paused"
    return row["next"] or row.get("next_note") or ("on-demand" if job.on_demand else "none")


def _as_listed(store: Store | None, jobs: list[Job]) -> dict[str, Job | str]:
    """How the adapters show some of their jobs in a listing (``as_listed``): an ``rq cron``
    interval registration anchored where the store keeps its anchor, or a note for NEXT."""
    found: dict[str, Job | str] = {}
    for adapter in imported_adapters():
        found.update(adapter.as_listed(store, jobs))
    return found


def _or(shown: Job | str | None, job: Job) -> Job:
    return shown if isinstance(shown, Job) else job


def listed_jobs(jobs: list[Job], modules: tuple[str, ...]) -> list[tuple[Job, str]]:
    """The jobs of the modules with where each was declared: ``code`` (``@cluster_task``), or
    the queue library's own schedule (an adapter's ``declared_in``, e.g. ``beat_schedule``)."""
    found = [(job, "code") for job in jobs]
    loaded = [sys.modules[name] for name in modules if name in sys.modules]
    names = {job.name for job in jobs}
    for adapter in imported_adapters():
        for job in adapter.declared_in(loaded):
            if job.name not in names:
                names.add(job.name)
                found.append((job, adapter.declared_as))
    return found


def _next_run(job: Job, now: datetime) -> str | None:
    """ISO time of the next occurrence in the job's zone, with its UTC offset (what a person
    thinks in: ``0 3 * * *`` in Warsaw is 03:00+01:00, not 02:00); None for an on-demand
    job or one with none left."""
    upcoming = None if job.on_demand else job.schedule.next_after(now)
    if upcoming is None or upcoming >= NEVER:
        return None
    return in_zone(upcoming, load_zone(str(job.schedule.tz))).isoformat(timespec="seconds")


def _target(job: Job) -> str:
    return "inline" if job.target == "inline" else f"{job.adapter}:{job.queue or 'default'}"
