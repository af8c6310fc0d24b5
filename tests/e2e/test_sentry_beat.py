"""Twin test: Sentry's cron monitoring of celery beat (``CeleryIntegration(monitor_beat_tasks=
True)``, the real sentry-sdk) under stock ``celery beat`` and under three ``celery beat -S
cron_bridge`` replicas, side by side on the same project (tests/apps/celery_sentry_app.py),
each side with its own worker and reporting to its own loopback server that records the
envelopes; the check-ins are compared per entry and minute.

sentry-sdk hooks ``celery.beat.Scheduler.apply_entry``: it adds its monitor's headers to the
entry's options and sends the in-progress check-in; the worker closes it (ok or error) under
the same check-in id, from the headers. Under ``-S cron_bridge`` every send goes through that
method, by the replica that won the occurrence only.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import importable, unavailable
from tests.e2e.processes import CeleryProcess, command_env
from tests.e2e.twins import Twins, side_by_side
from tests.servers import RedisServer, ServerUnavailable
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

importable("sentry_sdk")

APP = "tests.apps.celery_sentry_app"
ENTRIES = {"send-invoices": "ok", "sync-ledger": "error"}  # what each entry's task ends with


@dataclass
class CheckIn:
    at: float  # when it arrived
    made: float  # when the SDK made it (its ``timestamp``), in the process that sent it
    slug: str
    status: str
    check_in_id: str
    config: dict[str, Any] | None


@dataclass
class Recorder:
    """A loopback server standing in for Sentry: it keeps the check-ins of every envelope."""

    check_ins: list[CheckIn] = field(default_factory=list)
    other_items: list[str] = field(default_factory=list)

    def serve(self) -> Iterator[str]:
        """Serve on a free port; yields the DSN that points at it."""
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                recorder.take(body, time.time())
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://public@127.0.0.1:{server.server_address[1]}/1"
        finally:
            server.shutdown()
            server.server_close()

    def take(self, envelope: bytes, at: float) -> None:
        """An envelope: a header line, then items, each a header line and its payload (of
        the header's ``length``, or up to the next newline)."""
        position = envelope.find(b"\n") + 1
        while 0 < position < len(envelope):
            line, position = _line(envelope, position)
            if not line.strip():
                continue
            header = json.loads(line)
            length = header.get("length")
            if length is None:
                payload, position = _line(envelope, position)
            else:
                payload, position = envelope[position : position + length], position + length + 1
            if header.get("type") != "check_in":
                self.other_items.append(str(header.get("type")))
                continue
            item = json.loads(payload)
            self.check_ins.append(
                CheckIn(
                    at=at,
                    made=datetime.fromisoformat(item["timestamp"]).timestamp(),
                    slug=item["monitor_slug"],
                    status=item["status"],
                    check_in_id=item["check_in_id"],
                    config=item.get("monitor_config"),
                )
            )


def _line(data: bytes, start: int) -> tuple[bytes, int]:
    end = data.find(b"\n", start)
    end = len(data) if end == -1 else end
    return data[start:end], end + 1


def by_minute(check_ins: list[CheckIn]) -> dict[tuple[str, int], list[CheckIn]]:
    """Each run's check-ins, by entry and by the minute its in-progress check-in was made;
    closing check-ins go with the in-progress one whose id they carry."""
    opened = {c.check_in_id: c for c in check_ins if c.status == "in_progress"}
    runs: dict[tuple[str, int], list[CheckIn]] = defaultdict(list)
    for check_in in check_ins:
        first = opened.get(check_in.check_in_id)
        minute = int((first or check_in).made // 60)
        runs[(check_in.slug, minute)].append(check_in)
    return runs


def shape(runs: list[CheckIn]) -> dict[str, Any]:
    """What is compared of one entry's minute: the statuses in the order they were made,
    whether every check-in carries the in-progress one's id, and the monitor config each sent.

    Made, not arrived: the beat sends its in-progress check-in and the worker its closing one,
    each from its SDK's background thread, so on a loaded machine the worker's can reach
    Sentry first, under stock celery beat as under ours (Sentry pairs them by id)."""
    ordered = sorted(runs, key=lambda c: c.made)
    return {
        "statuses": [c.status for c in ordered],
        "paired": len({c.check_in_id for c in ordered}) == 1,
        "configs": [c.config for c in ordered],
    }


WORKER = (
    "worker",
    "-P",
    "solo",
    "--without-gossip",
    "--without-mingle",
    "--without-heartbeat",
    "-l",
    "INFO",
)


@dataclass
class Side:
    """One side of the twin: its beats' arguments (one stock beat, or three of ours)."""

    name: str
    beat_args: list[str]
    replicas: int
    env: dict[str, str]
    recorder: Recorder = field(default_factory=Recorder)


def run_twin(tmp_path: Path, app: str, sides: list[Side]) -> tuple[int, str]:
    """Run both sides (each with its beats, a worker and its recorder) over one whole minute,
    through the twin tests' harness; the minute compared and the processes' logs."""
    served = [side.recorder.serve() for side in sides]
    for side, dsn in zip(sides, served, strict=True):
        side.env["CB_TEST_SENTRY_DSN"] = next(dsn)
    beats = {
        side.name: [
            CeleryProcess(
                f"{side.name}-beat{i}",
                tmp_path,
                dict(side.env),
                "beat",
                "-l",
                "INFO",
                *side.beat_args,
                app=app,
            )
            for i in range(side.replicas)
        ]
        for side in sides
    }
    workers = [
        CeleryProcess(f"{side.name}-worker", tmp_path, dict(side.env), *WORKER, app=app)
        for side in sides
    ]

    def ready(twins: Twins) -> bool:
        beating = all("beat: Starting..." in p.output() for p in [twins.stock, *twins.ours])
        return beating and all(" ready." in p.output() for p in twins.helpers)

    stock, ours = (beats[side.name] for side in sides)
    assert len(stock) == 1, "the stock side is one beat: two would send everything twice"
    try:
        with side_by_side(
            stock[0], ours, helpers=workers, ready=ready, what="every beat and worker started"
        ) as twins:
            minute = int(time.time() // 60) + 1
            if minute * 60 - time.time() < 10:  # the minute's first sends well after the start
                minute += 1
            wait_for(lambda: time.time() > (minute + 1) * 60 - 40, 120, "the minute's runs ending")
            wait_for(
                lambda: all(
                    len([c for c in side.recorder.check_ins if c.made // 60 == minute])
                    >= 2 * len(ENTRIES)
                    for side in sides
                ),
                30,
                "both sides' check-ins",
            )
            time.sleep(2)  # a span of time: a late duplicate would show up now
            logs = twins.logs(2500)
    finally:
        for dsn in served:
            dsn.close()
    return minute, logs


def assert_twins(stock: Recorder, ours: Recorder, minute: int, zone: str, logs: str) -> None:
    """Per entry, the minute's check-ins alike (statuses, pairing, monitor config), the stock
    side's as Sentry's monitoring sends them, and ours once per occurrence."""
    stock_runs, ours_runs = by_minute(stock.check_ins), by_minute(ours.check_ins)
    for slug, ending in ENTRIES.items():
        key = (slug, minute)
        assert key in stock_runs, (key, stock.check_ins, logs)
        assert shape(ours_runs.get(key, [])) == shape(stock_runs[key]), (key, logs)
        assert shape(stock_runs[key])["statuses"] == ["in_progress", ending], stock_runs[key]
        assert shape(stock_runs[key])["paired"]
    config = stock_runs[("send-invoices", minute)][0].config
    assert config == {"schedule": {"type": "crontab", "value": "* * * * *"}, "timezone": zone}, (
        config
    )
    # Once per occurrence across the three replicas: one in-progress check-in a minute.
    per_minute: dict[tuple[str, int], int] = defaultdict(int)
    for check_in in ours.check_ins:
        if check_in.status == "in_progress":
            per_minute[(check_in.slug, int(check_in.made // 60))] += 1
    assert per_minute and max(per_minute.values()) == 1, per_minute


@pytest.fixture
def broker() -> Iterator[RedisServer]:
    try:
        server = RedisServer()
        server.start()
    except ServerUnavailable as exc:
        unavailable("redis-server", exc)
    yield server
    server.remove()


def test_sentry_cron_check_ins_are_the_same_under_stock_celery_beat_and_cron_bridge(
    tmp_path: Path, broker: RedisServer, record_property: Callable[[str, object], None]
) -> None:
    """``celery beat`` (its default scheduler) and ``-S cron_bridge`` on a ``beat_schedule``."""
    base = f"redis://127.0.0.1:{broker.port}"
    store = f"{base}/3?prefix=s{uuid.uuid4().hex[:6]}:"
    stock = Side(
        "stock",
        ["-s", str(tmp_path / "celerybeat-schedule")],
        1,
        command_env(CB_TEST_BROKER=f"{base}/1"),
    )
    ours = Side(
        "ours",
        ["-S", "cron_bridge"],
        3,
        command_env(CB_TEST_BROKER=f"{base}/2", CRON_BRIDGE_STORE=store),
    )
    minute, logs = run_twin(tmp_path, APP, [stock, ours])
    record_property(
        "check-ins", f"stock {len(stock.recorder.check_ins)}, ours {len(ours.recorder.check_ins)}"
    )
    assert_twins(stock.recorder, ours.recorder, minute, "America/New_York", logs)


def test_sentry_cron_check_ins_are_the_same_under_django_celery_beat_and_cron_bridge_django(
    tmp_path: Path, broker: RedisServer, record_property: Callable[[str, object], None]
) -> None:
    """django-celery-beat's ``DatabaseScheduler`` and ``-S cron_bridge_django`` on the same
    rows of a real Django project (tests/apps/djproj), each side on its own database: crontab
    rows in their own zone, whose timezone Sentry's monitor config takes."""
    from tests.e2e.test_django_beat import DJANGO_APP, django, migrate

    base = f"redis://127.0.0.1:{broker.port}"
    rows = json.dumps(
        [
            {"name": "send-invoices", "kind": "crontab", "minute": "*", "tz": "Asia/Tokyo"},
            {
                "name": "sync-ledger",
                "kind": "crontab",
                "minute": "*",
                "tz": "Asia/Tokyo",
                "task": "djproj.fail",
            },
        ]
    )
    sides = []
    for name, beat_args, replicas, db in (
        ("stock", ["-S", "django_celery_beat.schedulers:DatabaseScheduler"], 1, 1),
        ("ours", ["-S", "cron_bridge_django"], 3, 2),
    ):
        env = command_env(
            CB_TEST_BROKER=f"{base}/{db}", CB_TEST_DJANGO_DB=f"sqlite:///{tmp_path}/{name}.sqlite3"
        )
        migrate(env)
        django(env, "create", rows)
        sides.append(Side(name, beat_args, replicas, env))
    minute, logs = run_twin(tmp_path, DJANGO_APP, sides)
    record_property(
        "check-ins",
        f"stock {len(sides[0].recorder.check_ins)}, ours {len(sides[1].recorder.check_ins)}",
    )
    assert_twins(sides[0].recorder, sides[1].recorder, minute, "Asia/Tokyo", logs)
