"""The dashboard's pictures in headless Chromium: outcome strips, runs in flight, duration and
lag charts, and a second namespace chosen in the page, at desktop and phone sizes."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, sync_playwright

from tests.apps import journal
from tests.e2e.processes import BeatProcess, command_env
from tests.e2e.test_dashboard import SECRET, sign_in
from tests.servers import free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

RED, GREEN, BLUE = "rgb(220, 38, 38)", "rgb(22, 163, 74)", "rgb(37, 99, 235)"


def marks(page: Page, job: str) -> list[tuple[str, str, str]]:
    """Each mark of the job's strip: its state class, its computed fill and its title."""
    row = page.locator("#jobs + div table tbody tr", has_text=job)
    return [
        (
            str(rect.get_attribute("class")).removeprefix("m "),
            rect.evaluate("el => getComputedStyle(el).fill"),
            rect.locator("title").text_content() or "",
        )
        for rect in row.locator("svg.strip rect").all()
    ]


def test_strips_running_runs_and_namespaces_in_a_browser(tmp_path: Path, chromium: str) -> None:
    """A job that failed once shows one red mark among green ones, with the outcome, duration
    and lag in its title; a run in flight is a blue ``running`` mark and a row of its
    recent runs (ordered by occurrence); the selector shows another namespace's jobs and
    replicas, read-only; both pages fit a phone. Screenshots are saved in the test's folder."""
    notes = tmp_path / "journal.jsonl"
    here, there = f"sqlite:///{tmp_path / 'here.db'}", f"sqlite:///{tmp_path / 'there.db'}"
    port = free_port()
    base = f"http://127.0.0.1:{port}/_scheduler"
    env = command_env(notes)
    served = BeatProcess(
        "served",
        tmp_path,
        env,
        app="tests.apps.strips_app",
        store_url=here,
        extra=[
            "--http",
            f"127.0.0.1:{port}",
            "--secret",
            SECRET,
            "--namespace",
            f"billing={there}",
            "--shutdown-timeout",
            "1s",
        ],
    )  # the run in flight is aborted
    other = BeatProcess("billing", tmp_path, env, app="tests.apps.cli_app", store_url=there)
    beats = [served.start(), other.start()]
    try:
        wait_for(lambda: "HTTP trigger on" in served.output(), 30, "the HTTP server")
        wait_for(
            lambda: sum(1 for line in journal.read(notes) if line["job"] == "flaky.sync") >= 3,
            60,
            "a failed and three completed runs",
        )
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium)
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            page.goto(f"{base}/")
            sign_in(page, SECRET)

            flaky = marks(page, "flaky.sync")
            states = [state for state, _, _ in flaky]
            assert states.count("failed") == 1 and states.count("completed") >= 3, flaky
            failed = next(mark for mark in flaky if mark[0] == "failed")
            assert failed[1] == RED and "failed on served-1, ran " in failed[2], failed
            assert ", lag " in failed[2]
            assert all(fill == GREEN for state, fill, _ in flaky if state == "completed")
            assert states.index("failed") < states.index("completed"), "oldest first"

            slow = marks(page, "slow.export")
            running = next(m for m in slow if m[0] == "running")
            assert running[1] == BLUE and "running on served-1" in running[2], slow
            page.screenshot(path=str(tmp_path / "strips.png"), full_page=True)

            page.click("text=slow.export")
            table = page.locator("#occurrence-table tbody tr")
            table.first.wait_for()
            rows = [
                (row.get_attribute("id") or "", [c.strip() for c in row.inner_text().split("\t")])
                for row in table.all()
            ]
            (flight,) = [oid for oid, cells in rows if cells[1] == "running"]
            held = [cells[3] for _, cells in rows if cells[1] == "skipped-overlap"]
            assert held and all(f"held by {flight} on served-1" in h for h in held), rows
            ids = [oid for oid, _ in rows]
            assert ids == sorted(ids, reverse=True), "newest occurrence first"
            page.goto(f"{base}/jobs/flaky.sync")
            assert page.locator("figure.chart").count() == 2  # duration and lag
            assert page.locator("figure.chart svg rect.failed").count() == 2
            page.screenshot(path=str(tmp_path / "charts.png"), full_page=True)

            page.select_option("select[name=ns]", "billing")
            page.click("#namespace button")
            assert "ns=billing" in page.url
            expected = ["billing.broken", "cache.warm", "reports.minutely"]
            for _ in range(30):  # the other beat publishes its jobs once it has started
                if _rows(page) == expected:
                    break
                page.wait_for_timeout(1000)
                page.reload()
            assert _rows(page) == expected
            replicas = page.locator("#replicas + div table").inner_text()
            assert "billing-1" in replicas and "served-1" not in replicas
            page.click("text=cache.warm")
            assert page.locator("text=Run now").count() == 0, "another namespace is read-only"
            assert "is shown read-only" in page.content()
            page.screenshot(path=str(tmp_path / "namespace.png"), full_page=True)

            phone = context.new_page()
            phone.set_viewport_size({"width": 390, "height": 844})
            for path, shot in (("/", "phone.png"), ("/jobs/flaky.sync", "phone-job.png")):
                phone.goto(f"{base}{path}")
                phone.screenshot(path=str(tmp_path / shot), full_page=True)
                width = phone.evaluate("[document.documentElement.scrollWidth, innerWidth]")
                assert width[0] <= width[1], (path, width)
                assert phone.locator("svg.strip").first.is_visible()
            browser.close()
        for beat in beats:
            beat.terminate()
    finally:
        for beat in beats:
            beat.ensure_stopped()


def _rows(page: Page) -> list[str]:
    texts = page.locator("#jobs + div table tbody tr").all_inner_texts()
    return [text.split("\t")[0].strip() for text in texts]
