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
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode

from cron_bridge.control import aside, catalog
from cron_bridge.control import pause as control
from cron_bridge.control.catalog import JobInfo
from cron_bridge.http import occurrences, strips
from cron_bridge.http.html import Markup, html, join
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
            return [
                (
                    replace(info, target=f"stored:{info.target}") if info.name in stored else info,
                    job,
                )
                for info, job in found
            ]
        return [(info, None) for info in catalog.read(self.store).values()]


def _header(view: View, path: str, csrf: str, now: datetime) -> Markup:
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


def _marks(
    store: Store,
    name: str,
    job: Job | None,
    now: datetime,
    *,
    after_newest: bool = False,
    records: int = _RECORDS_PER_STRIP,
    limit: int = STRIP_OCCURRENCES,
) -> tuple[list[RunRecord], list[strips.Mark]]:
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
    missing = strips.unrecorded(
        found, found_records, job.schedule, name, now, limit=limit, after_newest=after_newest
    )
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


def _next(coming: datetime | None, now: datetime, paused: bool, zone: tzinfo) -> Markup:
    if paused:
        return Markup("<span class=skipped-paused>paused</span>")
    if coming is None:
        return Markup("external")
    return Markup("<span class=muted>none</span>") if coming >= NEVER else when(coming, now, zone)


def _offset(ms: float | None) -> Markup:
    """A replica's clock offset: how far the store's clock is ahead of it."""
    if ms is None:
        return Markup("<span class=muted>same clock</span>")
    text = f"{ms / 1000:+.3f} s"
    return html("<span class=failed>{}</span>", text) if abs(ms) > 1000 else html("{}", text)


def _pause_form(path: str, csrf: str, job: Job, pause: control.Pause | None) -> Markup:
    """Pause (with a reason) or resume the job on every replica."""
    action = f"{path}/api/jobs/{quote(job.name, safe='')}"
    if pause is not None:
        return html(
            """<p class=paused role=status id=paused>{}</p>
<form class=inline method=post action="{}/resume">
  <input type=hidden name=csrf value="{}">
  <button type=submit>Resume</button></form>
<p class=muted>Resuming runs the next occurrence; the paused ones are not caught up.</p>""",
            pause.describe(),
            action,
            csrf,
        )
    return html(
        """<form class=inline method=post action="{}/pause">
  <input type=hidden name=csrf value="{}">
  <label>Reason <input name=reason maxlength="{}"></label>
  <button type=submit>Pause on every replica</button></form>""",
        action,
        csrf,
        control.REASON_MAX,
    )


def _changes_table(found: list[control.Change], now: datetime) -> Markup:
    """Who paused and resumed the job, when and why (nothing when nobody ever did)."""
    if not found:
        return Markup()
    rows = join(
        html(
            "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
            when(c.at, now),
            c.action,
            c.by,
            c.reason,
        )
        for c in found
    )
    return html(
        """<h2 id=changes>Changes</h2>
<div class=scroll><table>
  <thead><tr><th>When</th><th>Change</th><th>By</th><th>Reason</th></tr></thead>
  <tbody>{}</tbody>
</table></div>""",
        rows,
    )


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
        return {
            "failing": self.failing,
            "paused": self.paused,
            "late": self.late(now),
            "running": self.running,
        }.get(state, True)


def _link(path: str, view: View, **params: str | int) -> str:
    """A link to the dashboard at ``path`` with ``params`` (empty ones left out), keeping the
    namespace."""
    query = {k: str(v) for k, v in params.items() if v not in ("", None, "all", 1)}
    if view.name is not None:
        query["ns"] = view.name
    return f"{path}?{urlencode(query)}" if query else path


_COUNT_CSS = {"failing": "failed", "late": "late", "running": "running", "paused": "skipped-paused"}


