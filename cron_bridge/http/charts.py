"""What the dashboard draws: a job's last occurrences, one mark each, and its duration and lag
over time, as inline SVG (no script, no external asset).

An occurrence's state comes from every record written for it: the worker's or the inline
run's last outcome wins over the beat's ``enqueued``, a completion over everything, and a run
in flight (the holder of the job's overlap lock names it) shows as ``running``. An occurrence
the schedule had and no record names is drawn from its claim: ``claimed`` while a replica
holds it (it has not written yet, or died before it enqueued), ``unrecorded`` when nobody
claimed it once ``misfire_grace`` has passed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from cron_bridge.http.html import Markup, html, join
from cron_bridge.jobs import CLAIM_TTL, Occurrence
from cron_bridge.plumbing.keys import parse_lock_owner
from cron_bridge.schedules import Schedule, latest_occurrences
from cron_bridge.stores.records import RunRecord

__all__ = [
    "STATES",
    "Mark",
    "Running",
    "chart",
    "legend",
    "marks",
    "ms_text",
    "parse_holder",
    "strip",
    "unrecorded",
    "unrecorded_marks",
]

# Drawn states, in the legend's order.
STATES = (
    "completed",
    "running",
    "queued",
    "failed",
    "aborted",
    "missed",
    "skipped-overlap",
    "paused",
    "claimed",
    "unrecorded",
)
_AS_STATE = {"skipped-paused": "paused", "skipped-completed": "completed", "enqueued": "queued"}
_FINAL = ("failed", "aborted", "skipped-overlap", "skipped-paused", "missed", "skipped-completed")
_MARK_W, _GAP, _STRIP_H = 6, 1, 16
_SLOTS = 50  # a chart is as wide as 50 occurrences, however few there are yet
_AXIS, _STEP, _BAR_W = 40, 10, 8  # a chart's axis labels, and each occurrence's slot and bar
# How far back unrecorded occurrences are looked for: as far as the schedules are read back.
_LOOK_BACK_MAX = timedelta(days=30 * 366)


@dataclass(frozen=True, slots=True)
class Running:
    """A run in flight, read from the job's overlap lock."""

    occurrence_id: str
    replica: str


@dataclass(frozen=True, slots=True)
class Mark:
    """One occurrence as drawn."""

    occurrence_id: str
    scheduled_at: datetime
    state: str
    replica: str | None = None
    duration_ms: float | None = None
    lag_ms: float | None = None  # from its scheduled time to the start of its first run
    note: str | None = None

    def title(self) -> str:
        due = self.scheduled_at.replace(tzinfo=None).isoformat(sep=" ", timespec="seconds")
        text = f"{due} UTC: {self.state}"
        if self.replica:
            text += f" on {self.replica}"
        if self.note:
            text += f" ({self.note})"
        if self.duration_ms is not None:
            text += f", ran {ms_text(self.duration_ms)}"
        if self.lag_ms is not None:
            text += f", lag {ms_text(self.lag_ms)}"
        return text


def parse_holder(job: str, holder: str | None) -> Running | None:
    """The run an overlap lock's owner (``replica|occurrence id|token``) names, if it is one
    of ``job``'s; anything else in the store is ignored."""
    named = parse_lock_owner(holder)
    if named is None:
        return None
    replica, occurrence_id = named
    try:
        occurrence = Occurrence.parse(occurrence_id)
    except ValueError:
        return None
    if occurrence.job != job or not replica:
        return None
    return Running(occurrence_id=occurrence_id, replica=replica[:200])


def marks(
    records: Iterable[RunRecord], running: Running | None = None, *, limit: int = 50
) -> list[Mark]:
    """The latest ``limit`` occurrences in the records, oldest first."""
    by_occurrence: dict[str, list[RunRecord]] = {}
    for record in records:
        by_occurrence.setdefault(record.occurrence_id, []).append(record)
    if running is not None:
        by_occurrence.setdefault(running.occurrence_id, [])
    found = []
    for occurrence_id, group in by_occurrence.items():
        try:
            scheduled = Occurrence.parse(occurrence_id).scheduled_at
        except ValueError:
            continue
        here = running if running is not None and running.occurrence_id == occurrence_id else None
        found.append(_mark(occurrence_id, scheduled, group, here))
    found.sort(key=lambda m: m.scheduled_at)
    return found[-limit:]


