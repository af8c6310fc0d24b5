"""The scheduler panel: server-rendered HTML, no build step, readable on a phone.

Every page is built from the beat's jobs and what the store says. The overview: counts of
the jobs failing, paused, late and running (each a filter), a search over job names, and each
job with its schedule, next run, last run anywhere in the cluster and its last occurrences;
the live replicas from their heartbeats. A job's page: its options and next runs, its
occurrences one row each (every attempt with its outcome, duration and lag, the replicas that
stood aside counted, the traceback behind a click), filtered by state and paged, and a "run
now" button that goes through the normal trigger and says in words what it did. Without
JavaScript it is plain HTML; with it, the page reloads itself every few seconds while nobody
is typing or reading a traceback.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, tzinfo
from html import escape
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode

from cron_bridge.control import aside, catalog
from cron_bridge.control import pause as control
from cron_bridge.control.catalog import JobInfo
from cron_bridge.http import occurrences, strips
from cron_bridge.http.layout import login_page, not_found_page, page, when
from cron_bridge.keys import lock_key
from cron_bridge.schedules import load_zone
from cron_bridge.stores.base import RunRecord, Store
from cron_bridge.windows import NEVER, upcoming

if TYPE_CHECKING:
    from cron_bridge.beat.replica import Beat
    from cron_bridge.jobs import Job

__all__ = ["View", "job_page", "login_page", "not_found_page", "overview_page", "run_now_words"]

STRIP_OCCURRENCES = 50
# Records read for a job's strip: its occurrences' records from every replica and attempt.
_RECORDS_PER_STRIP = 300
# Records read for a job's page, however far it pages: what the store keeps, at most this.
_RECORDS_PER_PAGE_VIEW = 2000
_LISTED_OCCURRENCES = 500  # occurrences a job's page lists (at most 20 pages)
_JOB_FILTERS = ("all", "failing", "paused", "late", "running")


def _last_run(records: Iterable[RunRecord]) -> RunRecord | None:
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
    store: Store, name: str, job: Job | None, now: datetime, *, after_newest: bool = False,
    records: int = _RECORDS_PER_STRIP, limit: int = STRIP_OCCURRENCES,
) -> tuple[list[RunRecord], list[strips.Mark]]:  # fmt: skip
    """A job's newest ``records`` and its last ``limit`` occurrences as drawn (running ones
    included, and, for a scheduled cluster job of this namespace, the ones no record names,
    from their claims: one more read, only when there are such occurrences).
    ``after_newest``: only those due after its newest recorded one (the overview, which draws
    every job)."""
    found_records = store.history(name, records)
    running = strips.parse_holder(name, store.holder(lock_key(name)))
    found = strips.marks(found_records, running, limit=limit)
    if job is None or job.external or not job.is_cluster:
        return found_records, found
    missing = strips.unrecorded(found, found_records, job.schedule, name, now, limit=limit,
                                after_newest=after_newest)  # fmt: skip
    if missing:
        owners = store.claimed_by_many(missing)
        found += strips.unrecorded_marks(missing, owners, now, job.misfire_grace, job.fire_at)
        found = sorted(found, key=lambda m: m.scheduled_at)[-limit:]
    return found_records, found


def _zone(info: JobInfo) -> tzinfo:
    """The job's zone, for its own times (UTC when the catalog names none we know)."""
    try:
        return load_zone(info.tz)
    except Exception:  # noqa: BLE001 - another namespace's catalog is untrusted text
        return UTC


def _next(coming: datetime | None, now: datetime, paused: bool, zone: tzinfo) -> str:
    if paused:
        return "<span class=skipped-paused>paused</span>"
    if coming is None:
        return "external"
    return "<span class=muted>none</span>" if coming >= NEVER else when(coming, now, zone)


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
        f"<tr><td>{when(c.at, now)}</td><td>{escape(c.action)}</td>"
        f"<td><code>{escape(c.by)}</code></td><td>{escape(c.reason)}</td></tr>"
        for c in found
    )
    return f"""<h2 id=changes>Changes</h2>
<div class=scroll><table>
  <thead><tr><th>When</th><th>Change</th><th>By</th><th>Reason</th></tr></thead>
  <tbody>{rows}</tbody>
</table></div>"""