def _counts(
    states: Sequence[_JobState], now: datetime, view: View, path: str, shown: str, q: str
) -> Markup:
    """The counts at the top of the overview, each a link that filters the jobs by it."""
    counted = {"all": len(states)}
    for name in _JOB_FILTERS[1:]:
        counted[name] = sum(1 for state in states if state.shown_by(name, now))
    links = []
    for name, n in counted.items():
        current = Markup(" aria-current=true" if name == shown else "")
        label = "jobs" if name == "all" else name
        mark = html(' class="{}"', _COUNT_CSS[name]) if name in _COUNT_CSS and n else Markup()
        links.append(
            html(
                '<a href="{}"{} id="count-{}"><b{}>{}</b> {}</a>',
                _link(f"{path}/", view, state=name, q=q),
                current,
                name,
                mark,
                n,
                label,
            )
        )
    return html("<nav class=counts aria-label=Counts>{}</nav>", join(links))


def _search(path: str, view: View, q: str, shown: str) -> Markup:
    options = join(
        html(
            '<option value="{}"{}>{}</option>',
            name,
            Markup(" selected" if name == shown else ""),
            name,
        )
        for name in _JOB_FILTERS
    )
    namespace = (
        html('<input type=hidden name=ns value="{}">', view.name)
        if view.name is not None
        else Markup()
    )
    return html(
        """<form method=get action="{}/" id=search role=search>
  <input type=search name=q value="{}" placeholder="Search job names"
    aria-label="Search job names" maxlength="200">
  <select name=state aria-label="Show">{}</select>{}
  <button type=submit>Filter</button></form>""",
        path,
        q,
        options,
        namespace,
    )


def _job_row(s: _JobState, view: View, path: str, now: datetime) -> Markup:
    """One job of the overview: its name, flags and strip, schedule, target, next and last
    run."""
    info, job, last = s.info, s.job, s.last
    link = f"{path}/jobs/{quote(info.name, safe='')}{view.query()}"
    if last is not None:
        last_cells = html(
            '<td>{}</td><td class="{} nowrap">{}</td><td class="wide nowrap"><code>{}</code></td>',
            when(last.started_at, now),
            last.outcome,
            last.outcome,
            last.replica,
        )
    else:
        last_cells = Markup("<td>-</td><td class=muted>never</td><td class=wide></td>")
    zone = _zone(info)
    if job is not None:  # another namespace's schedule is its own processes' to compute
        coming = None if job.external else job.schedule.next_after(now)
        next_cell = _next(coming, now, s.paused, zone)
    else:
        next_cell = _next(None, now, True, zone) if s.paused else Markup("-")
    flags = join(
        html(' <span class="{}">{}</span>', css, word)
        for word, css, on in (
            ("failing", "failed", s.failing),
            ("late", "late", s.late(now)),
            ("running", "running", s.running),
        )
        if on
    )
    drawn = strips.strip(s.marks, label=f"last {len(s.marks)} occurrences of {info.name}")
    return html(
        '<tr><td><a href="{}">{}</a>{}{}</td><td><code>{}</code>'
        " <span class=muted>{}</span></td><td class=wide>{} / {}</td>"
        "<td>{}</td>{}</tr>",
        link,
        info.name,
        flags,
        drawn,
        info.schedule,
        info.tz,
        info.scope,
        info.target,
        next_cell,
        last_cells,
    )


