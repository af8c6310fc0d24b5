"""A dashboard with something to show: several beats on one SQLite store running
``tests.apps.scene_app`` (a job failing now and then, a slow one, a quick one, a paused one).

The browser test reads it; ``make screenshots`` (``python -m tests.e2e.scene docs/images``)
takes the pictures in the docs from it.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from playwright.sync_api import Browser, Page

from tests.e2e.processes import BeatProcess, cli, command_env
from tests.servers import free_port
from tests.waiting import wait_for

SECRET = "a-dashboard-secret-for-the-scene-only"
APP = "tests.apps.scene_app"


@dataclass
class Scene:
    base: str  # the dashboard's URL, without the trailing slash
    store_url: str
    beats: list[BeatProcess]


@contextmanager
def scene(folder: Path, replicas: int = 3, *, settle: float = 60) -> Iterator[Scene]:
    """``replicas`` beats (the first serves the dashboard) until the quick job has run 8
    occurrences and the flaky one has failed once (at most ``settle`` seconds); the daily
    job paused."""
    store_url = f"sqlite:///{folder / 'scene.db'}"
    port = free_port()
    env = command_env(folder / "journal.jsonl")
    http = ["--http", f"127.0.0.1:{port}", "--secret", SECRET, "--shutdown-timeout", "1s"]
    beats = [
        BeatProcess(
            f"beat{i:02d}",
            folder,
            env,
            app=APP,
            store_url=store_url,
            extra=http if i == 1 else ["--shutdown-timeout", "1s"],
        )
        for i in range(1, replicas + 1)
    ]
    for beat in beats:
        beat.start()
    try:
        wait_for(lambda: "HTTP trigger on" in beats[0].output(), 60, "the HTTP server")
        paused = cli(
            "pause",
            "emails.digest",
            "--reason",
            "INC-7: the mail relay is down",
            "--store",
            store_url,
            "-A",
            APP,
            env=env,
            cwd=folder,
        )
        assert paused.returncode == 0, paused.stderr
        wait_for(lambda: _ran(store_url), settle, "8 runs of cache.warm and a failed settle")
        yield Scene(f"http://127.0.0.1:{port}/_scheduler", store_url, beats)
        for beat in beats:
            beat.terminate()
    finally:
        for beat in beats:
            beat.ensure_stopped()


def _ran(store_url: str) -> bool:
    from cron_bridge.stores import store_from_url

    store = store_from_url(store_url)
    try:
        warm = [r for r in store.history("cache.warm", 100) if r.outcome == "completed"]
        failed = [r for r in store.history("billing.settle", 100) if r.outcome == "failed"]
        return len(warm) >= 8 and len(failed) >= 2
    finally:
        store.close()


def signed_in(browser: Browser, shown: Scene) -> Page:
    """A desktop-sized page of the scene's dashboard, signed in, on the overview with its jobs
    shown."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{shown.base}/")
    page.fill("#secret", SECRET)
    page.click("button[type=submit]")
    page.locator("#jobs + div table tbody tr").first.wait_for()
    return page


def screenshots(folder: Path, chromium: str) -> list[Path]:
    """The overview and a job's page (a failure's traceback open) at desktop width, the
    overview at a phone's, saved in ``folder``."""
    from playwright.sync_api import sync_playwright

    folder.mkdir(parents=True, exist_ok=True)
    saved = []
    with (
        tempfile.TemporaryDirectory() as work,
        scene(Path(work), 3) as shown,
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=chromium)
        page = signed_in(browser, shown)
        saved.append(folder / "dashboard-overview.png")
        page.screenshot(path=str(saved[-1]), full_page=True)
        page.goto(f"{shown.base}/jobs/billing.settle?state=failed")
        page.locator("#occurrence-table details summary").first.click()
        saved.append(folder / "dashboard-job.png")
        page.screenshot(path=str(saved[-1]), full_page=True)
        page.set_viewport_size({"width": 390, "height": 844})
        page.goto(f"{shown.base}/")
        saved.append(folder / "dashboard-phone.png")
        page.screenshot(path=str(saved[-1]), full_page=False)
        browser.close()
    return saved


if __name__ == "__main__":
    import shutil

    found = next(
        filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None
    )
    if found is None:
        sys.exit("make screenshots needs Chromium on PATH (Debian: apt-get install chromium)")
    for path in screenshots(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images"), found):
        sys.stdout.write(f"{path}\n")
