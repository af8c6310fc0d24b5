"""A job's page of the panel: its options and next runs, its occurrences one row each (every
attempt with its outcome, duration and lag, the replicas that stood aside counted, the
traceback behind a click), filtered by state and paged, who paused it, and the buttons: "run
now" through the normal trigger, saying in words what it did, pause and resume."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING
from urllib.parse import quote

from cron_bridge.backoff import Backoff
from cron_bridge.control import lost_claims
from cron_bridge.control import pause as control
from cron_bridge.control.catalog import JobInfo
from cron_bridge.http import charts, occurrences
from cron_bridge.http.html import Markup, html, join
from cron_bridge.http.layout import page, when
from cron_bridge.http.views import (
    STRIP_OCCURRENCES,
    View,
    header,
    link,
    marks_of,
    next_run,
    zone_of,
)
from cron_bridge.options import OPTIONS
from cron_bridge.stores.records import RunRecord
from cron_bridge.windows import upcoming

if TYPE_CHECKING:
    from cron_bridge.jobs import Job

__all__ = ["job_page", "run_now_words"]

# Records read for a job's page, however far it pages: what the store keeps, at most this.
_RECORDS_PER_PAGE_VIEW = 2000
_LISTED_OCCURRENCES = 500  # occurrences a job's page lists (at most 20 pages)


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


def _attempt(record: RunRecord, scheduled: datetime) -> Markup:
    """One attempt of an occurrence: its outcome, where, how long, its lag, why."""
    lag = (record.started_at - scheduled).total_seconds() * 1000
    facts = [html("on <code>{}</code>", record.replica)]
    if record.outcome == "enqueued":
        facts.append(html("sent {} after it was due", charts.ms_text(lag)))
    elif record.outcome in ("completed", "failed", "aborted"):
        if record.duration_ms is not None:
            facts.append(html("ran {}", charts.ms_text(record.duration_ms)))
        facts.append(html("lag {}", charts.ms_text(lag)))
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
                link(path, view, state=name),
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
            link(path, view, state=state, page=n),
            rel,
            word,
        )

    newer, older = to(number - 1, "Newer", "prev"), to(number + 1, "Older", "next")
    return html("<p class=pager>{} <span>page {} of {}</span> {}</p>", newer, number, pages, older)


def _options(job: Job | None) -> Markup:
    """The options that decide how the job runs, each ``Job`` keeps of the definition
    (``cron_bridge.options``), in its order; the schedule's own are in the heading. Mappings
    (``kwargs``, ``send``) show their keys, a monitor its kind: their values may be secrets.
    The catalog does not carry options: another namespace's job shows what its catalog has."""
    if job is None:
        return Markup("<p class=muted>Options are known to that namespace's own beats.</p>")
    kept = {field.name for field in fields(job)}
    items = join(
        html("<dt>{}</dt><dd>{}</dd>", name.replace("_", " "), _option_value(job, name))
        for name, option in OPTIONS.items()
        if name in kept and option.old_name_of is None
    )
    return html("<dl class=options id=options>{}</dl>", items)


def _option_value(job: Job, name: str) -> str:
    value = getattr(job, name)
    if name == "target":
        return (
            "inline"
            if value == "inline"
            else f"{job.adapter} {job.task or ''} on {job.queue or 'default'}"
        )
    if name == "monitor":
        return "the process's default" if value is None else type(value).__name__.lower()
    if isinstance(value, Backoff):
        if value.kind == "fixed":
            return f"{value.base:g} s"
        limit = f" up to {value.max:g} s" if value.max is not None else ""
        return f"exponential from {value.base:g} s{limit}"
    if isinstance(value, timedelta):
        return f"{value.total_seconds():g} s"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Mapping):
        return ", ".join(map(str, value)) or "none"
    return "none" if value is None else str(value)


def _coming(job: Job | None, now: datetime, zone: tzinfo) -> Markup:
    if job is None:
        return Markup("<p class=muted>Computed by that namespace's own beats.</p>")
    if job.on_demand:
        return Markup(
            "<p class=muted>On demand: it runs only when something calls its trigger.</p>"
        )
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
    took = f" in {charts.ms_text(duration_ms)}" if duration_ms is not None else ""
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
    zone = zone_of(info)
    state = state if state in occurrences.FILTERS else "all"
    records, found = marks_of(
        store, info.name, job, now, records=_RECORDS_PER_PAGE_VIEW, limit=_LISTED_OCCURRENCES
    )
    listed = occurrences.rows(found, records)
    shown, pages = occurrences.paged(occurrences.filtered(listed, state), number)
    number = min(max(1, number), pages)
    shown = occurrences.with_stood_aside(shown, lost_claims.LostClaims(store))
    drawn = found[-STRIP_OCCURRENCES:]
    pause = control.pause_of(store, info.name)
    job_path = f"{path}/jobs/{quote(info.name, safe='')}"
    if job is not None:
        coming = None if job.on_demand else job.schedule.next_after(now)
        next_text = next_run(coming, now, pause is not None, zone)
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
        header=header(view, path, csrf, now),
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
        strip=charts.strip(drawn, label=label, aligned=True),
        legend=charts.legend(),
        duration=charts.chart(drawn, field="duration_ms", label="Duration"),
        lag=charts.chart(drawn, field="lag_ms", label="Lag (scheduled time to start)"),
        filters=_state_filters(listed, job_path, view, state),
        pager=pager,
        rows=rows or Markup('<tr><td colspan="5" class=muted>No occurrences yet.</td></tr>'),
    )
    return page(f"cron-bridge: {info.name}", body, refresh=True)