def _mark(
    occurrence_id: str, scheduled: datetime, group: list[RunRecord], running: Running | None
) -> Mark:
    group = sorted(group, key=lambda r: (r.started_at, r.attempt))
    runs = [r for r in group if r.outcome in ("completed", *_FINAL)]
    starts = [r for r in runs if r.outcome in ("completed", "failed", "aborted")]
    lag = (starts[0].started_at - scheduled).total_seconds() * 1000 if starts else None
    completed = [r for r in group if r.outcome == "completed"]
    if completed:
        last = completed[-1]
        return Mark(occurrence_id, scheduled, "completed", last.replica, last.duration_ms, lag)
    if running is not None:
        return Mark(occurrence_id, scheduled, "running", running.replica, None, lag)
    if runs:
        last = runs[-1]
        state = _AS_STATE.get(last.outcome, last.outcome)
        return Mark(occurrence_id, scheduled, state, last.replica, last.duration_ms, lag)
    queued = [r for r in group if r.outcome == "enqueued"]
    if queued:
        return Mark(occurrence_id, scheduled, "queued", queued[-1].replica)
    return Mark(occurrence_id, scheduled, "claimed")


def unrecorded(
    found: Sequence[Mark],
    records: Sequence[RunRecord],
    schedule: Schedule,
    job: str,
    now: datetime,
    *,
    limit: int = 50,
    after_newest: bool = False,
) -> list[Occurrence]:
    """The occurrences ``schedule`` had up to ``now`` that no drawn mark names, oldest first:
    the latest ``limit`` since the oldest mark, and since the oldest record (every record of
    an occurrence due after it is among ``records``, which are the newest by start). Nothing
    before the job's first drawn occurrence; the schedule is the job's current one.

    ``after_newest``: only those due after the newest mark (a job that stopped running), at
    the cost of one look at the schedule while there are none; a page of every job asks
    this, since walking a cron schedule costs about 0.15 ms an occurrence."""
    if not found:
        return []
    start = found[0].scheduled_at
    if after_newest:
        start = found[-1].scheduled_at
    if records:
        start = max(start, min(r.started_at for r in records))
    # A record dated at the ends of the calendar (forged, or a clock gone wrong) does not
    # stretch the window: nothing is looked for after now, nor further back than the schedule
    # is read back anywhere else, so the window's arithmetic stays inside the calendar.
    start = max(start, now - _LOOK_BACK_MAX)
    if start >= now:
        return []
    try:
        if after_newest and schedule.next_after(start) > now:
            return []
        due = [
            Occurrence(job=job, scheduled_at=at)
            for at in latest_occurrences(schedule, start, now, limit)
        ]
    except OverflowError:  # a schedule whose own times reach the end of the calendar
        return []
    shown = {m.occurrence_id for m in found}
    return [occurrence for occurrence in due if occurrence.id not in shown]


def unrecorded_marks(
    occurrences: Sequence[Occurrence],
    owners: Sequence[str | None],
    now: datetime,
    grace: timedelta,
    fire_at: Callable[[datetime], datetime] = lambda at: at,
) -> list[Mark]:
    """Marks for occurrences no record names, from their claims' owners: ``claimed`` while
    one holds it; ``unrecorded`` when none does once ``grace`` has passed since it was fired
    (``fire_at``: its scheduled time plus its share of the job's jitter); before, a late
    replica may still claim it."""
    drawn = []
    for occurrence, owner in zip(occurrences, owners, strict=True):
        at = occurrence.scheduled_at
        if owner is not None:
            note = "nothing recorded: not written yet, or it died before it enqueued"
            drawn.append(Mark(occurrence.id, at, "claimed", owner[:200], note=note))
        elif now - at >= CLAIM_TTL:
            drawn.append(
                Mark(
                    occurrence.id,
                    at,
                    "unrecorded",
                    note="no record; its claim, if any, expired after 48 h",
                )
            )
        elif now - fire_at(at) > grace:
            note = "nobody claimed it: no replica was up when it was due, or the store was down"
            drawn.append(Mark(occurrence.id, at, "unrecorded", note=note))
    return drawn


