"""``celery -A proj beat -S cron_bridge_django``: django-celery-beat's rows on three replicas.

A real Django project (``tests/apps/djproj``, django-celery-beat's migrations run) on SQLite
and on PostgreSQL, its own database holding the claims; three beat replicas and a Celery
worker. Rows of every kind are edited the way the admin does it while the beats run.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from celery.schedules import solar

from cron_bridge.control import catalog, lost_claims
from cron_bridge.jobs import Occurrence
from cron_bridge.stores import store_from_url
from cron_bridge_celery.scheduler import job_name
from cron_bridge_celery.schedules import SolarSchedule
from tests.apps import journal
from tests.e2e.processes import REPO, CeleryProcess, command_env, outcomes_by_occurrence
from tests.servers import PostgresServer, RedisServer
from tests.waiting import wait_for

pytestmark = pytest.mark.slow


DJANGO_APP = "tests.apps.djproj"


def django(env: dict[str, str], *args: str) -> Any:
    """``python -m tests.apps.djproj.rows ARGS`` (the ORM, as the admin uses it)."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.apps.djproj.rows", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def migrate(env: dict[str, str]) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "django",
            "migrate",
            "-v",
            "0",
            "--settings=tests.apps.djproj.settings",
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def sent_at_all(lines: list[dict[str, Any]]) -> list[float]:
    return [Occurrence.parse(line["occurrence_id"]).scheduled_at.timestamp() for line in lines]


def solar_noon_near(target: datetime) -> tuple[str, datetime]:
    """A longitude (6 decimals, as the row keeps it) whose solar noon on the equator is close
    to ``target``, and that noon as the beat computes it."""
    lon = ((12 - (target.hour + target.minute / 60)) * 15 + 180) % 360 - 180
    when = target
    for _ in range(6):
        text = f"{lon:.6f}"
        when = SolarSchedule(solar("solar_noon", Decimal(0), Decimal(text))).next_after(
            target - timedelta(hours=2)
        )
        lon += (when - target).total_seconds() / 240  # the sun moves a degree in 4 minutes
        lon = (lon + 180) % 360 - 180
    text = f"{lon:.6f}"
    return text, SolarSchedule(solar("solar_noon", Decimal(0), Decimal(text))).next_after(
        target - timedelta(hours=2)
    )


@pytest.fixture(params=["sqlite", "postgres"])
def django_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The project's database URL: a SQLite file, or a database of its own on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'db.sqlite3'}"
    import psycopg

    pg: PostgresServer = request.getfixturevalue("postgres_server")
    name = f"dj_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return pg.url.rsplit("/", 1)[0] + f"/{name}"


