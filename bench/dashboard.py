"""The dashboard at tenant scale: 1,000, 10,000 and 100,000 jobs on one beat's panel.

A beat's WSGI app (not started: nothing runs but the requests) on a Redis store on loopback,
signed in as a browser is, its jobs declared as a signup service declares tenants (one of 120
cron schedules each), each with its last three occurrences recorded (sent and completed; one
job in 50 failed, one in 100 paused). Each request as a browser sends it, with its session
cookie:

- the overview: the first one of the app (which waits at most ``tally.FIRST_WAIT`` for the
  first count, and shows ``?`` when it is not made by then), how long until a page shows the
  counts (the page reloads every 5 s; here it is asked again until then), then the median
  of 10 once counted, with the store round trips of the request (the count, made behind on a
  thread of its own every 5 s while pages are open, is measured on its own: its time and
  round trips);
- a search (``?q=``) and a filter (``?state=failing``), and a page near the end;
- a job's page.

    make bench 'BENCH_ARGS=--only dashboard'
"""

from __future__ import annotations

import contextlib
import io
import json
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from cron_bridge.beat.replica import Beat
from cron_bridge.control import pause as control
from cron_bridge.http.apps import wsgi_app
from cron_bridge.http.tally import count
from cron_bridge.jobs import Job, Occurrence, declare
from cron_bridge.stores import RunRecord, Store, store_from_url
from tests.servers import RedisServer

SIZES = (1_000, 10_000, 100_000)
SECRET = "bench-secret-of-the-dashboard-0123456789"
CRONS = [f"{m} {h} * * *" for m in (0, 15, 30, 45) for h in range(24)][:120]
WARM = 10


def _jobs(count_: int) -> list[Job]:
    return [
        declare(
            f"tenant-{n:06d}.report",
            cron=CRONS[n % len(CRONS)],
            adapter="test",
            task="reports.run",
            queue="reports",
        )
        for n in range(count_)
    ]


def _populate(store: Store, jobs: list[Job]) -> None:
    """Each job's last three occurrences, sent and completed (one in 50 failed last)."""
    now = datetime.now(UTC)
    batch: list[RunRecord] = []
    for n, job in enumerate(jobs):
        due = now - timedelta(days=3)
        for day in range(3):
            at = job.schedule.next_after(due + timedelta(days=day))
            occurrence = Occurrence(job=job.name, scheduled_at=at).id
            last = "failed" if n % 50 == 0 and day == 2 else "completed"
            for outcome, attempt in (("enqueued", 1), (last, 1)):
                batch.append(
                    RunRecord(
                        job=job.name,
                        occurrence_id=occurrence,
                        outcome=outcome,  # type: ignore[arg-type]
                        trigger="schedule",
                        replica="beat-1",
                        started_at=at,
                        attempt=attempt,
                        duration_ms=12.0,
                    )
                )
        if len(batch) >= 6_000:
            store.record_many(batch)
            batch = []
    store.record_many(batch)
    record = json.dumps({"reason": "unpaid", "by": "billing", "since": "2026-12-01T00:00:00Z"})
    paused = [job.name for n, job in enumerate(jobs) if n % 100 == 1]
    store.put_controls(control.PAUSES, dict.fromkeys(paused, record))  # as pause writes them


class _Browser:
    def __init__(self, app: Any) -> None:
        self.app = app
        self.cookie = ""

    def __call__(self, path: str, *, method: str = "GET", body: bytes = b"") -> tuple[int, bytes]:
        path, _, query = path.partition("?")
        environ = {
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8080",
            "REMOTE_ADDR": "127.0.0.1",
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(body),
            "CONTENT_LENGTH": str(len(body)),
            "CONTENT_TYPE": "application/x-www-form-urlencoded",
            "HTTP_COOKIE": self.cookie,
        }
        said: list[Any] = []
        out = b"".join(self.app(environ, lambda status, headers: said.append((status, headers))))
        status, headers = said[0]
        for name, value in headers:
            if name.lower() == "set-cookie":
                self.cookie = value.split(";")[0]
        return int(status.split()[0]), out


def _timed(store: Store, browser: _Browser, path: str, times: int = 1) -> dict[str, Any]:
    ms, trips, size = [], [], 0
    for _ in range(times):
        before = store.stats.round_trips
        started = time.perf_counter()
        status, body = browser(path)
        ms.append((time.perf_counter() - started) * 1000)
        trips.append(store.stats.round_trips - before)
        assert status == 200, (path, status, body[:200])
        size = len(body)
    return {
        "ms": round(statistics.median(ms), 1),
        "trips": statistics.median(trips),
        "kb": size // 1024,
    }


def measure(sizes: tuple[int, ...] = SIZES) -> list[dict[str, Any]]:
    rows = []
    with contextlib.ExitStack() as stack:
        server = RedisServer()
        server.start()
        stack.callback(server.remove)
        for size in sizes:
            store = store_from_url(f"{server.url}?prefix=dash{size}:")
            stack.callback(store.close)
            jobs = _jobs(size)
            _populate(store, jobs)
            beat = Beat(store, jobs)
            browser = _Browser(wsgi_app(beat, secret=SECRET, path="/_s"))
            status, _ = browser("/_s/login", method="POST", body=f"secret={SECRET}".encode())
            assert status == 303, status
            started = time.perf_counter()
            first = _timed(store, browser, "/_s/")
            while b"counting the jobs" in browser("/_s/")[1]:
                assert time.perf_counter() - started < 120, "the first count never came"
                time.sleep(0.05)
            counted_s = time.perf_counter() - started
            overview = _timed(store, browser, "/_s/", WARM)
            search = _timed(store, browser, "/_s/?q=tenant-00042", WARM)
            failing = _timed(store, browser, "/_s/?state=failing", WARM)
            last_page = _timed(store, browser, f"/_s/?page={size // 50}", WARM)
            job = _timed(store, browser, f"/_s/jobs/{jobs[size // 2].name}", WARM)
            names = sorted(job.name for job in jobs)
            by_name = {job.name: job for job in jobs}
            before = store.stats.round_trips
            started = time.perf_counter()
            counted = count(store, names, by_name.get, datetime.now(UTC))
            count_ms = (time.perf_counter() - started) * 1000
            row = {
                "jobs": size,
                "first_ms": first["ms"],
                "counted_s": round(counted_s, 2),
                "overview_ms": overview["ms"],
                "overview_trips": overview["trips"],
                "overview_kb": overview["kb"],
                "search_ms": search["ms"],
                "failing_ms": failing["ms"],
                "last_page_ms": last_page["ms"],
                "job_ms": job["ms"],
                "job_trips": job["trips"],
                "count_ms": round(count_ms, 1),
                "count_trips": store.stats.round_trips - before,
                "failing": len(counted.failing),
                "paused": len(counted.paused),
            }
            print("dashboard", row, flush=True)
            rows.append(row)
    return rows