def strip(found: Sequence[Mark], *, label: str, aligned: bool = False) -> Markup:
    """One mark per occurrence, coloured by state, each with its title (shown on hover).
    ``aligned``: on the charts' grid (one slot of ``chart`` per occurrence, as wide as 50),
    so that drawn at the charts' width each mark stands above its bars."""
    left, step, mark_w = (_AXIS, _STEP, _BAR_W) if aligned else (0, _MARK_W + _GAP, _MARK_W)
    width = left + max(1, len(found)) * step
    if aligned:
        width = left + max(_SLOTS, len(found)) * step
    rects = join(
        html(
            '<rect class="m {}" x="{}" y="0" width="{}" height="{}" rx="1"><title>{}</title>'
            "</rect>",
            m.state,
            left + i * step,
            mark_w,
            _STRIP_H,
            m.title(),
        )
        for i, m in enumerate(found)
    )
    return html(
        '<svg class=strip viewBox="0 0 {w} {h}" width="{w}" height="{h}" role=img '
        'aria-label="{label}: {counts}">{rects}</svg>',
        w=width,
        h=_STRIP_H,
        label=label,
        counts=_summary(found),
        rects=rects,
    )


def chart(found: Sequence[Mark], *, field: str, label: str) -> Markup:
    """Bars of ``field`` (``duration_ms`` or ``lag_ms``) per occurrence, oldest first, coloured
    by state, with the largest value on the axis."""
    values = [getattr(m, field) for m in found]
    known = [v for v in values if v is not None]
    if not known:
        return html("<p class=muted>No {} recorded yet.</p>", label.lower())
    top = max(max(known), 1.0)
    step, height, base = _STEP, 60, 70
    bars = []
    for i, (mark, value) in enumerate(zip(found, values, strict=True)):
        if value is None:
            continue
        tall = max(1.0, min(value, top) / top * height)
        bars.append(
            html(
                '<rect class="m {}" x="{}" y="{:.1f}" width="{}" height="{:.1f}">'
                "<title>{}</title></rect>",
                mark.state,
                _AXIS + i * step,
                base - tall,
                _BAR_W,
                tall,
                mark.title(),
            )
        )
    width = _AXIS + max(_SLOTS, len(found)) * step
    return html(
        '<figure class=chart><figcaption>{label}</figcaption><svg viewBox="0 0 {width} 80" '
        'role=img aria-label="{label}, up to {top}"><text x="0" y="14" class=axis>{top}</text>'
        '<text x="0" y="{base}" class=axis>0</text>'
        '<line x1="38" y1="{base}" x2="{width}" y2="{base}" class=axis-line />'
        "{bars}</svg></figure>",
        label=label,
        width=width,
        top=ms_text(top),
        base=base,
        bars=join(bars),
    )


def legend() -> Markup:
    items = join(
        (
            html(
                '<span><svg width="10" height="10" aria-hidden=true><rect class="m {}" '
                'width="10" height="10" rx="1"/></svg> {}</span>',
                state,
                state,
            )
            for state in STATES
        ),
        " ",
    )
    return html("<p class=legend>{}</p>", items)


def _summary(found: Sequence[Mark]) -> str:
    counts: dict[str, int] = {}
    for mark in found:
        counts[mark.state] = counts.get(mark.state, 0) + 1
    if not counts:
        return "no occurrences yet"
    return ", ".join(f"{n} {state}" for state, n in counts.items())


def ms_text(value: float) -> str:
    """Milliseconds as a person reads them: ``12 ms``, ``1.5 s``, ``2.1 min``."""
    if abs(value) < 1000:
        return f"{value:.0f} ms"
    if abs(value) < 120_000:
        return f"{value / 1000:.1f} s"
    return f"{value / 60_000:.1f} min"
