"""What every dashboard page shares: the style and script (and the policy that allows only
them), the frame, how times read, the sign-in form and the 404. Every time says its zone: a
record's in UTC, a job's own in its zone with the offset, with the other form on hover."""

from __future__ import annotations

import base64
import difflib
import hashlib
import itertools
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta, tzinfo
from urllib.parse import quote

from cron_bridge.clock import in_zone
from cron_bridge.http.html import Markup, html, join

__all__ = [
    "CONTENT_SECURITY_POLICY",
    "REFRESH_SECONDS",
    "login_page",
    "not_found_page",
    "page",
    "span",
    "when",
]

REFRESH_SECONDS = 5

_STYLE = """
:root { color-scheme: light dark; --muted: #6b7280; --line: #d1d5db; --ok: #15803d;
        --bad: #b91c1c; --warn: #a16207; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto;
       max-width: 76rem; padding: 1rem; }
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
.nowrap, time { white-space: nowrap; } .nowrap code { overflow-wrap: normal; }
code { font-size: .85em; overflow-wrap: anywhere; }
.completed, .enqueued, .queued { color: var(--ok); }
.failed, .aborted, .unrecorded { color: var(--bad); }
.skipped-overlap, .skipped-completed, .skipped-paused, .missed, .late { color: var(--warn); }
.running { color: #2563eb; }
.paused { border-left: 4px solid var(--warn); padding-left: .5rem; }
form.inline { display: inline; }
button, .button { font: inherit; padding: .4rem .9rem; border-radius: .4rem;
                  border: 1px solid var(--line); cursor: pointer; }
input[type=password] { font: inherit; padding: .4rem; width: 100%; max-width: 22rem; }
input[type=search] { font: inherit; padding: .3rem .4rem; width: 14rem; max-width: 100%; }
.flash { padding: .6rem .8rem; border: 1px solid var(--line); border-radius: .4rem;
         margin: .75rem 0; }
nav.counts { display: flex; flex-wrap: wrap; gap: .4rem; margin: .75rem 0; }
nav.counts a { padding: .25rem .7rem; border: 1px solid var(--line); border-radius: 1rem;
               text-decoration: none; color: inherit; }
nav.counts a[aria-current] { font-weight: 600; border-color: currentColor; }
nav.counts b { font-variant-numeric: tabular-nums; }
.m { fill: #9ca3af; } .m.completed { fill: #16a34a; } .m.running { fill: #2563eb; }
.m.queued { fill: #93c5fd; } .m.failed, .m.aborted { fill: #dc2626; }
.m.missed { fill: #ea580c; } .m.skipped-overlap { fill: #ca8a04; } .m.paused { fill: #7c3aed; }
.m.unrecorded { fill: #7f1d1d; }
svg.strip { display: block; max-width: 100%; height: auto; margin-top: .25rem; }
.pictures { max-width: 36rem; } .pictures svg.strip { width: 100%; }
.legend { font-size: .8rem; color: var(--muted); display: flex; flex-wrap: wrap; gap: .2rem .8rem; }
figure.chart { margin: .5rem 0 1rem; }
figure.chart svg { width: 100%; height: auto; } figcaption { font-size: .85rem; }
.axis { font-size: 9px; fill: var(--muted); } .axis-line { stroke: var(--line); }
select { font: inherit; padding: .3rem; }
ol.attempts { margin: 0; padding-left: 1.2rem; } ol.attempts li { margin: 0 0 .15rem; }
details pre { white-space: pre-wrap; overflow-wrap: anywhere; font-size: .8rem; margin: .3rem 0;
              max-height: 24rem; overflow-y: auto; }
dl.options { display: grid; grid-template-columns: max-content 1fr; gap: .15rem 1rem; margin: 0; }
dl.options dt { color: var(--muted); } dl.options dd { margin: 0; }
.columns { display: flex; flex-wrap: wrap; gap: 0 2.5rem; }
.pager { display: flex; gap: 1rem; align-items: baseline; margin: .5rem 0; }
@media (max-width: 40rem) { .wide { display: none; } body { padding: .6rem; } }
"""

