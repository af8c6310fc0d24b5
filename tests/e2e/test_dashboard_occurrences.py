"""The dashboard organised around occurrences, in headless Chromium, with ten replicas: one
row per occurrence (the nine that stood aside counted in it, not listed), each attempt with
its outcome, duration and lag, the traceback behind a click; the counts, filters, search,
next runs, options and paging; "Run now" saying in words what it did."""

from __future__ import annotations

import re
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import Page, sync_playwright

from cron_bridge.http.occurrences import PER_PAGE
from cron_bridge.jobs import Occurrence
from cron_bridge.stores import RunRecord, store_from_url
from tests.e2e.scene import scene, signed_in
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

REPLICAS = 10


def rows(page: Page) -> list[list[str]]:
    table = page.locator("#occurrence-table tbody tr")
    table.first.wait_for()
    return [[cell.strip() for cell in row.split("\t")] for row in table.all_inner_texts()]


def ids(page: Page) -> list[str]:
    """The occurrence ids of the rows shown, top to bottom."""
    table = page.locator("#occurrence-table tbody tr")
    table.first.wait_for()
    return [str(row.get_attribute("id")) for row in table.all()]


def count(page: Page, name: str) -> int:
    """The count ``name`` at the top of the overview; ``?`` while the first count of the
    namespace is made (the page is not held for it), so the page is reloaded until it is."""
    shown: list[str] = []

    def counted() -> bool:
        shown.append(page.locator(f"#count-{name} b").inner_text())
        if shown[-1] == "?":
            page.reload()
        return shown[-1] != "?"

    wait_for(counted, 30, f"the {name} count", every=0.5)
    return int(shown[-1])


