"""What every page of the scheduler panel shares: which namespace it shows (``View``), its
header, a job's drawn occurrences, zone and next run, and links that keep the namespace."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode

from cron_bridge.control import catalog
from cron_bridge.control.catalog import JobInfo
from cron_bridge.http import charts
from cron_bridge.http.html import Markup, html, join
from cron_bridge.http.layout import when
from cron_bridge.plumbing.keys import lock_key
from cron_bridge.schedules import load_zone
from cron_bridge.stores.base import Store
from cron_bridge.stores.records import RunRecord
from cron_bridge.windows import NEVER

if TYPE_CHECKING:
    from cron_bridge.beat.replica import Beat
    from cron_bridge.jobs import Job, Occurrence

__all__ = [
    "RECORDS_PER_STRIP",
    "STRIP_OCCURRENCES",
    "View",
    "header",
    "last_run",
    "link",
    "marks_of",
    "marks_of_many",
    "next_run",
    "zone_of",
]

STRIP_OCCURRENCES = 50
# Records read for a job's strip: its occurrences' records from every replica and attempt.
RECORDS_PER_STRIP = 300


def last_run(records: Iterable[RunRecord]) -> RunRecord | None:
    """The latest record of a run (the winner's, not another replica's skipped-claimed)."""
    for record in records:
        if record.outcome != "skipped-claimed":
            return record
    return None


@dataclass(frozen=True, slots=True)
class View:
    """Which namespace a page shows: the serving beat's own (``name`` None: its jobs, with
    run-now and pause buttons) or another one, read from its store (jobs from its catalog,
    read-only)."""

    beat: Beat
    stores: Mapping[str, Store]
    name: str | None = None

    @property
    def store(self) -> Store:
        return self.beat.store if self.name is None else self.stores[self.name]

    def query(self, first: bool = True) -> str:
        if self.name is None:
            return ""
        return f"{'?' if first else '&'}ns={quote(self.name, safe='')}"

    def names(self) -> list[str]:
        """Every job's name, sorted: the beat's own, or another namespace's catalog."""
        if self.name is None:
            return sorted(job.name for job in self.beat.jobs())
        return sorted(catalog.read(self.store))

    def job(self, name: str) -> Job | None:
        """The job ``name`` of the serving beat (None for another namespace's)."""
        return self.beat.job(name) if self.name is None else None

    def infos(self, names: Sequence[str]) -> list[tuple[JobInfo, Job | None]]:
        """Each of ``names`` that is a job, with what a page shows of it: a job of the beat
        from its declaration, another namespace's from its catalog in one read."""
        if self.name is None:
            today = datetime.now(UTC).date().isoformat()
            stored = self.beat.stored_jobs
            found: list[tuple[JobInfo, Job | None]] = []
            for name in names:
                job = self.beat.job(name)
                if job is not None:
                    info = JobInfo.of(job, today)
                    if name in stored:  # marked as the CLI's list marks it
                        info = replace(info, target=f"stored:{info.target}")
                    found.append((info, job))
            return found
        entries = self.store.controls_of(catalog.GROUP, list(names))
        parsed = (JobInfo.parse(name, entries[name]) for name in names if name in entries)
        return [(info, None) for info in parsed if info is not None]

    def jobs(self) -> list[tuple[JobInfo, Job | None]]:
        """Every job with what a page shows of it (``infos`` of every name)."""
        if self.name is None:
            return self.infos(self.names())
        return [(info, None) for info in catalog.read(self.store).values()]


def header(view: View, path: str, csrf: str, now: datetime) -> Markup:
    """The top of every page: the way home, who serves it and what store it shows, the
    namespace selector (when there are others) and "Sign out"."""
    beat = view.beat
    selector = Markup()
    if view.stores:
        options = join(
            html(
                '<option value="{}"{}>{}</option>',
                name,
                Markup(" selected" if name == view.name else ""),
                name,
            )
            for name in sorted(view.stores)
        )
        selector = html(
            """<form class=inline method=get action="{}/" id=namespace>
  <label>Namespace <select name=ns><option value="">this beat's</option>{}</select></label>
  <button type=submit>Show</button></form>""",
            path,
            options,
        )
    shown = view.store.url if view.name is None else f"{view.name}: {view.store.url}"
    return html(
        """
<header>
  <div><h1><a href="{path}/{query}">cron-bridge</a></h1>
  <span class=muted>served by replica <code>{replica}</code>, showing
  <code>{shown}</code>, {now} UTC</span></div>
  <div>{selector}
  <form class=inline method=post action="{path}/logout">
    <input type=hidden name=csrf value="{csrf}"><button type=submit>Sign out</button></form></div>
</header>""",
        path=path,
        query=view.query(),
        replica=beat.replica_id,
        shown=shown,
        now=now.strftime("%H:%M:%S"),
        selector=selector,
        csrf=csrf,
    )


