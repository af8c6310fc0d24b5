"""The scheduler panel: server-rendered HTML, no build step, readable on a phone.

Every page is built from the beat's jobs and what the store says: the jobs with their
schedule, next run and last run anywhere in the cluster; the live replicas from their
heartbeats; the recent runs of a job with a "run now" button that goes through the normal
trigger. Without JavaScript it is plain HTML; with it, the page reloads itself every few
seconds while nobody is typing.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from html import escape
from typing import TYPE_CHECKING
from urllib.parse import quote

from cron_bridge import control
from cron_bridge.bounded import NEVER
from cron_bridge.stores.base import RunRecord

if TYPE_CHECKING:
    from cron_bridge.beat import Beat
    from cron_bridge.jobs import Job

__all__ = ["job_page", "login_page", "overview_page"]

REFRESH_SECONDS = 5

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
.paused { border-left: 4px solid var(--warn); padding-left: .5rem; }
form.inline { display: inline; }
button { font: inherit; padding: .4rem .9rem; border-radius: .4rem; border: 1px solid var(--line);
         cursor: pointer; }
input[type=password] { font: inherit; padding: .4rem; width: 100%; max-width: 22rem; }
.flash { padding: .6rem .8rem; border: 1px solid var(--line); border-radius: .4rem;
         margin: .75rem 0; }
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


def _target(job: Job) -> str:
    return "inline" if job.target == "inline" else f"{job.adapter}:{job.queue or 'default'}"


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


def _header(beat: Beat, path: str, csrf: str, now: datetime) -> str:
    return f"""
<header>
  <div><h1><a href="{escape(path)}/">cron-bridge</a></h1>
  <span class=muted>served by replica <code>{escape(beat.replica_id)}</code> on
  <code>{escape(beat.store.url)}</code>, {now.strftime("%H:%M:%S")} UTC</span></div>
  <form class=inline method=post action="{escape(path)}/logout">
    <input type=hidden name=csrf value="{csrf}"><button type=submit>Sign out</button></form>
</header>"""


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


def overview_page(beat: Beat, path: str, csrf: str) -> str:
    """Every job with its schedule, next and last run; the live replicas."""
    now = datetime.now(UTC)
    rows = []
    paused = control.paused(beat.store)
    for job in sorted(beat.jobs(), key=lambda j: j.name):
        last = _last_run(beat.store.history(job.name, 10))
        upcoming = None if job.external else job.schedule.next_after(now)
        link = f"{escape(path)}/jobs/{quote(job.name, safe='')}"
        if last is not None:
            last_cells = (
                f"<td>{_when(last.started_at, now)}</td>"
                f'<td class="{escape(last.outcome)} nowrap">{escape(last.outcome)}</td>'
                f"<td class=wide><code>{escape(last.replica)}</code></td>"
            )
        else:
            last_cells = "<td>-</td><td class=muted>never</td><td class=wide></td>"
        rows.append(
            f'<tr><td><a href="{link}">{escape(job.name)}</a></td>'
            f"<td><code>{escape(job.schedule.describe())}</code>"
            f" <span class=muted>{escape(job.schedule.tz)}</span></td>"
            f"<td class=wide>{escape(job.scope)} / {escape(_target(job))}</td>"
            f"<td>{_next(upcoming, now, job.name in paused)}</td>"
            f"{last_cells}</tr>"
        )
    replicas = sorted(beat.store.replicas(), key=lambda r: r.id)
    replica_rows = "".join(
        f"<tr><td><code>{escape(r.id)}</code>{' (this one)' if r.id == beat.replica_id else ''}"
        f"</td><td>{_when(r.expires_at, now)}</td><td>{_offset(r.clock_offset_ms)}</td></tr>"
        for r in replicas
    )
    body = f"""
{_header(beat, path, csrf, now)}
<h2 id=jobs>Jobs ({len(rows)})</h2>
<div class=scroll><table>
  <thead><tr><th>Job</th><th>Schedule</th><th class=wide>Scope / target</th><th>Next run</th>
  <th>Last run</th><th>Outcome</th><th class=wide>Replica</th></tr></thead>
  <tbody>{"".join(rows) or "<tr><td colspan=7 class=muted>No jobs.</td></tr>"}</tbody>
</table></div>
<h2 id=replicas>Live replicas ({len(replicas)})</h2>
<div class=scroll><table>
  <thead><tr><th>Replica</th><th>Heartbeat valid until</th><th>Clock vs store</th></tr></thead>
  <tbody>{replica_rows or "<tr><td colspan=3 class=muted>None.</td></tr>"}</tbody>
</table></div>"""
    return _page("cron-bridge", body, refresh=True)


def job_page(beat: Beat, path: str, csrf: str, job: Job, flash: str | None = None) -> str:
    """A job's schedule, its recent runs from every replica, and the run-now buttons."""
    now = datetime.now(UTC)
    records = beat.store.history(job.name, 50)
    rows = "".join(
        f"<tr><td><code>{escape(r.occurrence_id.partition('@')[2])}</code></td>"
        f'<td class="{escape(r.outcome)} nowrap">{escape(r.outcome)}</td>'
        f"<td class=nowrap>{escape(r.trigger)}</td>"
        f"<td class=wide>{r.attempt}</td><td><code>{escape(r.replica)}</code></td>"
        f"<td class=wide>{_when(r.started_at, now)}</td>"
        f"<td class=wide>{'' if r.duration_ms is None else f'{r.duration_ms:.0f}'}</td>"
        f"<td>{escape(r.error or r.reason or '')}</td></tr>"
        for r in records
    )
    action = f"{escape(path)}/run/{quote(job.name, safe='')}"
    upcoming = None if job.external else job.schedule.next_after(now)
    pause = control.paused(beat.store).get(job.name)
    body = f"""
{_header(beat, path, csrf, now)}
<h2>{escape(job.name)}</h2>
<p><code>{escape(job.schedule.describe())}</code> {escape(job.schedule.tz)} &middot;
{escape(job.scope)} &middot; {escape(_target(job))} &middot; next run:
{_next(upcoming, now, pause is not None)}</p>
{f"<p class=flash role=status>{escape(flash)}</p>" if flash else ""}
<form class=inline method=post action="{action}">
  <input type=hidden name=csrf value="{csrf}">
  <button type=submit>Run now</button></form>
<form class=inline method=post action="{action}">
  <input type=hidden name=csrf value="{csrf}"><input type=hidden name=force value=1>
  <button type=submit title="Runs even if the current occurrence already ran">Run a fresh
  occurrence</button></form>
<p class=muted>"Run now" claims the occurrence the schedule is at, so it runs once however
often it is pressed; a fresh occurrence always runs.</p>
{_pause_form(path, csrf, job, pause)}
{_changes_table(control.changes(beat.store, job.name)[:20], now)}
<h2>Recent runs</h2>
<div class=scroll><table>
  <thead><tr><th>Occurrence</th><th>Outcome</th><th>Trigger</th><th class=wide>Attempt</th>
  <th>Replica</th><th class=wide>Started</th><th class=wide>ms</th><th>Detail</th></tr></thead>
  <tbody>{rows or "<tr><td colspan=8 class=muted>No runs yet.</td></tr>"}</tbody>
</table></div>"""
    return _page(f"cron-bridge: {job.name}", body, refresh=True)
