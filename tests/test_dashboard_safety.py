"""The dashboard's second line of defence: pages built of escaped values, a policy that lets
only the page's own script and style run, a status line that says only what this server
said to this session, and times at the ends of the calendar shown (on the pages and by
``history --tz``) instead of failing."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner

from cron_bridge.cli.main import main
from cron_bridge.clock import in_zone
from cron_bridge.http.html import Markup, escape, html, join
from cron_bridge.http.layout import when
from cron_bridge.jobs import Occurrence
from cron_bridge.stores import RunRecord, store_from_url
from tests.test_http_fuzz import BASE, JOB, SECRET, Surface

END = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
START = datetime(1, 1, 1, tzinfo=UTC)


def test_html_escapes_every_value_that_is_not_markup() -> None:
    """Values are escaped (quotes too), control characters shown as escapes; Markup is kept;
    adding to and joining Markup escapes the other side; numbers keep their format; a
    template with an unquoted attribute value is refused."""
    hostile = "<script>\"x\"&'y'\x1b[2J\u202e"
    assert html('<td title="{}">{}</td>', hostile, Markup("<b>ok</b>")) == (
        '<td title="&lt;script&gt;&quot;x&quot;&amp;&#x27;y&#x27;\\x1b[2J\\u202e"><b>ok</b></td>'
    )
    assert isinstance(html("{}", "x"), Markup)
    assert Markup("<b>") + "<i>" == "<b>&lt;i&gt;" and isinstance(Markup() + "x", Markup)
    assert "<i>" + Markup("<b>") == "&lt;i&gt;<b>"
    assert join(["<a>", Markup("<b>")], ", ") == "&lt;a&gt;, <b>"
    assert html("{:.1f} {}", 1.25, 7) == "1.2 7"
    assert escape("\ud800x") == "\\ud800x"
    with pytest.raises(ValueError, match="quote the attribute"):
        html("<a href={}>", "x onclick=y")


def test_times_at_the_ends_of_the_calendar_are_shown_without_failing() -> None:
    """In a zone that would carry it past year 9999 or before year 1, a time is shown in
    UTC; one without a zone is shown as its own text, saying so."""
    warsaw, new_york = ZoneInfo("Europe/Warsaw"), ZoneInfo("America/New_York")
    assert in_zone(END, warsaw) == END and in_zone(END, warsaw).tzinfo is UTC
    assert in_zone(START, new_york) == START
    east = datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-5)))
    assert in_zone(east, UTC) is east  # past 9999 in UTC too: as it is
    assert in_zone(datetime(2026, 6, 1, 12), warsaw) == datetime(2026, 6, 1, 12)
    now = datetime(2026, 12, 2, tzinfo=UTC)
    assert "9999-12-31 23:59:59 UTC" in when(END, now, warsaw)
    assert "0001-01-01 00:00:00 UTC" in when(START, now, new_york)
    assert "9999-12-31 23:00:00 -05:00" in when(east, now)
    assert when(datetime(2026, 12, 1, 10), now) == (
        "<time>2026-12-01T10:00:00</time> <span class=muted>(no zone)</span>"
    )


def _digest(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_every_answer_carries_a_policy_that_allows_the_pages_own_script_and_style_only() -> None:
    """Pages, the sign-in form, JSON and redirects all carry the policy; it names the hashes
    of the page's one script and one style and nothing else may run, load, frame or post
    elsewhere; no referrer is sent and types are not sniffed."""
    surface = Surface()
    _, _, page = surface.call_wsgi("GET", f"{BASE}/jobs/{JOB}", cookie=surface.cookie)
    text = page.decode()
    (script,) = re.findall(r"<script>(.*?)</script>", text, re.S)
    (style,) = re.findall(r"<style>(.*?)</style>", text, re.S)
    answers = [
        surface.call_wsgi("GET", f"{BASE}/", cookie=surface.cookie),
        surface.call_wsgi("GET", f"{BASE}/"),  # the sign-in form
        surface.call_wsgi("GET", f"{BASE}/jobs/nothing", cookie=surface.cookie),
        surface.call_wsgi("GET", f"{BASE}/healthz"),
        surface.call_wsgi(
            "POST",
            f"{BASE}/login",
            body="secret=wrong-wrong-wrong",
            content_type="application/x-www-form-urlencoded",
        ),
    ]
    for status, headers, _ in answers:
        named = dict(headers)
        policy = dict(
            [*part.split(" ", 1), ""][:2] for part in named["Content-Security-Policy"].split("; ")
        )
        assert policy == {
            "default-src": "'none'",
            "script-src": _digest(script),
            "style-src": _digest(style),
            "form-action": "'self'",
            "frame-ancestors": "'none'",
            "base-uri": "'none'",
        }, (status, policy)
        assert named["X-Content-Type-Options"] == "nosniff"
        assert named["Referrer-Policy"] == "no-referrer"
    assert " style=" not in text  # no style attribute: the policy would refuse it


def test_the_status_line_says_only_what_this_server_said_to_this_session() -> None:
    """After "Run now" the page says what happened; a link with words of its own, a seal
    tampered with, or a seal made for another session shows no status line at all."""
    surface = Surface()
    status, headers, _ = surface.call_wsgi(
        "POST",
        f"{BASE}/run/{JOB}",
        body=f"csrf={surface.csrf}",
        cookie=surface.cookie,
        content_type="application/x-www-form-urlencoded",
    )
    assert status == 303
    location = urlsplit(dict(headers)["Location"])
    sealed = parse_qs(location.query)
    assert sealed["said"][0].startswith("Ran the occurrence due ")

    def status_line(query: dict[str, str], cookie: str = surface.cookie) -> str | None:
        _, _, page = surface.call_wsgi("GET", location.path, query=urlencode(query), cookie=cookie)
        found = re.search(r"<p class=flash role=status>(.*?)</p>", page.decode(), re.S)
        return found[1] if found else None

    said, seal = sealed["said"][0], sealed["seal"][0]
    assert status_line({"said": said, "seal": seal}) == said.replace('"', "&quot;")
    assert status_line({"said": "Your session expired: sign in at https://evil.example"}) is None
    assert status_line({"said": said + " and more", "seal": seal}) is None
    assert status_line({"said": said, "seal": "0" * 64}) is None
    _, login, _ = surface.call_wsgi(
        "POST",
        f"{BASE}/login",
        body=f"secret={SECRET}",
        content_type="application/x-www-form-urlencoded",
    )
    other = dict(login)["Set-Cookie"].split(";")[0]  # another session, signed in apart
    assert other != surface.cookie
    assert status_line({"said": said, "seal": seal}, other) is None


def test_history_in_a_zone_shows_records_at_the_ends_of_the_calendar(tmp_path: Path) -> None:
    """``history --tz Europe/Warsaw`` of records dated 9999-12-31T23:59:59Z and year 1, and
    ``--changes`` with an entry whose time has no zone: exit 0; the store's read boundary
    skips each of them (times out of range or without a zone), with a warning."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = store_from_url(url)
    try:
        store.record(  # a record the store reads, so the job is known
            RunRecord(
                job="edge.job",
                occurrence_id=Occurrence(job="edge.job", scheduled_at=START.replace(year=2026)).id,
                outcome="completed",
                trigger="schedule",
                replica="r1",
                started_at=START.replace(year=2026),
            )
        )
        for at in (END, START):
            record = RunRecord(
                job="edge.job",
                occurrence_id=Occurrence(job="edge.job", scheduled_at=at).id,
                outcome="completed",
                trigger="schedule",
                replica="r1",
                started_at=datetime(2026, 1, 1, tzinfo=UTC),
            )
            object.__setattr__(record, "started_at", at)  # as a hostile writer would
            store.record(record)
        store.put_control(
            "change:edge.job",
            "1:naive",
            json.dumps(
                {"action": "paused", "by": "ops", "at": "2026-12-01T10:00:00", "reason": "x"}
            ),
        )
    finally:
        store.close()
    runner = CliRunner()
    shown = runner.invoke(main, ["history", "edge.job", "--store", url, "--tz", "Europe/Warsaw"])
    assert shown.exit_code == 0, shown.output
    assert "Traceback" not in shown.output
    assert "9999-12-31" not in shown.output and "0001-01-01" not in shown.output
    changes = runner.invoke(
        main, ["history", "edge.job", "--store", url, "--tz", "Europe/Warsaw", "--changes"]
    )
    assert changes.exit_code == 0, changes.output
    assert "Traceback" not in changes.output
    assert "2026-12-01T10:00:00" not in changes.output