def marks_of(
    store: Store,
    name: str,
    job: Job | None,
    now: datetime,
    *,
    after_newest: bool = False,
    records: int = RECORDS_PER_STRIP,
    limit: int = STRIP_OCCURRENCES,
) -> tuple[list[RunRecord], list[charts.Mark]]:
    """A job's newest ``records`` and its last ``limit`` occurrences as drawn (running ones
    included, and, for a scheduled cluster job of this namespace, the ones no record names,
    from their claims: one more read, only when there are such occurrences).
    ``after_newest``: only those due after its newest recorded one (the overview, which draws
    every job)."""
    return marks_of_many(
        store, [(name, job)], now, after_newest=after_newest, records=records, limit=limit
    )[name]


def marks_of_many(
    store: Store,
    jobs: Sequence[tuple[str, Job | None]],
    now: datetime,
    *,
    after_newest: bool = False,
    records: int = RECORDS_PER_STRIP,
    limit: int = STRIP_OCCURRENCES,
) -> dict[str, tuple[list[RunRecord], list[charts.Mark]]]:
    """``marks_of`` for a page of jobs in a few round trips whatever their number: their
    histories in one, their locks in one, and the claims of the occurrences no record names,
    of every job at once, in one more when there are such."""
    names = [name for name, _ in jobs]
    histories = store.histories(names, records)
    holders = store.holders([lock_key(name) for name in names])
    drawn: dict[str, tuple[list[RunRecord], list[charts.Mark]]] = {}
    unrecorded: dict[str, tuple[Job, list[Occurrence]]] = {}
    for (name, job), holder in zip(jobs, holders, strict=True):
        found_records = histories.get(name, [])
        found = charts.marks(found_records, charts.parse_holder(name, holder), limit=limit)
        drawn[name] = (found_records, found)
        if job is None or job.on_demand or not job.is_cluster:
            continue
        missing = charts.unrecorded(
            found, found_records, job.schedule, name, now, limit=limit, after_newest=after_newest
        )
        if missing:
            unrecorded[name] = (job, missing)
    asked = [occurrence for _, missing in unrecorded.values() for occurrence in missing]
    owners = iter(store.claimed_by_many(asked) if asked else [])
    for name, (job, missing) in unrecorded.items():
        found_records, found = drawn[name]
        mine = [next(owners) for _ in missing]
        found += charts.unrecorded_marks(missing, mine, now, job.misfire_grace, job.fire_at)
        drawn[name] = (found_records, sorted(found, key=lambda m: m.scheduled_at)[-limit:])
    return drawn


def zone_of(info: JobInfo) -> tzinfo:
    """The job's zone, for its own times (UTC when the catalog names none we know)."""
    try:
        return load_zone(info.tz)
    except Exception:  # noqa: BLE001 - another namespace's catalog is untrusted text
        return UTC


def next_run(coming: datetime | None, now: datetime, paused: bool, zone: tzinfo) -> Markup:
    """A job's next run in its zone: ``paused``, ``on demand`` (``coming`` None) or ``none``
    left."""
    if paused:
        return Markup("<span class=skipped-paused>paused</span>")
    if coming is None:
        return Markup("on demand")
    return Markup("<span class=muted>none</span>") if coming >= NEVER else when(coming, now, zone)


def link(path: str, view: View, **params: str | int) -> str:
    """A link to the dashboard at ``path`` with ``params`` (empty ones left out), keeping the
    namespace."""
    query = {k: str(v) for k, v in params.items() if v not in ("", None, "all", 1)}
    if view.name is not None:
        query["ns"] = view.name
    return f"{path}?{urlencode(query)}" if query else path