def test_django_rows_are_sent_once_by_three_beats_and_follow_admin_edits(
    tmp_path: Path, redis_server: RedisServer, django_db: str
) -> None:
    """Interval, crontab (own zone), solar and clocked rows on 3 beats with a worker: each
    occurrence sent once with the row's fields; an interval edited mid-run and a row disabled
    are followed by every replica; one-offs run once and are disabled; bad rows are logged
    once and skipped; a SIGKILLed replica loses only what it had claimed; the run counts in
    the table equal what the worker ran; a beat_schedule entry is synced into the table."""
    queue = f"dj-{uuid.uuid4().hex[:8]}"
    notes = tmp_path / "journal.jsonl"
    env = command_env(
        notes, CB_TEST_BROKER=redis_server.url, CB_TEST_QUEUE=queue, CB_TEST_DJANGO_DB=django_db
    )
    migrate(env)
    now = datetime.now(UTC)
    ids = django(
        env,
        "create",
        json.dumps(
            [
                {"name": "every second", "kind": "interval", "every": 1, "args": ["second"]},
                {
                    "name": "every two seconds",
                    "kind": "interval",
                    "every": 2,
                    "kwargs": {"label": "two", "n": 2},
                    "queue": queue,
                    "priority": 5,
                    "headers": {"team": "ops"},
                    "expire_seconds": 60,
                },
                {
                    "name": "every minute in Kolkata",
                    "kind": "crontab",
                    "minute": "*",
                    "tz": "Asia/Kolkata",
                    "args": ["minute"],
                },
                {
                    "name": "clocked already due",
                    "kind": "clocked",
                    "at": (now - timedelta(minutes=5)).isoformat(),
                    "one_off": True,
                    "args": ["due"],
                },
                {"name": "unknown task", "kind": "interval", "every": 1, "task": "djproj.nope"},
                {"name": "bad json", "kind": "interval", "every": 1, "raw": {"args": "[1,"}},
                {"name": "no schedule", "kind": "interval", "every": 1, "raw": {"interval": None}},
            ]
        ),
    )
    worker = CeleryProcess(
        "worker",
        tmp_path,
        env,
        "worker",
        "-Q",
        queue,
        "-c",
        "2",
        "--without-gossip",
        "--without-mingle",
        "-l",
        "WARNING",
        app=DJANGO_APP,
    )
    beats = [
        CeleryProcess(
            f"beat{i}",
            tmp_path,
            env,
            "beat",
            "-S",
            "cron_bridge_django",
            "-l",
            "INFO",
            app=DJANGO_APP,
        )
        for i in range(3)
    ]
    services = [worker.start(), *(beat.start() for beat in beats)]
    try:
        wait_for(lambda: all("periodic tasks (" in b.output() for b in beats), 60, "three beats")
        wait_for(lambda: len(journal.read(notes)) >= 3, 60, "the first sends")
        began = time.time()
        # Added while the beats run: a clocked one-off and a solar noon ahead. The noon is 16 s
        # ahead: the row is written by a Django command (seconds on a loaded machine) and read
        # by the beats at their next sync: at 10 s ahead no noon was sent in two of five loaded
        # runs. It falls before the disable and the kill below, 20 s in at the earliest.
        lon, noon = solar_noon_near(datetime.now(UTC) + timedelta(seconds=16))
        clocked_at = datetime.fromtimestamp(math.ceil(began) + 8, UTC)
        ids |= django(
            env,
            "create",
            json.dumps(
                [
                    {
                        "name": "solar noon",
                        "kind": "solar",
                        "event": "solar_noon",
                        "lat": "0",
                        "lon": lon,
                        "args": ["noon"],
                    },
                    {
                        "name": "clocked later",
                        "kind": "clocked",
                        "at": clocked_at.isoformat(),
                        "one_off": True,
                        "args": ["clocked"],
                    },
                ]
            ),
        )
        time.sleep(max(0.0, began + 12 - time.time()))
        # Each change is committed while its command runs (a Django start, seconds on a loaded
        # machine): what comes before is judged from the command's start, what follows from
        # its end.
        edited_at = time.time()
        django(env, "update", json.dumps({"name": "every two seconds", "every": 3}))
        edit_done = time.time()
        time.sleep(6)
        disabled_at = time.time()
        django(env, "update", json.dumps({"name": "every second", "enabled": False}))
        disable_done = time.time()
        time.sleep(math.ceil(time.time()) + 0.5 - time.time())  # between two occurrences
        beats[0].kill_all()
        killed_at = time.time()
        time.sleep(6)
        ended = time.time()
        for beat in beats[1:]:
            beat.terminate()
        sending = store_from_url(django_db)
        try:

            def drained() -> bool:
                """Every occurrence a beat recorded as sent has reached the worker's journal."""
                # The rows this test made (the catalog lists a row added later only once it
                # is published, up to 30 s on), and any other the beats published.
                made = (
                    "every second",
                    "every two seconds",
                    "every minute in Kolkata",
                    "clocked already due",
                    "solar noon",
                    "clocked later",
                )
                names = {job_name(row) for row in made} | set(catalog.read(sending))
                sent = {
                    o for o, c in outcomes_by_occurrence(sending, names).items() if c["enqueued"]
                }
                return sent <= {line["occurrence_id"] for line in journal.read(notes)}

            wait_for(drained, 30, "the worker to run what was sent")
        finally:
            sending.close()
    finally:
        for service in services:
            service.ensure_stopped()

    lines = journal.read(notes)
    by_label: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in lines:
        by_label[line["label"]].append(line)
    counts = Counter(line["occurrence_id"] for line in lines)
    assert max(counts.values()) == 1, counts.most_common(3)
    assert len({line["replica"] for line in lines}) >= 2

    store = store_from_url(django_db)  # the claims live in the project's own database
    try:

        def stood_aside(job: str, at: float) -> bool:
            """An occurrence nobody sent: the live replicas stood aside (the killed one won)."""
            occurrence = Occurrence(job=job, scheduled_at=datetime.fromtimestamp(at, UTC)).id
            outcomes = Counter(
                r.outcome
                for r in lost_claims.history(store, job, 1000)
                if r.occurrence_id == occurrence
            )
            return outcomes == Counter({"skipped-claimed": 2}) and abs(at - killed_at) < 3

        def sent_at(label: str) -> set[float]:
            return {
                Occurrence.parse(line["occurrence_id"]).scheduled_at.timestamp()
                for line in by_label[label]
            }

        second = sent_at("second")
        expected = range(math.ceil(began), math.floor(disabled_at))
        missing = [at for at in expected if at not in second]
        assert all(stood_aside(job_name("every second"), at) for at in missing), missing
        assert max(second) < disable_done + 3, "every replica stops a disabled row"

        two = sent_at("two")
        before, after = edited_at - 1, edit_done + 3  # every replica follows within 3 s
        assert all(at % 2 == 0 for at in two if at < before)
        assert all(at % 3 == 0 for at in two if at > after), sorted(two)
        every_three = [at for at in range(math.ceil(after), math.floor(ended) - 1) if at % 3 == 0]
        missing = [at for at in every_three if at not in two]
        assert all(stood_aside(job_name("every two seconds"), at) for at in missing), missing
        assert {at for at in two if before <= at <= after} <= {
            at
            for at in range(math.ceil(before), math.floor(after) + 1)
            if at % 2 == 0 or at % 3 == 0
        }
    finally:
        store.close()

    (first_two, *_) = by_label["two"]
    assert first_two["n"] == 2 and first_two["queue"] == queue and first_two["priority"] == 5
    assert first_two["team"] == "ops" and first_two["periodic_task_name"] == "every two seconds"
    assert first_two["expires"] is not None  # expire_seconds, in the message as Celery's expires
    minutes = {Occurrence.parse(line["occurrence_id"]).scheduled_at for line in by_label["minute"]}
    assert all(at.second == 0 for at in minutes)
    for at in range(math.ceil(began) + 1, math.floor(ended)):
        if at % 60 == 0 and abs(at - killed_at) > 3:
            assert datetime.fromtimestamp(at, UTC) in minutes
    assert [Occurrence.parse(line["occurrence_id"]).scheduled_at for line in by_label["noon"]] == [
        noon
    ]
    assert [
        Occurrence.parse(line["occurrence_id"]).scheduled_at for line in by_label["clocked"]
    ] == [clocked_at]
    assert len(by_label["due"]) == 1, "a one-off whose time has passed runs once, at once"
    assert "" not in by_label, "the row without a schedule is never sent"

    rows = {row["name"]: row for row in django(env, "dump")}
    settings = sent_at_all(by_label["settings"])
    assert settings and all(at % 3 == 0 for at in settings), "beat_schedule, synced to a row"
    for name, label in [
        ("every second", "second"),
        ("every two seconds", "two"),
        ("every minute in Kolkata", "minute"),
        ("solar noon", "noon"),
        ("clocked later", "clocked"),
        ("clocked already due", "due"),
        ("from settings", "settings"),
    ]:
        # A run counts once its sender writes the row, just after the send: the SIGKILL
        # (half a second after an occurrence, on a loaded machine maybe before that write)
        # may leave the last one it sent uncounted, never more, and nothing is counted twice.
        ran = len(by_label[label])
        at_kill = sum(
            1
            for line in by_label[label]
            if killed_at - 2
            < Occurrence.parse(line["occurrence_id"]).scheduled_at.timestamp()
            <= killed_at
        )
        assert ran - at_kill <= rows[name]["total_run_count"] <= ran, (name, rows[name], ran)
    assert not rows["clocked later"]["enabled"] and not rows["clocked already due"]["enabled"]
    assert rows["clocked later"]["last_run_at"] is not None
    assert rows["solar noon"]["enabled"]
    for name in ("unknown task", "bad json", "no schedule"):
        assert rows[name]["total_run_count"] == 0
    for beat in beats[1:]:
        log = beat.output()
        for name in ("unknown task", "bad json", "no schedule"):
            line = f"periodic task {name!r} (id {ids[name]}) skipped"
            assert log.count(line) == 1, (name, log[-3000:])
        assert "Traceback" not in log
