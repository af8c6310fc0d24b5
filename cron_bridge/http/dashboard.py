"""The scheduler panel: server-rendered HTML, no build step, readable on a phone.

Every page is built from the beat's jobs and what the store says: the jobs with their
schedule, next run and last run anywhere in the cluster; the live replicas from their
heartbeats; the recent runs of a job with a "run now" button that goes through the normal
trigger. Without JavaScript it is plain HTML; with it, the page reloads itself every few
seconds while nobody is typing.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from html import escape
from typing import TYPE_CHECKING
from urllib.parse import quote

from cron_bridge.control import aside, catalog
from cron_bridge.control import pause as control
from cron_bridge.control.catalog import JobInfo
from cron_bridge.http import strips
from cron_bridge.keys import lock_key
from cron_bridge.stores.base import RunRecord, Store
from cron_bridge.windows import NEVER

if TYPE_CHECKING:
    from cron_bridge.beat.replica import Beat
    from cron_bridge.jobs import Job

__all__ = ["View", "job_page", "login_page", "overview_page"]

REFRESH_SECONDS = 5
STRIP_OCCURRENCES = 50
# Records read for a job's strip: its occurrences' records from every replica and attempt.
_RECORDS_PER_STRIP = 300

_STYLE = """
:root { color-scheme: light dark; --muted: #6b7280; --line: #d1d5db; --ok: #15803d;
        --bad: #b91c1c; --warn: #a16207; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto;
       max-width: 72rem; padding: 1rem; }
h1 { font-size: 1.3rem; margin: 0 0 .25rem; } h2 { font-size: 1.05rem; margin: 1.5rem 0 .5rem; }
header { display: flex; flex-wrap: wrap; gap: .5rem 1rem; align-items: baseline;
         justify-content: space-between; }
.muted { color: var(--muted); }
.scroll { overflow-x: auto; -webkit-overflow-scrolling: touch; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .35rem .5rem; border-bottom: 1px solid var(--line);
         vertical-align: top; }