@dataclass(frozen=True, slots=True)
class _JobState:
    """A job as the overview counts it."""

    info: JobInfo
    job: Job | None
    marks: list[strips.Mark]
    last: RunRecord | None
    paused: bool

    @property
    def running(self) -> bool:
        return any(m.state == "running" for m in self.marks)

    @property
    def failing(self) -> bool:
        """Its latest occurrence that ended, failed (or was aborted)."""
        ended = [m for m in self.marks if m.state in ("completed", "failed", "aborted")]
        return bool(ended) and ended[-1].state in ("failed", "aborted")

    def late(self, now: datetime) -> bool:
        """Its latest occurrence has not started: nobody claimed it once its grace passed, or
        it waits in the queue (or on a claim that wrote nothing) past its grace."""
        if not self.marks or self.paused:
            return False
        newest = self.marks[-1]
        grace = self.job.misfire_grace if self.job is not None else timedelta(seconds=30)
        if newest.state == "unrecorded":
            return True
        return newest.state in ("queued", "claimed") and now - newest.scheduled_at > grace

    def shown_by(self, state: str, now: datetime) -> bool:
        return {"failing": self.failing, "paused": self.paused, "late": self.late(now),
                "running": self.running}.get(state, True)  # fmt: skip


def _link(path: str, view: View, **params: str | int) -> str:
    """A link to the dashboard at ``path`` with ``params`` (empty ones left out), keeping the
    namespace."""
    query = {k: str(v) for k, v in params.items() if v not in ("", None, "all", 1)}
    if view.name is not None:
        query["ns"] = view.name
    return escape(f"{path}?{urlencode(query)}" if query else path)


def _counts(states: Sequence[_JobState], now: datetime, view: View, path: str, shown: str,
            q: str) -> str:  # fmt: skip
    """The counts at the top of the overview, each a link that filters the jobs by it."""
    counted = {"all": len(states)}
    for name in _JOB_FILTERS[1:]:
        counted[name] = sum(1 for state in states if state.shown_by(name, now))
    links = []
    for name, n in counted.items():
        current = " aria-current=true" if name == shown else ""
        label = "jobs" if name == "all" else name
        css = {
            "failing": "failed",
            "late": "late",
            "running": "running",
            "paused": "skipped-paused",
        }
        mark = f' class="{css[name]}"' if name in css and n else ""
        links.append(f'<a href="{_link(f"{path}/", view, state=name, q=q)}"{current} '
                     f'id="count-{name}"><b{mark}>{n}</b> {label}</a>')  # fmt: skip
    return f"<nav class=counts aria-label=Counts>{''.join(links)}</nav>"


def _search(path: str, view: View, q: str, shown: str) -> str:
    options = "".join(f'<option value="{name}"{" selected" if name == shown else ""}>{name}'
                      "</option>" for name in _JOB_FILTERS)  # fmt: skip
    namespace = (f'<input type=hidden name=ns value="{escape(view.name)}">'
                 if view.name is not None else "")  # fmt: skip
    return f"""<form method=get action="{escape(path)}/" id=search role=search>
  <input type=search name=q value="{escape(q)}" placeholder="Search job names"
    aria-label="Search job names" maxlength=200>
  <select name=state aria-label="Show">{options}</select>{namespace}
  <button type=submit>Filter</button></form>"""