def overview_page(view: View, path: str, csrf: str, q: str = "", state: str = "all") -> Markup:
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
    shown = [s for s in states if q.casefold() in s.info.name.casefold() and s.shown_by(state, now)]
    rows = join(_job_row(s, view, path, now) for s in shown)
    replicas = sorted(store.replicas(), key=lambda r: r.id)
    this = view.beat.replica_id if view.name is None else None
    replica_rows = join(
        html(
            "<tr><td><code>{}</code>{}</td><td>{}</td><td>{}</td></tr>",
            r.id,
            " (this one)" if r.id == this else "",
            when(r.expires_at, now),
            _offset(r.clock_offset_ms),
        )
        for r in replicas
    )
    filtered = "" if len(shown) == len(states) else f" of {len(states)}"
    empty = "No jobs." if not states else "No job matches."
    body = html(
        """
{header}
{counts}
{search}
<h2 id=jobs>Jobs ({shown}{filtered})</h2>
<div class=scroll><table>
  <thead><tr><th>Job and its last {strip} occurrences</th><th>Schedule</th>
  <th class=wide>Scope / target</th><th>Next run (job's zone)</th>
  <th>Last run</th><th>Outcome</th><th class=wide>Replica</th></tr></thead>
  <tbody>{rows}</tbody>
</table></div>
{legend}
<h2 id=replicas>Live replicas ({replicas})</h2>
<div class=scroll><table>
  <thead><tr><th>Replica</th><th>Heartbeat valid until</th><th>Clock vs store</th></tr></thead>
  <tbody>{replica_rows}</tbody>
</table></div>""",
        header=_header(view, path, csrf, now),
        counts=_counts(states, now, view, path, state, q),
        search=_search(path, view, q, state),
        shown=len(shown),
        filtered=filtered,
        strip=STRIP_OCCURRENCES,
        rows=rows or html('<tr><td colspan="7" class=muted>{}</td></tr>', empty),
        legend=strips.legend(),
        replicas=len(replicas),
        replica_rows=replica_rows or Markup('<tr><td colspan="3" class=muted>None.</td></tr>'),
    )
    return page("cron-bridge", body, refresh=True)


def _attempt(record: RunRecord, scheduled: datetime) -> Markup:
    """One attempt of an occurrence: its outcome, where, how long, its lag, why."""
    lag = (record.started_at - scheduled).total_seconds() * 1000
    facts = [html("on <code>{}</code>", record.replica)]
    if record.outcome == "enqueued":
        facts.append(html("sent {} after it was due", strips.ms_text(lag)))
    elif record.outcome in ("completed", "failed", "aborted"):
        if record.duration_ms is not None:
            facts.append(html("ran {}", strips.ms_text(record.duration_ms)))
        facts.append(html("lag {}", strips.ms_text(lag)))
    if record.trigger not in ("schedule", "queue"):
        facts.append(html("{}", record.trigger))
    detail = record.error or record.reason
    said = html(": {}", detail) if detail else Markup()
    number = f"#{record.attempt} " if record.outcome in ("completed", "failed", "aborted") else ""
    trace = Markup()
    if record.traceback:
        trace = html(
            "<details><summary>Traceback</summary><pre>{}</pre></details>", record.traceback
        )
    return html(
        '<li>{}<span class="{}">{}</span> {}{}{}</li>',
        number,
        record.outcome,
        record.outcome,
        join(facts, ", "),
        said,
        trace,
    )


def _occurrence_row(row: occurrences.Row, now: datetime, zone: tzinfo) -> Markup:
    mark = row.mark
    attempts = join(_attempt(r, mark.scheduled_at) for r in row.attempts)
    if mark.state == "running":
        attempts += html(
            "<li><span class=running>running</span> on <code>{}</code></li>", mark.replica or ""
        )
    if mark.note:
        attempts += html("<li class=muted>{}</li>", mark.note)
    aside_n = len(row.stood_aside)
    stood = f"{aside_n} replica{'s' if aside_n != 1 else ''} stood aside" if aside_n else ""
    return html(
        '<tr id="{id}"><td title="{id}">{due}</td><td class="{state} nowrap">{state}</td>'
        "<td class=nowrap><code>{ran_by}</code></td>"
        "<td><ol class=attempts>{attempts}</ol></td>"
        "<td class='wide muted'>{stood}</td></tr>",
        id=mark.occurrence_id,
        due=when(mark.scheduled_at, now, zone),
        state=mark.state,
        ran_by=row.ran_by or "",
        attempts=attempts,
        stood=stood,
    )


