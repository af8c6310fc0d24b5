"""The panel's overview: counts of the jobs failing, paused, late and running (each a
filter), a search over job names, each job with its schedule, next run, last run anywhere in
the cluster and its last occurrences; the live replicas from their heartbeats."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from urllib.parse import quote

from cron_bridge import refusals
from cron_bridge.control import pause as control
from cron_bridge.control.catalog import JobInfo
from cron_bridge.http import charts
from cron_bridge.http.html import Markup, html, join
from cron_bridge.http.layout import page, when
from cron_bridge.http.tally import Counted, Tally, count
from cron_bridge.http.views import (
    STRIP_OCCURRENCES,
    View,
    header,
    last_run,
    link,
    marks_of_many,
    next_run,
    zone_of,
)
from cron_bridge.stores.records import RunRecord

if TYPE_CHECKING:
    from cron_bridge.jobs import Job

__all__ = ["PER_PAGE", "overview_page"]

_JOB_FILTERS = ("all", "failing", "paused", "late", "running")
PER_PAGE = 50  # jobs a page of the overview shows


@dataclass(frozen=True, slots=True)
class _JobState:
    """A job as the overview counts it."""

    info: JobInfo
    job: Job | None
    marks: list[charts.Mark]
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


_COUNT_CSS = {"failing": "failed", "late": "late", "running": "running", "paused": "skipped-paused"}


def _counts(
    counted: Counted | None, jobs: int, view: View, path: str, shown: str, q: str
) -> Markup:
    """The counts at the top of the overview, each a link that filters the jobs by it (each
    ``?`` while the first count of the namespace is not ready)."""
    numbers: dict[str, int | None] = {"all": jobs}
    for name in _JOB_FILTERS[1:]:
        numbers[name] = None if counted is None else len(counted.of(name))
    links = []
    for name, n in numbers.items():
        current = Markup(" aria-current=true" if name == shown else "")
        label = "jobs" if name == "all" else name
        mark = html(' class="{}"', _COUNT_CSS[name]) if name in _COUNT_CSS and n else Markup()
        links.append(
            html(
                '<a href="{}"{} id="count-{}"><b{}>{}</b> {}</a>',
                link(f"{path}/", view, state=name, q=q),
                current,
                name,
                mark,
                "?" if n is None else n,
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
    href = f"{path}/jobs/{quote(info.name, safe='')}{view.query()}"
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
    zone = zone_of(info)
    if job is not None:  # another namespace's schedule is its own processes' to compute
        coming = None if job.on_demand else job.schedule.next_after(now)
        next_cell = next_run(coming, now, s.paused, zone)
    else:
        next_cell = next_run(None, now, True, zone) if s.paused else Markup("-")
    flags = join(
        html(' <span class="{}">{}</span>', css, word)
        for word, css, on in (
            ("failing", "failed", s.failing),
            ("late", "late", s.late(now)),
            ("running", "running", s.running),
        )
        if on
    )
    drawn = charts.strip(s.marks, label=f"last {len(s.marks)} occurrences of {info.name}")
    return html(
        '<tr><td><a href="{}">{}</a>{}{}</td><td><code>{}</code>'
        " <span class=muted>{}</span></td><td class=wide>{} / {}</td>"
        "<td>{}</td>{}</tr>",
        href,
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


def overview_page(
    view: View,
    path: str,
    csrf: str,
    q: str = "",
    state: str = "all",
    number: int = 1,
    tally: Tally | None = None,
) -> Markup:
    """Counts of the jobs (failing, paused, late, running), a search over their names, a page
    of ``PER_PAGE`` jobs each with its schedule, next and last run and its last occurrences;
    the live replicas of the namespace.

    What it reads costs what it shows: the names, filtered and paged in memory; the counts
    from ``tally`` (made once for every tab, at most every few seconds, from the run
    summaries: without one, counted here); each job of the page from its own records."""
    now = datetime.now(UTC)
    store = view.store
    q, state = q.strip()[:200], state if state in _JOB_FILTERS else "all"
    names = view.names()
    if tally is None:
        counted: Counted | None = count(store, names, view.job, now)
    else:
        counted = tally.counted(view.name, store, view.names, view.job)
    wanted = q.casefold()
    shown_names = [name for name in names if wanted in name.casefold()] if q else names
    if state != "all":
        chosen = counted.of(state) if counted is not None else frozenset()
        shown_names = [name for name in shown_names if name in chosen]
    pages = max(1, -(-len(shown_names) // PER_PAGE))
    number = min(max(number, 1), pages)
    on_page = shown_names[(number - 1) * PER_PAGE : number * PER_PAGE]
    paused = control.pauses_of(store, on_page) if on_page else {}
    infos = view.infos(on_page)
    drawn = marks_of_many(store, [(info.name, job) for info, job in infos], now, after_newest=True)
    states = []
    for info, job in infos:
        records, found = drawn[info.name]
        states.append(_JobState(info, job, found, last_run(records), info.name in paused))
    rows = join(_job_row(s, view, path, now) for s in states)
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
    filtered = "" if len(shown_names) == len(names) else f" of {len(names)}"
    empty = "No jobs." if not names else "No job matches."
    if counted is None and state != "all":
        empty = "Counting the jobs: reload in a moment."
    body = html(
        """
{header}
{counts}{counting}
{search}
<h2 id=jobs>Jobs ({shown}{filtered})</h2>
<div class=scroll><table>
  <thead><tr><th>Job and its last {strip} occurrences</th><th>Schedule</th>
  <th class=wide>Scope / target</th><th>Next run (job's zone)</th>
  <th>Last run</th><th>Outcome</th><th class=wide>Replica</th></tr></thead>
  <tbody>{rows}</tbody>
</table></div>
{pager}
{legend}
{refused}
<h2 id=replicas>Live replicas ({replicas})</h2>
<div class=scroll><table>
  <thead><tr><th>Replica</th><th>Heartbeat valid until</th><th>Clock vs store</th></tr></thead>
  <tbody>{replica_rows}</tbody>
</table></div>""",
        header=header(view, path, csrf, now),
        counts=_counts(counted, len(names), view, path, state, q),
        counting=_counting(counted, tally, view.name, now),
        search=_search(path, view, q, state),
        shown=len(shown_names),
        filtered=filtered,
        strip=STRIP_OCCURRENCES,
        rows=rows or html('<tr><td colspan="7" class=muted>{}</td></tr>', empty),
        pager=_pager(path, view, q, state, number, pages, len(shown_names)),
        legend=charts.legend(),
        refused=_refused() if view.name is None else Markup(""),
        replicas=len(replicas),
        replica_rows=replica_rows or Markup('<tr><td colspan="3" class=muted>None.</td></tr>'),
    )
    return page("cron-bridge", body, refresh=True)


def _counting(
    counted: Counted | None, tally: Tally | None, namespace: str | None, now: datetime
) -> Markup:
    """When the counts were made, or why there are none yet."""
    failed = tally.failure(namespace) if tally is not None else None
    if counted is None:
        said = failed or "counting the jobs: the counts show on the next reload"
        return html("<p class=muted id=counted>{}</p>", said)
    age = max(0.0, (now - counted.at).total_seconds())
    late = html(" <span class=failed>(not counted since: {})</span>", failed) if failed else ""
    return html("<p class=muted id=counted>Counted {} s ago.{}</p>", f"{age:.0f}", late)


def _pager(
    path: str, view: View, q: str, state: str, number: int, pages: int, total: int
) -> Markup:
    """Links to the page before and after, and which jobs this page shows."""
    if pages <= 1:
        return Markup()
    first = (number - 1) * PER_PAGE + 1
    last = min(number * PER_PAGE, total)
    before = (
        html(
            '<a href="{}" rel=prev>Previous</a>',
            link(f"{path}/", view, state=state, q=q, page=number - 1),
        )
        if number > 1
        else Markup()
    )
    after = (
        html(
            '<a href="{}" rel=next>Next</a>',
            link(f"{path}/", view, state=state, q=q, page=number + 1),
        )
        if number < pages
        else Markup()
    )
    return html(
        "<nav class=pager id=job-pages aria-label=Pages>{} <span>jobs {} to {} of {},"
        " page {} of {}</span> {}</nav>",
        before,
        first,
        last,
        total,
        number,
        pages,
        after,
    )


def _refused() -> Markup:
    """The declarations this beat read and does not run (an ``rq cron`` registration RQ
    refuses), each with why: nothing when there are none."""
    found = refusals.refused()
    if not found:
        return Markup("")
    rows = join(
        html(
            "<tr><td><code>{}</code></td><td>{}</td><td class=failed>refused: {}</td></tr>",
            r.name,
            r.source,
            r.reason,
        )
        for r in found
    )
    return html(
        """<h2 id=refused>Refused declarations ({count})</h2>
<p class=muted>Read from the config and not run; the other jobs run.</p>
<div class=scroll><table>
  <thead><tr><th>Declaration</th><th>Declared in</th><th>Why</th></tr></thead>
  <tbody>{rows}</tbody>
</table></div>""",
        count=len(found),
        rows=rows,
    )


def _offset(ms: float | None) -> Markup:
    """A replica's clock offset: how far the store's clock is ahead of it."""
    if ms is None:
        return Markup("<span class=muted>same clock</span>")
    text = f"{ms / 1000:+.3f} s"
    return html("<span class=failed>{}</span>", text) if abs(ms) > 1000 else html("{}", text)