def overview_page(view: View, path: str, csrf: str, q: str = "", state: str = "all") -> str:
    """Counts of the jobs (failing, paused, late, running), a search over their names, every
    job shown with its schedule, next and last run and its last occurrences; the live
    replicas of the namespace."""
    now = datetime.now(UTC)
    store = view.store
    q, state = q.strip()[:200], state if state in _JOB_FILTERS else "all"
    paused = control.paused(store)
    states = []
    for info, job in sorted(view.jobs(), key=lambda pair: pair[0].name):
        records, found = _marks(store, info.name, job, now, after_newest=True)
        states.append(_JobState(info, job, found, _last_run(records), info.name in paused))
    shown = [s for s in states
             if q.casefold() in s.info.name.casefold() and s.shown_by(state, now)]  # fmt: skip
    rows = []
    for s in shown:
        info, job, last = s.info, s.job, s.last
        link = f"{escape(path)}/jobs/{quote(info.name, safe='')}{view.query()}"
        if last is not None:
            last_cells = (
                f"<td>{when(last.started_at, now)}</td>"
                f'<td class="{escape(last.outcome)} nowrap">{escape(last.outcome)}</td>'
                f'<td class="wide nowrap"><code>{escape(last.replica)}</code></td>'
            )
        else:
            last_cells = "<td>-</td><td class=muted>never</td><td class=wide></td>"
        zone = _zone(info)
        if job is not None:  # another namespace's schedule is its own processes' to compute
            coming = None if job.external else job.schedule.next_after(now)
            next_cell = _next(coming, now, s.paused, zone)
        else:
            next_cell = _next(None, now, True, zone) if s.paused else "-"
        flags = "".join(f" <span class={css}>{word}</span>" for word, css, on in (
            ("failing", "failed", s.failing), ("late", "late", s.late(now)),
            ("running", "running", s.running)) if on)  # fmt: skip
        rows.append(
            f'<tr><td><a href="{link}">{escape(info.name)}</a>{flags}'
            f"{strips.strip(s.marks, label=f'last {len(s.marks)} occurrences of {info.name}')}"
            f"</td><td><code>{escape(info.schedule)}</code>"
            f" <span class=muted>{escape(info.tz)}</span></td>"
            f"<td class=wide>{escape(info.scope)} / {escape(info.target)}</td>"
            f"<td>{next_cell}</td>{last_cells}</tr>"
        )
    replicas = sorted(store.replicas(), key=lambda r: r.id)
    this = view.beat.replica_id if view.name is None else None
    replica_rows = "".join(
        f"<tr><td><code>{escape(r.id)}</code>{' (this one)' if r.id == this else ''}"
        f"</td><td>{when(r.expires_at, now)}</td><td>{_offset(r.clock_offset_ms)}</td></tr>"
        for r in replicas
    )
    filtered = "" if len(shown) == len(states) else f" of {len(states)}"
    empty = "No jobs." if not states else "No job matches."
    body = f"""
{_header(view, path, csrf, now)}
{_counts(states, now, view, path, state, q)}
{_search(path, view, q, state)}
<h2 id=jobs>Jobs ({len(shown)}{filtered})</h2>
<div class=scroll><table>
  <thead><tr><th>Job and its last {STRIP_OCCURRENCES} occurrences</th><th>Schedule</th>
  <th class=wide>Scope / target</th><th>Next run (job's zone)</th>
  <th>Last run</th><th>Outcome</th><th class=wide>Replica</th></tr></thead>
  <tbody>{"".join(rows) or f"<tr><td colspan=7 class=muted>{empty}</td></tr>"}</tbody>
</table></div>
{strips.legend()}
<h2 id=replicas>Live replicas ({len(replicas)})</h2>
<div class=scroll><table>
  <thead><tr><th>Replica</th><th>Heartbeat valid until</th><th>Clock vs store</th></tr></thead>
  <tbody>{replica_rows or "<tr><td colspan=3 class=muted>None.</td></tr>"}</tbody>
</table></div>"""
    return page("cron-bridge", body, refresh=True)


def _attempt(record: RunRecord, scheduled: datetime) -> str:
    """One attempt of an occurrence: its outcome, where, how long, its lag, why."""
    lag = (record.started_at - scheduled).total_seconds() * 1000
    facts = [f"on <code>{escape(record.replica)}</code>"]
    if record.outcome == "enqueued":
        facts.append(f"sent {strips.ms_text(lag)} after it was due")
    elif record.outcome in ("completed", "failed", "aborted"):
        if record.duration_ms is not None:
            facts.append(f"ran {strips.ms_text(record.duration_ms)}")
        facts.append(f"lag {strips.ms_text(lag)}")
    if record.trigger not in ("schedule", "queue"):
        facts.append(escape(record.trigger))
    detail = record.error or record.reason
    said = f": {escape(detail)}" if detail else ""
    number = f"#{record.attempt} " if record.outcome in ("completed", "failed", "aborted") else ""
    trace = ""
    if record.traceback:
        trace = (f"<details><summary>Traceback</summary><pre>{escape(record.traceback)}</pre>"
                 "</details>")  # fmt: skip
    return (f'<li>{number}<span class="{escape(record.outcome)}">{escape(record.outcome)}</span> '
            f"{', '.join(facts)}{said}{trace}</li>")  # fmt: skip