def _state_filters(found: Sequence[occurrences.Row], path: str, view: View, shown: str) -> Markup:
    links = []
    for name in occurrences.FILTERS:
        n = len(occurrences.filtered(found, name))
        current = Markup(" aria-current=true" if name == shown else "")
        links.append(
            html(
                '<a href="{}#occurrences"{} id="filter-{}"><b>{}</b> {}</a>',
                _link(path, view, state=name),
                current,
                name,
                n,
                name,
            )
        )
    return html("<nav class=counts aria-label='Filter by state'>{}</nav>", join(links))


def _pager(path: str, view: View, state: str, number: int, pages: int) -> Markup:
    if pages == 1:
        return Markup()

    def to(n: int, word: str, rel: str) -> Markup:
        if not 1 <= n <= pages:
            return html("<span class=muted>{}</span>", word)
        return html(
            '<a href="{}#occurrences" rel="{}">{}</a>',
            _link(path, view, state=state, page=n),
            rel,
            word,
        )

    newer, older = to(number - 1, "Newer", "prev"), to(number + 1, "Older", "next")
    return html("<p class=pager>{} <span>page {} of {}</span> {}</p>", newer, number, pages, older)


def _options(job: Job | None) -> Markup:
    """The options that decide how the job runs (the catalog does not carry them: another
    namespace's job shows what its catalog has)."""
    if job is None:
        return Markup("<p class=muted>Options are known to that namespace's own beats.</p>")
    backoff = job.backoff
    waits = (
        f"{backoff.base:g} s"
        if backoff.kind == "fixed"
        else f"exponential from {backoff.base:g} s"
        + (f" up to {backoff.max:g} s" if backoff.max is not None else "")
    )

    def seconds(value: timedelta | None) -> str:
        return "none" if value is None else f"{value.total_seconds():g} s"

    options = [
        ("attempts", str(job.attempts)),
        ("backoff", waits),
        ("timeout", seconds(job.timeout)),
        ("overlap", job.overlap),
        ("misfire", job.misfire),
        ("misfire grace", seconds(job.misfire_grace)),
        ("coalesce", str(job.coalesce).lower()),
        ("lock ttl", seconds(job.lock_ttl)),
        ("jitter", seconds(job.jitter)),
        ("scope", job.scope),
        (
            "target",
            job.target
            if job.target == "inline"
            else f"{job.adapter} {job.task or ''} on {job.queue or 'default'}",
        ),
    ]
    items = join(html("<dt>{}</dt><dd>{}</dd>", k, v) for k, v in options)
    return html("<dl class=options id=options>{}</dl>", items)


def _coming(job: Job | None, now: datetime, zone: tzinfo) -> Markup:
    if job is None:
        return Markup("<p class=muted>Computed by that namespace's own beats.</p>")
    if job.external:
        return Markup("<p class=muted>External: it runs when something calls its trigger.</p>")
    found = upcoming(job.schedule, now, 5)
    if not found:
        return Markup("<p class=muted>None left.</p>")
    items = join(
        html(
            "<li>{}{}</li>",
            when(u.at, now, zone),
            html(" <span class=late>{}</span>", u.note) if u.note else "",
        )
        for u in found
    )
    return html("<ol id=next-runs>{}</ol>", items)


def run_now_words(
    outcome: str, occurrence_id: str, replica: str, detail: str | None, duration_ms: float | None
) -> str:
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


def _buttons(
    view: View, path: str, csrf: str, job: Job | None, pause: control.Pause | None
) -> Markup:
    """Run now, a fresh occurrence, pause or resume (the beat's own namespace); another
    namespace's page says where to do so instead."""
    if job is None:
        said = html(
            "<p class=muted>Namespace <code>{}</code> is shown read-only: run and pause "
            "its jobs from its own beat or with <code>cron-bridge --store</code>.</p>",
            view.name or "",
        )
        if pause is not None:
            said += html("<p class=paused role=status id=paused>{}</p>", pause.describe())
        return said
    return html(
        """<form class=inline method=post action="{action}">
  <input type=hidden name=csrf value="{csrf}">
  <button type=submit>Run now</button></form>
<form class=inline method=post action="{action}">
  <input type=hidden name=csrf value="{csrf}"><input type=hidden name=force value="1">
  <button type=submit title="Runs even if the current occurrence already ran">Run a fresh
  occurrence</button></form>
<p class=muted>"Run now" claims the occurrence the schedule is at, so it runs once however
often it is pressed; a fresh occurrence always runs.</p>
{pause}""",
        action=f"{path}/run/{quote(job.name, safe='')}",
        csrf=csrf,
        pause=_pause_form(path, csrf, job, pause),
    )