th { font-weight: 600; font-size: .85rem; }
td { overflow-wrap: break-word; } td code { overflow-wrap: anywhere; }
.nowrap { white-space: nowrap; }
code { font-size: .85em; overflow-wrap: anywhere; }
.completed, .enqueued { color: var(--ok); } .failed, .aborted { color: var(--bad); }
.skipped-overlap, .skipped-completed, .skipped-paused, .missed { color: var(--warn); }
.running { color: #2563eb; }
.paused { border-left: 4px solid var(--warn); padding-left: .5rem; }
form.inline { display: inline; }
button { font: inherit; padding: .4rem .9rem; border-radius: .4rem; border: 1px solid var(--line);
         cursor: pointer; }
input[type=password] { font: inherit; padding: .4rem; width: 100%; max-width: 22rem; }
.flash { padding: .6rem .8rem; border: 1px solid var(--line); border-radius: .4rem;
         margin: .75rem 0; }
.m { fill: #9ca3af; } .m.completed { fill: #16a34a; } .m.running { fill: #2563eb; }
.m.queued { fill: #93c5fd; } .m.failed, .m.aborted { fill: #dc2626; }
.m.missed { fill: #ea580c; } .m.skipped-overlap { fill: #ca8a04; } .m.paused { fill: #7c3aed; }
.m.unrecorded { fill: #7f1d1d; }
svg.strip { display: block; max-width: 100%; height: auto; margin-top: .25rem; }
.legend { font-size: .8rem; color: var(--muted); display: flex; flex-wrap: wrap; gap: .2rem .8rem; }
figure.chart { margin: .5rem 0 1rem; max-width: 36rem; }
figure.chart svg { width: 100%; height: auto; } figcaption { font-size: .85rem; }
.axis { font-size: 9px; fill: var(--muted); } .axis-line { stroke: var(--line); }
select { font: inherit; padding: .3rem; }
@media (max-width: 40rem) { .wide { display: none; } body { padding: .6rem; } }
"""

_REFRESH = f"""
<script>
  // Reload every {REFRESH_SECONDS} s, unless someone is typing in a form.
  setInterval(() => {{
    const active = document.activeElement;
    if (!active || !["INPUT", "TEXTAREA"].includes(active.tagName)) location.reload();
  }}, {REFRESH_SECONDS * 1000});
</script>
"""


def _page(title: str, body: str, *, refresh: bool) -> str:
    return (
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body>{body}{_REFRESH if refresh else ''}</body></html>"
    )


def _when(value: datetime | None, now: datetime) -> str:
    if value is None:
        return "-"
    seconds = (value - now).total_seconds()
    shown = value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    ago = _span(abs(seconds))
    relative = f"in {ago}" if seconds > 0 else f"{ago} ago"
    return (
        f'<time datetime="{value.isoformat()}">{shown}</time> <span class=muted>({relative})</span>'
    )


def _span(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f}m"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def _last_run(records: Iterable[RunRecord]) -> RunRecord | None:
    """The latest record of a run (the winner's, not another replica's skipped-claimed)."""
    for record in records:
        if record.outcome != "skipped-claimed":
            return record
    return None


def login_page(path: str, *, wrong: bool = False) -> str:
    """The form that asks for the secret; it shows nothing of the jobs."""
    message = '<p class="flash failed" role=alert>Wrong secret.</p>' if wrong else ""
    body = f"""
<h1>cron-bridge</h1>
<p class=muted>Sign in with the beat's secret (<code>--secret</code> or
<code>CRON_BRIDGE_SECRET</code>).</p>
{message}
<form method=post action="{escape(path)}/login">
  <p><label for=secret>Secret</label><br>
  <input type=password id=secret name=secret autocomplete=current-password required autofocus></p>
  <p><button type=submit>Sign in</button></p>
</form>"""
    return _page("cron-bridge: sign in", body, refresh=False)


def not_found_page(path: str, what: str, known: Iterable[str]) -> str:
    """The dashboard's 404: what was not found, the closest job names, a way back."""
    close = difflib.get_close_matches(what, list(known), n=3, cutoff=0.6)
    links = "".join(
        f'<li><a href="{escape(path)}/jobs/{quote(name, safe="")}">{escape(name)}</a></li>'
        for name in close
    )
    hint = f"<p>Did you mean:</p><ul>{links}</ul>" if close else ""
    body = f"""
<h1>No job called {escape(repr(what))}</h1>
{hint}
<p><a href="{escape(path)}/">All jobs</a></p>"""
    return _page("cron-bridge: not found", body, refresh=False)


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

    def jobs(self) -> list[tuple[JobInfo, Job | None]]:
        if self.name is None:
            today = datetime.now(UTC).date().isoformat()
            stored = self.beat.stored_jobs
            found = [(JobInfo.of(job, today), job) for job in self.beat.jobs()]
            # Marked as the CLI's list marks them: a schedule kept in the store, not in code.
            return [(replace(info, target=f"stored:{info.target}") if info.name in stored
                     else info, job) for info, job in found]  # fmt: skip
        return [(info, None) for info in catalog.read(self.store).values()]


def _header(view: View, path: str, csrf: str, now: datetime) -> str:
    beat = view.beat
    selector = ""
    if view.stores:
        options = "".join(
            f'<option value="{escape(name)}"{" selected" if name == view.name else ""}>'
            f"{escape(name)}</option>"
            for name in sorted(view.stores)
        )
        selector = f"""<form class=inline method=get action="{escape(path)}/" id=namespace>
  <label>Namespace <select name=ns><option value="">this beat's</option>{options}</select></label>
  <button type=submit>Show</button></form>"""
    shown = view.store.url if view.name is None else f"{view.name}: {view.store.url}"
    return f"""
<header>
  <div><h1><a href="{escape(path)}/{view.query()}">cron-bridge</a></h1>
  <span class=muted>served by replica <code>{escape(beat.replica_id)}</code>, showing
  <code>{escape(shown)}</code>, {now.strftime("%H:%M:%S")} UTC</span></div>
  <div>{selector}
  <form class=inline method=post action="{escape(path)}/logout">
    <input type=hidden name=csrf value="{csrf}"><button type=submit>Sign out</button></form></div>
</header>"""


def _marks(
    store: Store, name: str, job: Job | None, now: datetime, *, after_newest: bool = False
) -> tuple[list[RunRecord], list[strips.Mark]]:
    """A job's newest records and its last occurrences as drawn (running ones included, and,
    for a scheduled cluster job of this namespace, the ones no record names, from their
    claims: one more read, only when there are such occurrences). ``after_newest``: only
    those due after its newest recorded one (the overview, which draws every job)."""
    records = store.history(name, _RECORDS_PER_STRIP)
    running = strips.parse_holder(name, store.holder(lock_key(name)))
    found = strips.marks(records, running, limit=STRIP_OCCURRENCES)
    if job is None or job.external or not job.is_cluster:
        return records, found
    missing = strips.unrecorded(found, records, job.schedule, name, now,
                                limit=STRIP_OCCURRENCES, after_newest=after_newest)  # fmt: skip
    if missing:
        owners = store.claimed_by_many(missing)
        found += strips.unrecorded_marks(missing, owners, now, job.misfire_grace, job.fire_at)
        found = sorted(found, key=lambda m: m.scheduled_at)[-STRIP_OCCURRENCES:]
    return records, found


def _next(upcoming: datetime | None, now: datetime, paused: bool) -> str:
    if paused:
        return "<span class=skipped-paused>paused</span>"
    if upcoming is None:
        return "external"
    return "<span class=muted>none</span>" if upcoming >= NEVER else _when(upcoming, now)


def _offset(ms: float | None) -> str:
    """A replica's clock offset: how far the store's clock is ahead of it."""
    if ms is None:
        return "<span class=muted>same clock</span>"
    text = f"{ms / 1000:+.3f} s"
    return f"<span class=failed>{text}</span>" if abs(ms) > 1000 else text


def _pause_form(path: str, csrf: str, job: Job, pause: control.Pause | None) -> str:
    """Pause (with a reason) or resume the job on every replica."""
    action = f"{escape(path)}/api/jobs/{quote(job.name, safe='')}"
    if pause is not None:
        return f"""<p class=paused role=status id=paused>{escape(pause.describe())}</p>
<form class=inline method=post action="{action}/resume">
  <input type=hidden name=csrf value="{csrf}">
  <button type=submit>Resume</button></form>
<p class=muted>Resuming runs the next occurrence; the paused ones are not caught up.</p>"""
    return f"""<form class=inline method=post action="{action}/pause">
  <input type=hidden name=csrf value="{csrf}">
  <label>Reason <input name=reason maxlength={control.REASON_MAX}></label>
  <button type=submit>Pause on every replica</button></form>"""


def _changes_table(found: list[control.Change], now: datetime) -> str:
    """Who paused and resumed the job, when and why (nothing when nobody ever did)."""
    if not found:
        return ""
    rows = "".join(
        f"<tr><td>{_when(c.at, now)}</td><td>{escape(c.action)}</td>"
        f"<td><code>{escape(c.by)}</code></td><td>{escape(c.reason)}</td></tr>"
        for c in found
    )
    return f"""<h2 id=changes>Changes</h2>
<div class=scroll><table>
  <thead><tr><th>When</th><th>Change</th><th>By</th><th>Reason</th></tr></thead>
  <tbody>{rows}</tbody>
</table></div>"""


def overview_page(view: View, path: str, csrf: str) -> str:
    """Every job with its schedule, next and last run and its last occurrences; the live
    replicas of the namespace."""
    now = datetime.now(UTC)
    store = view.store
    rows = []
    paused = control.paused(store)
    for info, job in sorted(view.jobs(), key=lambda pair: pair[0].name):
        records, found = _marks(store, info.name, job, now, after_newest=True)
        last = _last_run(records)
        link = f"{escape(path)}/jobs/{quote(info.name, safe='')}{view.query()}"
        if last is not None:
            last_cells = (
                f"<td>{_when(last.started_at, now)}</td>"
                f'<td class="{escape(last.outcome)} nowrap">{escape(last.outcome)}</td>'
                f"<td class=wide><code>{escape(last.replica)}</code></td>"
            )
        else:
            last_cells = "<td>-</td><td class=muted>never</td><td class=wide></td>"
        if job is not None:  # another namespace's schedule is its own processes' to compute
            upcoming = None if job.external else job.schedule.next_after(now)
            next_cell = _next(upcoming, now, info.name in paused)
        else:
            next_cell = _next(None, now, True) if info.name in paused else "-"
        rows.append(
            f'<tr><td><a href="{link}">{escape(info.name)}</a>'
            f"{strips.strip(found, label=f'last {len(found)} occurrences of {info.name}')}</td>"
            f"<td><code>{escape(info.schedule)}</code>"
            f" <span class=muted>{escape(info.tz)}</span></td>"
            f"<td class=wide>{escape(info.scope)} / {escape(info.target)}</td>"
            f"<td>{next_cell}</td>{last_cells}</tr>"
        )
    replicas = sorted(store.replicas(), key=lambda r: r.id)
    this = view.beat.replica_id if view.name is None else None
    replica_rows = "".join(
        f"<tr><td><code>{escape(r.id)}</code>{' (this one)' if r.id == this else ''}"
        f"</td><td>{_when(r.expires_at, now)}</td><td>{_offset(r.clock_offset_ms)}</td></tr>"
        for r in replicas
    )
    body = f"""
{_header(view, path, csrf, now)}
<h2 id=jobs>Jobs ({len(rows)})</h2>
<div class=scroll><table>
  <thead><tr><th>Job and its last {STRIP_OCCURRENCES} occurrences</th><th>Schedule</th>
  <th class=wide>Scope / target</th><th>Next run</th>
  <th>Last run</th><th>Outcome</th><th class=wide>Replica</th></tr></thead>
  <tbody>{"".join(rows) or "<tr><td colspan=7 class=muted>No jobs.</td></tr>"}</tbody>
</table></div>
{strips.legend()}
<h2 id=replicas>Live replicas ({len(replicas)})</h2>
<div class=scroll><table>
  <thead><tr><th>Replica</th><th>Heartbeat valid until</th><th>Clock vs store</th></tr></thead>
  <tbody>{replica_rows or "<tr><td colspan=3 class=muted>None.</td></tr>"}</tbody>
</table></div>"""
    return _page("cron-bridge", body, refresh=True)


def _by_occurrence(records: list[RunRecord]) -> list[RunRecord]:
    """Newest occurrence first; within one, newest record first."""

    def scheduled(record: RunRecord) -> str:
        return record.occurrence_id.rpartition("@")[2]

    return sorted(records, key=lambda r: (scheduled(r), r.started_at), reverse=True)


def _run_row(r: RunRecord, now: datetime) -> str:
    return (
        f"<tr><td><code>{escape(r.occurrence_id.partition('@')[2])}</code></td>"
        f'<td class="{escape(r.outcome)} nowrap">{escape(r.outcome)}</td>'
        f"<td class=nowrap>{escape(r.trigger)}</td>"
        f"<td class=wide>{r.attempt}</td><td><code>{escape(r.replica)}</code></td>"
        f"<td class=wide>{_when(r.started_at, now)}</td>"
        f"<td class=wide>{'' if r.duration_ms is None else f'{r.duration_ms:.0f}'}</td>"
        f"<td>{escape(r.error or r.reason or '')}</td></tr>"
    )


def _flight_row(m: strips.Mark) -> str:
    return (
        f"<tr><td><code>{escape(m.occurrence_id.partition('@')[2])}</code></td>"
        f'<td class="running nowrap">running</td><td></td><td class=wide></td>'
        f"<td><code>{escape(m.replica or '')}</code></td><td class=wide></td>"
        f"<td class=wide></td><td></td></tr>"
    )


def job_page(
    view: View, path: str, csrf: str, info: JobInfo, job: Job | None, flash: str | None = None
) -> str:
    """A job's schedule, its last occurrences with their duration and lag, its recent runs
    from every replica ordered by occurrence, and (in the beat's own namespace) the run-now
    and pause buttons."""
    now = datetime.now(UTC)
    store = view.store
    records, found = _marks(store, info.name, job, now)
    # Runs in flight (no record yet) among the records, everything by occurrence, newest first.
    in_flight = [(m.occurrence_id.rpartition("@")[2], _flight_row(m)) for m in found
                 if m.state == "running"]  # fmt: skip
    shown = aside.with_stood_aside(store, info.name, records)  # who stood aside, too
    done = [(r.occurrence_id.rpartition("@")[2], _run_row(r, now))
            for r in _by_occurrence(shown)[:50]]  # fmt: skip
    rows = "".join(row for _, row in sorted([*in_flight, *done], key=lambda p: p[0], reverse=True))
    pause = control.paused(store).get(info.name)
    if job is not None:
        action = f"{escape(path)}/run/{quote(job.name, safe='')}"
        upcoming = None if job.external else job.schedule.next_after(now)
        next_text = _next(upcoming, now, pause is not None)
        buttons = f"""<form class=inline method=post action="{action}">
  <input type=hidden name=csrf value="{csrf}">
  <button type=submit>Run now</button></form>
<form class=inline method=post action="{action}">
  <input type=hidden name=csrf value="{csrf}"><input type=hidden name=force value=1>
  <button type=submit title="Runs even if the current occurrence already ran">Run a fresh
  occurrence</button></form>
<p class=muted>"Run now" claims the occurrence the schedule is at, so it runs once however
often it is pressed; a fresh occurrence always runs.</p>
{_pause_form(path, csrf, job, pause)}"""
    else:
        next_text = "paused" if pause is not None else "-"
        buttons = (f"<p class=muted>Namespace <code>{escape(view.name or '')}</code> is shown "
                   "read-only: run and pause its jobs from its own beat or with "
                   "<code>cron-bridge --store</code>.</p>")  # fmt: skip
        if pause is not None:
            buttons += f"<p class=paused role=status id=paused>{escape(pause.describe())}</p>"
    body = f"""
{_header(view, path, csrf, now)}
<h2>{escape(info.name)}</h2>
<p><code>{escape(info.schedule)}</code> {escape(info.tz)} &middot;
{escape(info.scope)} &middot; {escape(info.target)} &middot; next run: {next_text}</p>
{f"<p class=flash role=status>{escape(flash)}</p>" if flash else ""}
{buttons}
{_changes_table(control.changes(store, info.name)[:20], now)}
<h2 id=occurrences>Last {len(found)} occurrences</h2>
{strips.strip(found, label=f"last {len(found)} occurrences of {info.name}")}
{strips.legend()}
{strips.chart(found, field="duration_ms", label="Duration")}
{strips.chart(found, field="lag_ms", label="Lag (scheduled time to start)")}
<h2 id=runs>Recent runs</h2>
<div class=scroll><table>
  <thead><tr><th>Occurrence</th><th>Outcome</th><th>Trigger</th><th class=wide>Attempt</th>
  <th>Replica</th><th class=wide>Started</th><th class=wide>ms</th><th>Detail</th></tr></thead>
  <tbody>{rows or "<tr><td colspan=8 class=muted>No runs yet.</td></tr>"}</tbody>
</table></div>"""
    return _page(f"cron-bridge: {info.name}", body, refresh=True)
