"""The dashboard of ``cron-bridge beat --http``, driven in headless Chromium."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import ConsoleMessage, Page, sync_playwright

from cron_bridge.control import pause as control
from cron_bridge.stores import store_from_url
from tests.e2e.processes import BeatProcess, command_env
from tests.e2e.test_cluster import wait_until_live
from tests.servers import free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

SECRET = "a-dashboard-secret-for-the-tests-only"
JOBS = ["billing.broken", "cache.warm", "reports.minutely"]


def sign_in(page: Page, secret: str) -> None:
    page.fill("#secret", secret)
    page.click("button[type=submit]")


def status(url: str, *, data: bytes | None = None, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_the_dashboard_in_a_real_browser(tmp_path: Path, chromium: str) -> None:
    """Log in with the secret, see the jobs and both live replicas, press "run now" and see
    the run appear; a wrong secret and a form without its token are refused; the page fits a
    phone's width. Screenshots are saved in the test's folder."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    port = free_port()
    base = f"http://127.0.0.1:{port}/_scheduler"
    env = command_env()
    served = BeatProcess(
        "dash",
        tmp_path,
        env,
        app="tests.apps.cli_app",
        store_url=url,
        extra=["--http", f"127.0.0.1:{port}", "--secret", SECRET],
    )
    other = BeatProcess("other", tmp_path, env, app="tests.apps.cli_app", store_url=url)
    beats = [served.start(), other.start()]
    try:
        wait_until_live(url, 2)
        wait_for(lambda: "HTTP trigger on" in served.output(), 30, "the HTTP server")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium)
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            # What the browser refused under the Content-Security-Policy, and script errors
            # (the 401s of the sign-in form are errors too, of another kind).
            refused: list[str] = []

            def console(message: ConsoleMessage) -> None:
                if "Content Security Policy" in message.text:
                    refused.append(message.text)

            page.on("console", console)
            page.on("pageerror", lambda error: refused.append(str(error)))

            response = page.goto(f"{base}/")
            assert response is not None and response.status == 401
            assert "default-src 'none'" in response.headers["content-security-policy"]
            assert page.locator("#secret").is_visible()
            assert not any(job in page.content() for job in JOBS)

            sign_in(page, "not-the-secret")
            assert page.locator("[role=alert]").inner_text() == "Wrong secret."
            assert not any(job in page.content() for job in JOBS)

            sign_in(page, SECRET)
            jobs = page.locator("#jobs + div table tbody tr")
            # all_inner_texts does not wait: the page after the sign-in may still be loading
            # (a CI run under load read it empty).
            jobs.first.wait_for(timeout=30_000)
            # The first cell holds the job and, below it, its strip of occurrences.
            assert [row.split("\t")[0].strip() for row in jobs.all_inner_texts()] == JOBS
            replicas = page.locator("#replicas + div table").inner_text()
            assert "dash-1 (this one)" in replicas and "other-1" in replicas
            (cookie,) = context.cookies()
            assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")
            assert SECRET not in cookie["value"]
            page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
            # Its one script, allowed by its hash, reloads the page by itself.
            with page.expect_event("load", timeout=15_000):
                pass

            page.click("text=cache.warm")
            page.click("text=Run now")
            flash = page.locator("[role=status]").inner_text()
            assert flash.startswith("Ran the occurrence due "), flash
            assert " on dash-1: completed in " in flash, flash
            first = page.locator("#occurrence-table tbody tr").first.inner_text()
            assert "completed" in first and "manual" in first and "dash-1" in first

            page.click("text=Run now")  # the same occurrence: claimed already, said in words
            said = page.locator("[role=status]").inner_text()
            assert said.startswith("Not run again: the occurrence due ") and "runs once" in said
            page.click("button:has-text('Run a fresh occurrence')")
            assert page.locator("[role=status]").inner_text().startswith("Ran the occurrence due")
            page.screenshot(path=str(tmp_path / "job.png"), full_page=True)

            # Pause on every replica, with a reason; the page says who, and offers Resume.
            page.fill("input[name=reason]", "INC-42 <b>not html</b>")
            page.click("text=Pause on every replica")
            assert page.locator(".flash").inner_text() == "paused: cache.warm"
            said = page.locator("#paused").inner_text()
            assert said.startswith("paused by dashboard:127.0.0.1 since "), said
            assert said.endswith(": INC-42 <b>not html</b>"), said  # shown as text
            store = store_from_url(url)
            try:
                assert control.paused(store)["cache.warm"].reason == "INC-42 <b>not html</b>"
            finally:
                store.close()
            page.screenshot(path=str(tmp_path / "paused.png"), full_page=True)
            page.goto(f"{base}/")
            row = page.locator("#jobs + div table tbody tr", has_text="cache.warm")
            assert "paused" in row.inner_text()
            page.click("text=cache.warm")
            page.click("text=Resume")
            assert page.locator(".flash").inner_text() == "resumed: cache.warm"
            assert page.locator("#paused").count() == 0
            assert page.locator("text=Pause on every replica").is_visible()
            changes = page.locator("#changes + div table tbody tr").all_inner_texts()
            assert [row.split("\t")[1:3] for row in changes] == [
                ["resumed", "dashboard:127.0.0.1"],
                ["paused", "dashboard:127.0.0.1"],
            ]

            phone = context.new_page()
            phone.set_viewport_size({"width": 390, "height": 844})
            phone.goto(f"{base}/")
            phone.screenshot(path=str(tmp_path / "phone.png"), full_page=True)
            width = phone.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
            assert width[0] <= width[1], width

            # The cookie alone does not run a job: a form needs its token.
            cookie_header = {
                "Cookie": f"{cookie['name']}={cookie['value']}",
                "Content-Type": "application/x-www-form-urlencoded",
            }
            forged = status(f"{base}/run/cache.warm", data=b"csrf=guess", headers=cookie_header)
            assert forged == 403
            forged = status(
                f"{base}/api/jobs/cache.warm/pause", data=b"csrf=guess", headers=cookie_header
            )
            assert forged == 403
            # A link's own words never reach the status line: only what this server said.
            page.goto(f"{base}/jobs/cache.warm?said=Your+session+expired%2C+sign+in+at+evil")
            assert page.locator("[role=status].flash").count() == 0
            page.click("text=Sign out")
            assert page.locator("#secret").is_visible()
            assert not refused, refused
            browser.close()
        # Signed out: the same cookie opens nothing any more.
        assert status(f"{base}/", headers={"Cookie": cookie_header["Cookie"]}) == 401
        # The bearer token opens the same page for scripts.
        assert status(f"{base}/", headers={"Authorization": f"Bearer {SECRET}"}) == 200
        for beat in beats:
            beat.terminate()
    finally:
        for beat in beats:
            beat.ensure_stopped()
    store = store_from_url(url)
    manual = [r for r in store.history("cache.warm", 50) if r.trigger == "manual"]
    assert sorted(r.outcome for r in manual) == ["completed", "completed", "skipped-claimed"]
    for shot in ("dashboard.png", "job.png", "phone.png"):
        assert (tmp_path / shot).stat().st_size > 10_000, shot