def test_occurrences_counts_filters_and_run_now_with_ten_replicas(
    tmp_path: Path, chromium: str
) -> None:
    with scene(tmp_path, REPLICAS, settle=120) as shown, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium)
        page = signed_in(browser, shown)

        # Counts at the top, each a filter; the search narrows by name.
        assert count(page, "all") == 4 and count(page, "paused") == 1
        page.click("#count-paused")
        listed = page.locator("#jobs + div table tbody tr").all_inner_texts()
        assert [r.split("\t")[0].split()[0] for r in listed] == ["emails.digest"]
        assert "state=paused" in page.url
        page.goto(f"{shown.base}/?q=REPORT")
        listed = page.locator("#jobs + div table tbody tr").all_inner_texts()
        assert [r.split("\t")[0].split()[0] for r in listed] == ["reports.export"]
        assert page.locator("h2#jobs").inner_text() == "Jobs (1 of 4)"
        page.goto(f"{shown.base}/?q=nothing-like-it")
        assert "No job matches." in page.locator("#jobs + div").inner_text()

        # A job's page: one row per occurrence, each run once among ten replicas.
        page.goto(f"{shown.base}/jobs/cache.warm")
        found = rows(page)
        assert len(found) == len({r[0] for r in found}), "one row per occurrence"
        store = store_from_url(shown.store_url)
        try:
            records = store.history("cache.warm", 1000)
        finally:
            store.close()
        done = [r for r in found if r[1] == "completed"]
        assert done, found
        for row in done:
            attempts = row[3].splitlines()
            assert len(attempts) == 1 and re.match(
                r"#1 completed on beat\d\d-1, ran \d+ ms, "
                r"lag \d+ ms$",
                attempts[0],
            ), row
        # The replicas that stood aside are counted: their ledgers cover the occurrences due
        # after they all started (the first few may be before the last one came up).
        stood = [int(r[4].split()[0]) for r in done if r[4]]
        assert stood and max(stood) == REPLICAS - 1 and min(stood) >= 1, found
        assert "skipped-claimed" not in page.locator("#occurrence-table").inner_text()
        assert len({r.occurrence_id for r in records}) >= len(done)

        # Next runs in the job's zone, and the options that decide how it runs.
        assert page.locator("#next-runs li").count() == 5
        options = page.locator("#options").inner_text()
        assert "attempts\n1" in options and "overlap\nskip" in options
        page.goto(f"{shown.base}/jobs/emails.digest")
        next_runs = page.locator("#next-runs li").all_inner_texts()
        assert all(re.search(r" 08:00:00 \+0[12]:00", text) for text in next_runs), next_runs
        assert page.locator("#paused").inner_text().endswith("INC-7: the mail relay is down")

        # Failures: filtered by state, each attempt with its error, the traceback on a click,
        # the password in it masked.
        page.goto(f"{shown.base}/jobs/billing.settle?state=failed")
        failed = rows(page)
        assert failed and all(row[1] == "failed" for row in failed), failed
        attempts = failed[0][3]
        assert "#1 failed on " in attempts and "#2 failed on " in attempts, attempts
        assert "ConnectionError: the ledger at postgresql://app:***@ledger/db refused" in attempts
        trace = page.locator("#occurrence-table details").first
        assert not trace.locator("pre").is_visible()
        trace.locator("summary").click()
        text = trace.locator("pre").inner_text()
        assert text.startswith("Traceback (most recent call last):") and "in settle" in text
        assert "hunter2" not in page.content()
        assert int(page.locator("#filter-failed b").inner_text()) == len(failed)

        # Paging: the daily job failed on each of its last 60 days (its records, as a worker
        # writes them): more occurrences than a page holds, and none the schedule had that no
        # record names (those would show as unrecorded).
        store = store_from_url(shown.store_url)
        try:
            warsaw = ZoneInfo("Europe/Warsaw")
            today = datetime.now(warsaw).date()
            due = (
                datetime.combine(today - timedelta(days=n), time(8), warsaw).astimezone(UTC)
                for n in range(62)
            )
            days = [at for at in due if at <= datetime.now(UTC)][:60]  # its last 60, none left out
            store.record_many(
                [
                    RunRecord(
                        job="emails.digest",
                        occurrence_id=Occurrence(job="emails.digest", scheduled_at=at).id,
                        outcome="failed",
                        trigger="schedule",
                        replica="beat01-1",
                        started_at=at,
                        duration_ms=50.0,
                        error="SMTPError: relay down",
                    )
                    for at in days
                ]
            )
        finally:
            store.close()
        page.goto(f"{shown.base}/jobs/emails.digest?state=failed")
        assert int(page.locator("#filter-failed b").inner_text()) == 60
        first_page = ids(page)
        assert len(first_page) == PER_PAGE and first_page == sorted(first_page, reverse=True)
        assert page.locator(".pager").first.inner_text().split()[1:] == [
            "page",
            "1",
            "of",
            "3",
            "Older",
        ]
        page.locator("a[rel=next]").first.click()
        second = ids(page)
        assert "page=2" in page.url and "state=failed" in page.url and len(second) == PER_PAGE
        assert second == sorted(second, reverse=True) and second[0] < first_page[-1]
        page.locator("a[rel=next]").first.click()
        assert len(ids(page)) == 60 - 2 * PER_PAGE
        page.locator("a[rel=prev]").first.click()
        page.locator("a[rel=prev]").first.click()
        assert ids(page) == first_page

        # "Run now" answers in words: it ran, or it was claimed already and runs once.
        page.goto(f"{shown.base}/jobs/emails.digest")
        page.click("text=Run now")
        said = page.locator("[role=status].flash").inner_text()
        assert said.startswith("Ran the occurrence due ") and ": completed in " in said, said
        page.click("text=Run now")
        said = page.locator("[role=status].flash").inner_text()
        assert said.startswith("Not run again: the occurrence due ") and "runs once" in said
        page.screenshot(path=str(tmp_path / "job.png"), full_page=True)

        page.goto(f"{shown.base}/jobs/no.such-job")
        assert page.locator("h1").inner_text() == "No job called 'no.such-job'"
        browser.close()