# The page's one script: reload every few seconds, unless someone is typing in a form or
# reading a traceback. Allowed by its hash in the Content-Security-Policy, as is the style.
_SCRIPT = f"""
  setInterval(() => {{
    const active = document.activeElement;
    const typing = active && ["INPUT", "TEXTAREA", "SELECT"].includes(active.tagName);
    if (!typing && !document.querySelector("details[open]")) location.reload();
  }}, {REFRESH_SECONDS * 1000});
"""


def _source(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


# Nothing but the page's own style and script, no frame, no form posted elsewhere: a value
# that escaped its escaping still could not run, load or send anything.
CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; script-src {_source(_SCRIPT)}; style-src {_source(_STYLE)}; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


def page(title: str, body: Markup, *, refresh: bool) -> Markup:
    """A whole page: ``body`` in the frame, with the style, and the reloading script when
    ``refresh``."""
    script = html("<script>{}</script>", Markup(_SCRIPT)) if refresh else Markup()
    return html(
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        "<title>{}</title><style>{}</style></head><body>{}{}</body></html>",
        title,
        Markup(_STYLE),
        body,
        script,
    )


def when(value: datetime | None, now: datetime, zone: tzinfo | None = None) -> Markup:
    """``value`` as a person reads it, with how long ago or ahead: in UTC and marked so (a
    record's time), or in ``zone`` with its offset (a job's time), the other form on hover.
    Never fails: a time without a zone is shown as its ISO text, saying so; one that has no
    place in ``zone`` (or in UTC) at the ends of the calendar, in its own offset."""
    if value is None:
        return Markup("-")
    if value.utcoffset() is None:
        return html("<time>{}</time> <span class=muted>(no zone)</span>", value.isoformat())
    seconds = (value - now).total_seconds()
    utc = in_zone(value, UTC)
    in_utc = f"{_clock_text(utc)} {_offset_name(utc)}"
    if zone is None:
        shown, other = in_utc, None
    else:
        local = in_zone(value, zone)
        shown, other = f"{_clock_text(local)} {local.isoformat()[-6:]}", in_utc
    ago = span(abs(seconds))
    relative = f"in {ago}" if seconds > 0 else f"{ago} ago"
    title = html(' title="{}"', other) if other is not None else Markup()
    return html(
        '<time datetime="{}"{}>{}</time> <span class=muted>({})</span>',
        value.isoformat(),
        title,
        shown,
        relative,
    )


def _clock_text(value: datetime) -> str:
    # Not strftime: its %Y is not zero-padded everywhere (year 1 reads "1-01-01").
    return value.replace(tzinfo=None).isoformat(sep=" ", timespec="seconds")


def _offset_name(value: datetime) -> str:
    return "UTC" if value.utcoffset() == timedelta(0) else value.isoformat()[-6:]


def span(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f}m"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def login_page(path: str, *, wrong: bool = False) -> Markup:
    """The form that asks for the secret; it shows nothing of the jobs."""
    message = Markup('<p class="flash failed" role=alert>Wrong secret.</p>' if wrong else "")
    body = html(
        """
<h1>cron-bridge</h1>
<p class=muted>Sign in with the beat's secret (<code>--secret</code> or
<code>CRON_BRIDGE_SECRET</code>).</p>
{}
<form method=post action="{}/login">
  <p><label for=secret>Secret</label><br>
  <input type=password id=secret name=secret autocomplete=current-password required autofocus></p>
  <p><button type=submit>Sign in</button></p>
</form>""",
        message,
        path,
    )
    return page("cron-bridge: sign in", body, refresh=False)


_GUESSED = 5000  # names a 404 compares with what was asked for


def not_found_page(path: str, what: str, known: Iterable[str]) -> Markup:
    """The dashboard's 404: what was not found, the closest job names, a way back."""
    what = what[:200]
    # Of names sharing its first letter, the first few thousand: a guess among 100,000
    # names would take seconds.
    candidates = list(itertools.islice((n for n in known if n[:1] == what[:1]), _GUESSED))
    close = difflib.get_close_matches(what, candidates, n=3, cutoff=0.6)
    links = join(
        html('<li><a href="{}/jobs/{}">{}</a></li>', path, quote(name, safe=""), name)
        for name in close
    )
    hint = html("<p>Did you mean:</p><ul>{}</ul>", links) if close else Markup()
    body = html(
        """
<h1>No job called {}</h1>
{}
<p><a href="{}/">All jobs</a></p>""",
        repr(what),
        hint,
        path,
    )
    return page("cron-bridge: not found", body, refresh=False)