def job_page(
    view: View,
    path: str,
    csrf: str,
    info: JobInfo,
    job: Job | None,
    flash: str | None = None,
    state: str = "all",
    number: int = 1,
) -> Markup:
    """A job's schedule, options and next runs; its occurrences one row each, newest first,
    with every attempt, filtered by ``state`` and paged; its last occurrences' strip and
    charts; and (in the beat's own namespace) the run-now and pause buttons. ``flash``: what
    the server said of the last button pressed (shown as text)."""
    now = datetime.now(UTC)
    store = view.store
    zone = _zone(info)
    state = state if state in occurrences.FILTERS else "all"
    records, found = _marks(
        store, info.name, job, now, records=_RECORDS_PER_PAGE_VIEW, limit=_LISTED_OCCURRENCES
    )
    listed = occurrences.rows(found, records)
    shown, pages = occurrences.paged(occurrences.filtered(listed, state), number)
    number = min(max(1, number), pages)
    shown = occurrences.with_stood_aside(shown, aside.Aside(store))
    drawn = found[-STRIP_OCCURRENCES:]
    pause = control.paused(store).get(info.name)
    job_path = f"{path}/jobs/{quote(info.name, safe='')}"
    if job is not None:
        coming = None if job.external else job.schedule.next_after(now)
        next_text = _next(coming, now, pause is not None, zone)
    else:
        next_text = Markup("paused" if pause is not None else "-")
    rows = join(_occurrence_row(row, now, zone) for row in shown)
    label = f"last {len(drawn)} occurrences of {info.name}"
    pager = _pager(job_path, view, state, number, pages)
    body = html(
        """
{header}
<h2>{name}</h2>
<p><code>{schedule}</code> {tz} &middot;
{scope} &middot; {target} &middot; next run: {next_text}</p>
{flash}
{buttons}
<div class=columns>
<section><h2 id=upcoming>Next runs <span class=muted>({tz})</span></h2>
{coming}</section>
<section><h2 id=job-options>Options</h2>{options}</section>
</div>
{changes}
<div class=pictures>
<h2 id=strip>Last {drawn} occurrences</h2>
{strip}
{legend}
{duration}
{lag}
</div>
<h2 id=occurrences>Occurrences</h2>
{filters}
{pager}
<div class=scroll><table id=occurrence-table>
  <thead><tr><th>Due ({tz})</th><th>State</th><th>Ran by</th>
  <th>Attempts</th><th class=wide>Stood aside</th></tr></thead>
  <tbody>{rows}</tbody>
</table></div>
{pager}""",
        header=_header(view, path, csrf, now),
        name=info.name,
        schedule=info.schedule,
        tz=info.tz,
        scope=info.scope,
        target=info.target,
        next_text=next_text,
        flash=html("<p class=flash role=status>{}</p>", flash) if flash else Markup(),
        buttons=_buttons(view, path, csrf, job, pause),
        coming=_coming(job, now, zone),
        options=_options(job),
        changes=_changes_table(control.changes(store, info.name)[:20], now),
        drawn=len(drawn),
        strip=strips.strip(drawn, label=label, aligned=True),
        legend=strips.legend(),
        duration=strips.chart(drawn, field="duration_ms", label="Duration"),
        lag=strips.chart(drawn, field="lag_ms", label="Lag (scheduled time to start)"),
        filters=_state_filters(listed, job_path, view, state),
        pager=pager,
        rows=rows or Markup('<tr><td colspan="5" class=muted>No occurrences yet.</td></tr>'),
    )
    return page(f"cron-bridge: {info.name}", body, refresh=True)