def _occurrence_row(row: occurrences.Row, now: datetime, zone: tzinfo) -> str:
    mark = row.mark
    attempts = "".join(_attempt(r, mark.scheduled_at) for r in row.attempts)
    if mark.state == "running":
        holder = escape(mark.replica or "")
        attempts += f"<li><span class=running>running</span> on <code>{holder}</code></li>"
    if mark.note:
        attempts += f"<li class=muted>{escape(mark.note)}</li>"
    aside_n = len(row.stood_aside)
    stood = (f"{aside_n} replica{'s' if aside_n != 1 else ''} stood aside"
             if aside_n else "")  # fmt: skip
    return (
        f'<tr id="{escape(mark.occurrence_id)}"><td title="{escape(mark.occurrence_id)}">'
        f"{when(mark.scheduled_at, now, zone)}</td>"
        f'<td class="{escape(mark.state)} nowrap">{escape(mark.state)}</td>'
        f"<td class=nowrap><code>{escape(row.ran_by or '')}</code></td>"
        f"<td><ol class=attempts>{attempts}</ol></td>"
        f"<td class='wide muted'>{stood}</td></tr>"
    )


def _state_filters(found: Sequence[occurrences.Row], path: str, view: View, shown: str) -> str:
    links = []
    for name in occurrences.FILTERS:
        n = len(occurrences.filtered(found, name))
        current = " aria-current=true" if name == shown else ""
        links.append(f'<a href="{_link(path, view, state=name)}#occurrences"{current} '
                     f'id="filter-{name}"><b>{n}</b> {name}</a>')  # fmt: skip
    return f"<nav class=counts aria-label='Filter by state'>{''.join(links)}</nav>"


def _pager(path: str, view: View, state: str, number: int, pages: int) -> str:
    if pages == 1:
        return ""

    def to(n: int, word: str, rel: str) -> str:
        if not 1 <= n <= pages:
            return f"<span class=muted>{word}</span>"
        return (
            f'<a href="{_link(path, view, state=state, page=n)}#occurrences" rel={rel}>{word}</a>'
        )

    newer, older = to(number - 1, "Newer", "prev"), to(number + 1, "Older", "next")
    return f"<p class=pager>{newer} <span>page {number} of {pages}</span> {older}</p>"


def _options(job: Job | None) -> str:
    """The options that decide how the job runs (the catalog does not carry them: another
    namespace's job shows what its catalog has)."""
    if job is None:
        return "<p class=muted>Options are known to that namespace's own beats.</p>"
    backoff = job.backoff
    waits = (f"{backoff.base:g} s" if backoff.kind == "fixed"
             else f"exponential from {backoff.base:g} s"
             + (f" up to {backoff.max:g} s" if backoff.max is not None else ""))  # fmt: skip

    def seconds(value: timedelta | None) -> str:
        return "none" if value is None else f"{value.total_seconds():g} s"

    options = [
        ("attempts", str(job.attempts)), ("backoff", waits), ("timeout", seconds(job.timeout)),
        ("overlap", job.overlap), ("misfire", job.misfire),
        ("misfire grace", seconds(job.misfire_grace)), ("coalesce", str(job.coalesce).lower()),
        ("lock ttl", seconds(job.lock_ttl)), ("jitter", seconds(job.jitter)),
        ("scope", job.scope), ("target", job.target if job.target == "inline"
                               else f"{job.adapter} {job.task or ''} on {job.queue or 'default'}"),
    ]  # fmt: skip
    items = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in options)
    return f"<dl class=options id=options>{items}</dl>"


def _coming(job: Job | None, now: datetime, zone: tzinfo) -> str:
    if job is None:
        return "<p class=muted>Computed by that namespace's own beats.</p>"
    if job.external:
        return "<p class=muted>External: it runs when something calls its trigger.</p>"
    found = upcoming(job.schedule, now, 5)
    if not found:
        return "<p class=muted>None left.</p>"
    items = "".join(f"<li>{when(u.at, now, zone)}"
                    f"{f' <span class=late>{escape(u.note)}</span>' if u.note else ''}</li>"
                    for u in found)  # fmt: skip
    return f"<ol id=next-runs>{items}</ol>"


