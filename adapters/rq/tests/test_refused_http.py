"""An ``rq cron`` registration refused by the drop-in, as the web surface shows it: in
``/healthz``'s ``refused`` (still healthy: the other jobs run) and in the dashboard
overview's "Refused declarations" table, through the real WSGI app; its name, which RQ takes
as any text, reaches the page escaped and sanitised and the JSON escaped, never as markup, a
control character or a password."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from rq.cron import CronJob

from cron_bridge import refusals
from cron_bridge_rq.rq_cron import DECLARED_AS, jobs_of
from tests.apps.rq_cron_tasks import cleanup, sync_accounts
from tests.test_http_fuzz import BASE, Surface, check_body

# Markup, an ANSI escape, a bidirectional override, a C1 control and a URL with a password.
HOSTILE = "<script>alert(1)</script> \x1b[31mred\u202e \x85 redis://:hunter2@cache:6379/0"


@pytest.fixture
def refused() -> Iterator[list[str]]:
    """One registration the drop-in refuses (a negative interval, which RQ takes and then
    sends without a pause) beside one it runs, read as ``cron-bridge rq-cron`` reads them."""
    refusals.clear()
    registrations = [
        CronJob(func=cleanup, queue_name="default", interval=-5, name=HOSTILE),
        CronJob(func=sync_accounts, queue_name="sync", interval=60, args=("eu",)),
    ]
    ran = jobs_of(registrations, "UTC", strict=False)
    yield list(ran)
    refusals.clear()


def test_healthz_lists_the_refused_registration_and_stays_healthy(refused: list[str]) -> None:
    assert refused == ["tests.apps.rq_cron_tasks.sync_accounts"]
    surface = Surface()
    status, headers, body = surface.call_wsgi("GET", f"{BASE}/healthz")
    assert status == 200, body
    check_body(dict(headers)["Content-Type"], body)  # no markup or control character
    answer = json.loads(body)
    assert answer["running"] is not None and "failing" not in answer
    [shown] = answer["refused"]
    assert shown["source"] == DECLARED_AS == "rq cron"
    assert shown["reason"].startswith("interval=-5: "), shown
    # /healthz needs no token: what it says of a name is as the logs say it, password masked.
    assert "hunter2" not in body.decode()
    assert shown["name"].startswith("<script>alert(1)</script> "), shown


def test_dashboard_overview_has_the_refused_declarations_table(refused: list[str]) -> None:
    surface = Surface()
    status, headers, body = surface.call_wsgi("GET", f"{BASE}/", cookie=surface.cookie)
    assert status == 200, body[:500]
    parsed = check_body(dict(headers)["Content-Type"], body)
    assert parsed is not None
    page = body.decode()
    assert "Refused declarations (1)" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>alert" not in page
    text = "".join(parsed.text)
    why = "refused: interval=-5: expected a positive number of seconds"
    for seen in ("\\x1b[31mred", "\\u202e", "\\x85", "redis://:***@cache:6379/0", "rq cron", why):
        assert seen in text, (seen, text[text.find("Refused") :][:600])
    assert "hunter2" not in page


def test_no_refused_table_or_key_when_nothing_is_refused() -> None:
    refusals.clear()
    surface = Surface()
    _, _, body = surface.call_wsgi("GET", f"{BASE}/healthz")
    assert "refused" not in json.loads(body)
    _, _, page = surface.call_wsgi("GET", f"{BASE}/", cookie=surface.cookie)
    assert b"Refused declarations" not in page