def run_now_words(outcome: str, occurrence_id: str, replica: str, detail: str | None,
                  duration_ms: float | None) -> str:  # fmt: skip
    """What pressing "Run now" did, in words (the outcome name alone reads as a failure when
    it is ``skipped-claimed``)."""
    due = occurrence_id.partition("@")[2]
    detail = (detail or "")[:500]
    took = f" in {strips.ms_text(duration_ms)}" if duration_ms is not None else ""
    said = {
        "completed": f"Ran the occurrence due {due} on {replica}: completed{took}.",
        "enqueued": f"Sent the occurrence due {due} to its queue from {replica}: a worker runs "
        "it, and its outcome shows below.",
        "failed": f"Ran the occurrence due {due} on {replica}: it failed{took}: {detail}",
        "aborted": f"Ran the occurrence due {due} on {replica}: it was aborted ({detail}).",
        "skipped-claimed": f"Not run again: the occurrence due {due}, the one the schedule is "
        "at, was already claimed (by the schedule or an earlier press), and "
        'an occurrence runs once. "Run a fresh occurrence" runs the job '
        "now.",
        "skipped-completed": f"Not run again: the occurrence due {due} already completed.",
        "skipped-overlap": f"Not run: the job's previous run is still going ({detail}).",
        "skipped-paused": "Not run: the job is paused on every replica. Resume it first.",
    }.get(outcome)
    return said or f"{outcome}: {occurrence_id}{f' ({detail})' if detail else ''}"


def job_page(
    view: View, path: str, csrf: str, info: JobInfo, job: Job | None, flash: str | None = None,
    state: str = "all", number: int = 1,
) -> str:  # fmt: skip
    """A job's schedule, options and next runs; its occurrences one row each, newest first,
    with every attempt, filtered by ``state`` and paged; its last occurrences' strip and
    charts; and (in the beat's own namespace) the run-now and pause buttons."""
    now = datetime.now(UTC)
    store = view.store
    zone = _zone(info)
    state = state if state in occurrences.FILTERS else "all"
    records, found = _marks(store, info.name, job, now, records=_RECORDS_PER_PAGE_VIEW,
                            limit=_LISTED_OCCURRENCES)  # fmt: skip
    listed = occurrences.rows(found, records)
    shown, pages = occurrences.paged(occurrences.filtered(listed, state), number)
    number = min(max(1, number), pages)
    shown = occurrences.with_stood_aside(shown, aside.Aside(store))
    drawn = found[-STRIP_OCCURRENCES:]
    pause = control.paused(store).get(info.name)
    job_path = f"{path}/jobs/{quote(info.name, safe='')}"
    if job is not None:
        action = f"{escape(path)}/run/{quote(job.name, safe='')}"
        coming = None if job.external else job.schedule.next_after(now)
        next_text = _next(coming, now, pause is not None, zone)
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
    rows = "".join(_occurrence_row(row, now, zone) for row in shown)
    body = f"""
{_header(view, path, csrf, now)}
<h2>{escape(info.name)}</h2>
<p><code>{escape(info.schedule)}</code> {escape(info.tz)} &middot;
{escape(info.scope)} &middot; {escape(info.target)} &middot; next run: {next_text}</p>
{f"<p class=flash role=status>{escape(flash)}</p>" if flash else ""}
{buttons}
<div class=columns>
<section><h2 id=upcoming>Next runs <span class=muted>({escape(info.tz)})</span></h2>
{_coming(job, now, zone)}</section>
<section><h2 id=job-options>Options</h2>{_options(job)}</section>
</div>
{_changes_table(control.changes(store, info.name)[:20], now)}
<div class=pictures>
<h2 id=strip>Last {len(drawn)} occurrences</h2>
{strips.strip(drawn, label=f"last {len(drawn)} occurrences of {info.name}", aligned=True)}
{strips.legend()}
{strips.chart(drawn, field="duration_ms", label="Duration")}
{strips.chart(drawn, field="lag_ms", label="Lag (scheduled time to start)")}
</div>
<h2 id=occurrences>Occurrences</h2>
{_state_filters(listed, job_path, view, state)}
{_pager(job_path, view, state, number, pages)}
<div class=scroll><table id=occurrence-table>
  <thead><tr><th>Due ({escape(info.tz)})</th><th>State</th><th>Ran by</th>
  <th>Attempts</th><th class=wide>Stood aside</th></tr></thead>
  <tbody>{rows or "<tr><td colspan=5 class=muted>No occurrences yet.</td></tr>"}</tbody>
</table></div>
{_pager(job_path, view, state, number, pages)}"""
    return page(f"cron-bridge: {info.name}", body, refresh=True)
