"""What other processes and other versions read, pinned to golden literals: the keys and owners
every store holds, the control groups and the JSON of what is in them, the run records and
the tables they are kept in, the fields a message carries, the names a worker finds the
stored-schedule task by, RQ's job ids, the entry points and the console script, and pickled
schedules. A rename that changes any of them fails here: what is on the wire stays, whatever
the modules behind it are called (docs/architecture.md, "The wire")."""

from __future__ import annotations

import importlib
import json
import pickle
import re
import sqlite3
import subprocess
import sys
import time
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import redis

from cron_bridge import Cron, Every, declare
from cron_bridge.adapters import META_KEY, Dispatch
from cron_bridge.control import catalog, pause
from cron_bridge.control.lost_claims import Ledger
from cron_bridge.control.schedules import StoredSchedules
from cron_bridge.http.sessions import Sessions
from cron_bridge.jobs import Job, Occurrence
from cron_bridge.plumbing.keys import (
    began_key,
    catch_up_key,
    claim_key,
    done_key,
    lock_key,
    lock_owner,
    parse_lock_owner,
)
from cron_bridge.run.guard import Guard
from cron_bridge.stores import (
    MemoryStore,
    PostgresStore,
    RedisStore,
    RunRecord,
    Store,
    store_from_url,
)
from cron_bridge.testing import FakeClock
from tests.servers import RedisServer

pytestmark = pytest.mark.extras  # the wire of every store and adapter, read with their own drivers

ROOT = Path(__file__).resolve().parent.parent
AT = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)
AT_MS = 1796090400000
DAY = timedelta(days=1)
NEXT_MS = AT_MS + 86_400_000  # the occurrence left pending its send
JOB = "billing.close-day"
OCCURRENCE_ID = "billing.close-day@2026-12-01T02:00:00.000Z"
FAILING = "billing.reconcile"
NONCE = re.compile(r"[0-9a-f]{8}")
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?\+00:00")


# Store keys and the lock owner.


def test_the_keys_and_the_lock_owner_are_the_ones_every_version_reads() -> None:
    occurrence = Occurrence(job=JOB, scheduled_at=AT)
    assert (occurrence.id, occurrence.epoch_ms) == (OCCURRENCE_ID, AT_MS)
    assert occurrence.claim_key == claim_key(JOB, AT_MS) == f"occ:{JOB}:{AT_MS}"
    assert lock_key(JOB) == f"active:{JOB}"
    assert done_key(JOB, AT_MS) == f"done:{JOB}:{AT_MS}"
    assert began_key(JOB, AT_MS) == f"began:{JOB}:{AT_MS}"
    assert catch_up_key(JOB, AT_MS) == f"catchup:{JOB}:{AT_MS}"
    assert pause.catch_up_key(occurrence) == f"catchup:{JOB}:{AT_MS}"
    owner = lock_owner("beat-a", OCCURRENCE_ID, "0123abcd")
    assert owner == f"beat-a|{OCCURRENCE_ID}|0123abcd"
    assert parse_lock_owner(owner) == ("beat-a", OCCURRENCE_ID)
    assert Occurrence.parse(OCCURRENCE_ID) == occurrence


class Filled(NamedTuple):
    records: list[RunRecord]
    lock_owner: str | None  # who held active:<job> while the delivery ran
    session: str  # the id of the session revoked


def _fill(store: Store) -> Filled:
    """What a cluster writes: a claim, a completed queue delivery (its lock read while it
    runs), a failed run, a pause, a stored schedule, the catalog, a ledger of a replica that
    stood aside, a revoked session and a heartbeat."""
    owners: list[str | None] = []
    job = declare(
        JOB,
        every="1d",
        target="inline",
        handler=lambda ctx: owners.append(store.holder(f"active:{JOB}")),
    )

    def broken(ctx: Any) -> None:
        raise RuntimeError("the ledger is locked")

    failing = declare(FAILING, every="1h", target="inline", handler=broken)
    occurrence = Occurrence(job=JOB, scheduled_at=AT)
    assert store.claim_many([occurrence], "beat-a") == [True]
    # The next day's claimed by beat-a, which died before it sent it: pending its send.
    assert store.claim_many([Occurrence(job=JOB, scheduled_at=AT + DAY)], "beat-a", pending=[True])
    guard = Guard(store, "worker-1", clock=FakeClock(AT + timedelta(seconds=1)))
    records = [
        guard.run(job, occurrence, trigger="queue"),
        guard.run(failing, Occurrence(job=FAILING, scheduled_at=AT), trigger="schedule"),
    ]
    pause.pause(store, JOB, reason="month end", by="ops@example")
    StoredSchedules(store).add(
        "nightly-report",
        task="reports.tasks.nightly",
        library="celery",
        cron="0 3 * * *",
        tz="Europe/Warsaw",
        kwargs={"fmt": "pdf"},
        queue="reports",
        by="ops",
    )
    catalog.publish(store, [job], now=AT)
    ledger = Ledger("beat-b", lambda: [JOB], now=lambda: AT)
    ledger.resume(AT - timedelta(seconds=1))
    ledger.asked([AT], lost=1)
    ledger.flush(store, force=True)
    sessions = Sessions(b"s" * 32, store)
    cookie = sessions.issue()
    sessions.revoke(cookie)
    store.heartbeat("beat-a", timedelta(seconds=30), clock_offset_ms=1.5)
    [owner] = owners
    return Filled(records, owner, cookie.split(".")[0])


def _check_controls(controls: dict[tuple[str, str], str]) -> None:
    """The control groups, their keys and the JSON in them, as every store holds them."""
    keys = set(controls)
    [(_, change_key)] = [k for k in keys if k[0] == f"change:{JOB}"]
    [(_, schedule_change)] = [k for k in keys if k[0] == "change:nightly-report"]
    assert keys == {
        ("pause", JOB),
        (f"change:{JOB}", change_key),
        ("schedule", "nightly-report"),
        ("schedule-feed", "seq:1"),
        ("schedule-feed", "head"),
        ("pause-feed", "seq:1"),
        ("pause-feed", "head"),
        ("change:nightly-report", schedule_change),
        ("jobs", JOB),
        ("aside", "beat-b"),
        ("aside-jobs", "0cca45249c88b81e"),
        ("latest-run", JOB),
        ("latest-run", FAILING),
        ("latest-end", JOB),
        ("latest-end", FAILING),
    }
    # Each job's newest run and newest end: scheduled (epoch ms, 15 digits), rank, attempt.
    for group in ("latest-run", "latest-end"):
        assert controls[group, JOB] == f"{AT_MS:015d} 4 00001 completed"
        assert controls[group, FAILING] == f"{AT_MS:015d} 3 00001 failed"
    assert re.fullmatch(r"\d{20}:[0-9a-f]{6}", change_key), change_key  # <epoch ns>:<random>
    paused = json.loads(controls["pause", JOB])
    assert list(paused) == ["reason", "by", "since"]
    assert paused["reason"] == "month end" and paused["by"] == "ops@example"
    assert ISO.fullmatch(paused["since"])
    change = json.loads(controls[f"change:{JOB}", change_key])
    assert list(change) == ["job", "action", "by", "at", "reason"]
    assert (change["job"], change["action"], change["by"], change["reason"]) == (
        JOB,
        "paused",
        "ops@example",
        "month end",
    )
    assert json.loads(controls["schedule", "nightly-report"]) == {
        "name": "nightly-report",
        "library": "celery",
        "task": "reports.tasks.nightly",
        "options": {"cron": "0 3 * * *", "tz": "Europe/Warsaw"},
        "args": [],
        "kwargs": {"fmt": "pdf"},
        "queue": "reports",
        "backoff": None,
    }
    feed = json.loads(controls["schedule-feed", "seq:1"])
    assert list(feed) == ["name", "at"] and feed["name"] == "nightly-report"
    assert isinstance(feed["at"], float)
    assert controls["schedule-feed", "head"] == "1"
    feed = json.loads(controls["pause-feed", "seq:1"])  # the pauses' feed, numbered alike
    assert list(feed) == ["name", "at"] and feed["name"] == JOB
    assert controls["pause-feed", "head"] == "1"
    added = json.loads(controls["change:nightly-report", schedule_change])
    assert (added["job"], added["action"], added["by"]) == (
        "nightly-report",
        "schedule added",
        "ops",
    )
    assert json.loads(controls["jobs", JOB]) == {
        "external": False,
        "first": str(AT_MS),
        "schedule": "every 1d",
        "scope": "cluster",
        "seen": "2026-12-01",
        "target": "inline",
        "tz": "UTC",
    }
    assert controls["aside", "beat-b"] == (
        '{"v":1,"spans":[[1796090400000,null,1,"0cca45249c88b81e"]],"last":1796090400000}'
    )
    assert controls["aside-jobs", "0cca45249c88b81e"] == (
        '{"count":1,"names":["billing.close-day"]}'
    )


def _check_owner(owner: str | None) -> None:
    """The lock held while the delivery ran: ``<replica>|<occurrence id>|<nonce>``."""
    assert owner is not None
    replica, occurrence_id, nonce = owner.split("|")
    assert (replica, occurrence_id) == ("worker-1", OCCURRENCE_ID) and NONCE.fullmatch(nonce)


# The SQLite store: a file other processes on the host open.

SQLITE_TABLES = {
    "claims": ["key", "owner", "expires_ms"],
    "controls": ["grp", "key", "value"],
    "fences": ["key", "token"],
    "last_claimed": ["job", "scheduled_ms"],
    "meta": ["name", "value"],
    "pending": ["key", "owner", "expires_ms", "settled"],
    "replicas": ["id", "expires_ms"],
    "runs": [
        "id",
        "job",
        "occurrence_id",
        "outcome",
        "reason",
        "trigger",
        "attempt",
        "replica",
        "started_at",
        "duration_ms",
        "error",
        "traceback",
    ],
    "sqlite_sequence": ["name", "seq"],
}


def test_a_sqlite_store_holds_what_every_version_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRON_BRIDGE_STORED_TASKS", "reports.tasks.nightly")
    path = tmp_path / "store.db"
    store = store_from_url(f"sqlite:///{path}")
    try:
        filled = _fill(store)
    finally:
        store.close()
    _check_owner(filled.lock_owner)
    db = sqlite3.connect(path)
    try:
        tables = [
            name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        assert {t: [c[1] for c in db.execute(f"PRAGMA table_info({t})")] for t in tables} == (
            SQLITE_TABLES
        )
        assert db.execute("SELECT name, value FROM meta").fetchall() == [("schema_version", "2")]
        assert [
            (key, owner, settled) for key, owner, _, settled in db.execute("SELECT * FROM pending")
        ] == [(f"occ:{JOB}:{NEXT_MS}", "beat-a", 0)]
        assert {key: owner for key, owner, _ in db.execute("SELECT * FROM claims")} == {
            f"occ:{JOB}:{AT_MS}": "beat-a",
            f"occ:{JOB}:{NEXT_MS}": "beat-a",
            f"done:{JOB}:{AT_MS}": "completed",
            f"session-revoked:{filled.session}": "revoked",
        }
        assert db.execute("SELECT * FROM last_claimed").fetchall() == [(JOB, NEXT_MS)]
        assert [id_ for id_, _ in db.execute("SELECT * FROM replicas")] == ["beat-a"]
        rows = db.execute("SELECT * FROM runs ORDER BY id").fetchall()
        controls = {(g, k): v for g, k, v in db.execute("SELECT grp, key, value FROM controls")}
    finally:
        db.close()
    completed, failed = rows
    assert completed[:9] == (
        1,
        JOB,
        OCCURRENCE_ID,
        "completed",
        None,
        "queue",
        1,
        "worker-1",
        "2026-12-01T02:00:01+00:00",
    )
    assert isinstance(completed[9], float) and completed[10:] == (None, None)
    assert failed[1:9] == (
        FAILING,
        "billing.reconcile@2026-12-01T02:00:00.000Z",
        "failed",
        None,
        "schedule",
        1,
        "worker-1",
        "2026-12-01T02:00:01+00:00",
    )
    assert failed[10] == "RuntimeError: the ledger is locked"
    assert failed[11].startswith("Traceback (most recent call last):\n")
    _check_controls(controls)


# Run records as JSON: what the Redis and NATS stores keep, and older versions wrote.

RECORD_JSON = {
    "job": JOB,
    "occurrence_id": OCCURRENCE_ID,
    "outcome": "completed",
    "trigger": "queue",
    "replica": "worker-1",
    "started_at": "2026-12-01T02:00:01+00:00",
    "attempt": 1,
    "reason": None,
    "duration_ms": 12.5,
    "error": None,
}


def test_a_run_record_travels_as_json_with_these_fields() -> None:
    """A record without a traceback leaves the field out (a replica that predates it reads
    it); one of a version before it is read as it was written."""
    record = RunRecord.from_json(dict(RECORD_JSON))
    assert record.to_json() == RECORD_JSON
    failed = RunRecord.from_json(
        {**RECORD_JSON, "outcome": "failed", "error": "E: x", "traceback": "Traceback ...\nE: x\n"}
    )
    assert list(failed.to_json()) == [*RECORD_JSON, "traceback"]


def _redis_layout(client: redis.Redis, prefix: str) -> dict[str, str]:
    return {
        key.removeprefix(prefix): client.type(key) for key in client.scan_iter(match=f"{prefix}*")
    }


@pytest.mark.redis
def test_a_redis_store_lays_out_its_keys_as_every_version_reads_them(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRON_BRIDGE_STORED_TASKS", "reports.tasks.nightly")
    prefix = "wire-test:"
    client = redis.Redis(port=redis_server.port, decode_responses=True)
    store = RedisStore(client, prefix=prefix)
    filled = _fill(store)
    _check_owner(filled.lock_owner)
    assert _redis_layout(client, prefix) == {
        f"occ:{JOB}:{AT_MS}": "string",
        f"occ:{JOB}:{NEXT_MS}": "string",
        "{pending}": "zset",
        "{pending}-owners": "hash",
        f"done:{JOB}:{AT_MS}": "string",
        f"session-revoked:{filled.session}": "string",
        "last": "hash",
        f"runs:{JOB}": "list",
        f"runs:{FAILING}": "list",
        "replicas": "zset",
        "clock:beat-a": "string",
        "controls:pause": "hash",
        f"controls:change:{JOB}": "hash",
        "controls:schedule": "hash",
        f"controls-order:{{{prefix}controls:schedule}}": "zset",  # its names, in order
        "controls:schedule-feed": "hash",
        "controls:pause-feed": "hash",
        "controls:change:nightly-report": "hash",
        "controls:jobs": "hash",
        "controls:aside": "hash",
        "controls:aside-jobs": "hash",
        "controls:latest-run": "hash",
        "controls:latest-end": "hash",
        f"fence:{{{prefix}active:{JOB}}}": "string",
        f"fence:{{{prefix}active:{FAILING}}}": "string",
    }
    assert client.get(f"{prefix}occ:{JOB}:{AT_MS}") == "beat-a"
    assert client.get(f"{prefix}fence:{{{prefix}active:{JOB}}}") == "1"
    assert client.get(f"{prefix}done:{JOB}:{AT_MS}") == "completed"
    assert client.hgetall(f"{prefix}last") == {JOB: str(NEXT_MS)}
    [(member, until)] = client.zrange(f"{prefix}{{pending}}", 0, -1, withscores=True)
    assert member == f"occ:{JOB}:{NEXT_MS}"  # the claim key
    assert abs(until / 1000 - time.time()) < 60  # the end of its lease, epoch ms
    assert client.hgetall(f"{prefix}{{pending}}-owners") == {member: "beat-a"}
    assert client.zrange(f"{prefix}replicas", 0, -1) == ["beat-a"]
    assert client.get(f"{prefix}clock:beat-a") == "1.5"
    stored = sorted(client.hkeys(f"{prefix}controls:schedule"))
    order = f"{prefix}controls-order:{{{prefix}controls:schedule}}"
    assert stored and client.zrange(order, 0, -1, withscores=True) == [(n, 0.0) for n in stored]
    [completed] = client.lrange(f"{prefix}runs:{JOB}", 0, -1)
    assert json.loads(completed) == {
        **RECORD_JSON,
        "duration_ms": filled.records[0].duration_ms,
    }
    [failed] = client.lrange(f"{prefix}runs:{FAILING}", 0, -1)
    assert list(json.loads(failed)) == [*RECORD_JSON, "traceback"]
    controls = {
        (name.removeprefix(f"{prefix}controls:"), key): value
        for name in client.scan_iter(match=f"{prefix}controls:*")
        for key, value in client.hgetall(name).items()
    }
    _check_controls(controls)
    pubsub = client.pubsub()
    pubsub.subscribe(f"{prefix}notify:schedule-feed")
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"
    store.notify("schedule-feed")  # what replicas listen on for the stored schedules' feed
    notice = pubsub.get_message(timeout=5)
    pubsub.close()
    assert notice is not None and notice["channel"] == f"{prefix}notify:schedule-feed"
    store.close()


# The Postgres tables, as the DDL a team's migrations apply.

POSTGRES_TABLES = {
    "meta": ["name", "value"],
    "claims": ["key", "owner", "expires_at"],
    "last_claimed": ["job", "scheduled_ms"],
    "runs": [
        "id",
        "job",
        "occurrence_id",
        "outcome",
        "reason",
        "trigger",
        "attempt",
        "replica",
        "started_at",
        "duration_ms",
        "error",
        "traceback",
    ],
    "replicas": ["id", "expires_at", "clock_offset_ms"],
    "controls": ["grp", "key", "value", "updated_at"],
    "fences": ["key", "token"],
    "pending": ["key", "owner", "expires_at", "settled"],
}


def test_the_postgres_tables_are_named_and_shaped_as_every_version_reads_them() -> None:
    ddl = PostgresStore("postgresql://app@db/app", schema="ops", create_tables=False).ddl()
    tables: dict[str, list[str]] = {}
    created = r'CREATE TABLE IF NOT EXISTS "ops"\."cron_bridge_(\w+)" \((.*?)\);'
    for name, body in re.findall(created, ddl, re.S):
        parts = (part.split()[0] for part in re.split(r",(?![^(]*\))", body))
        tables[name] = [column for column in parts if column != "PRIMARY"]
    added = r'ALTER TABLE "ops"\."cron_bridge_(\w+)" ADD COLUMN IF NOT EXISTS (\w+)'
    for name, column in re.findall(added, ddl):
        tables[name].append(column)
    assert tables == POSTGRES_TABLES
    assert "INSERT INTO \"ops\".\"cron_bridge_meta\" VALUES ('schema_version', '4')" in ddl


# What a message carries, and the names a worker finds things by.


def _job() -> Job:
    return declare(JOB, every="1d", adapter="test", task="billing.tasks.close_day", attempts=3)


def test_a_message_carries_these_fields_under_this_key() -> None:
    occurrence = Occurrence(job=JOB, scheduled_at=AT)
    dispatch = Dispatch(job=_job(), occurrence=occurrence, trigger="schedule", replica="beat-a")
    assert META_KEY == "cron_bridge"
    meta = dispatch.meta()
    copy = meta.pop("copy")
    assert meta == {
        "job": JOB,
        "occurrence_id": OCCURRENCE_ID,
        "scheduled_at": "2026-12-01T02:00:00+00:00",
        "trigger": "schedule",
        "replica": "beat-a",
        "attempts": 3,
    }
    # Each send's own name (a worker reads it as a name: letters, digits, - and _).
    assert isinstance(copy, str) and len(copy) == 16 and copy.isalnum()
    again = Dispatch(job=_job(), occurrence=occurrence, trigger="schedule", replica="beat-a")
    assert again.meta()["copy"] != copy
    traced = Dispatch(
        job=_job(),
        occurrence=occurrence,
        trigger="misfire",
        replica="beat-a",
        trace={"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    )
    assert traced.meta()["trace"] == {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    }


def test_the_stored_schedule_tasks_are_found_by_these_names() -> None:
    """Celery sends ``cron_bridge.stored`` by name (the worker imports
    ``cron_bridge_celery.stored`` to register it), Dramatiq enqueues the actor
    ``cron_bridge_stored``, and RQ enqueues the dotted path a worker imports."""
    from cron_bridge_celery import CeleryAdapter
    from cron_bridge_dramatiq import DramatiqAdapter
    from cron_bridge_rq import RQAdapter

    celery_stored = importlib.import_module("cron_bridge_celery.stored")
    assert celery_stored.run_stored.name == CeleryAdapter.stored_task == "cron_bridge.stored"
    assert DramatiqAdapter.stored_task == "cron_bridge_stored"
    dramatiq_stored = importlib.import_module("cron_bridge_dramatiq.stored")
    assert dramatiq_stored.run_stored.actor_name == "cron_bridge_stored"
    assert RQAdapter.stored_task == "cron_bridge_rq.stored.run_stored"
    module, _, name = RQAdapter.stored_task.rpartition(".")
    run_stored = getattr(importlib.import_module(module), name)
    assert f"{run_stored.__module__}.{run_stored.__qualname__}" == RQAdapter.stored_task


def test_rq_job_ids_are_made_from_occurrences_as_every_version_makes_them() -> None:
    """A resend of an occurrence finds its job by id (``unique=True``), whichever version
    sent it first."""
    from cron_bridge_rq.ids import rq_job_id

    assert rq_job_id(Occurrence(job=JOB, scheduled_at=AT)) == (
        f"cb-billing_close-day-bf55cdcb-{AT_MS}"
    )
    assert rq_job_id(Occurrence(job="a_b", scheduled_at=AT)) != rq_job_id(
        Occurrence(job="a.b", scheduled_at=AT)
    )


# Entry points and the command.

ENTRY_POINTS = {
    "pyproject.toml": {
        "scripts": {"cron-bridge": "cron_bridge.cli:main"},
        "celery.beat_schedulers": {
            "cron_bridge": "cron_bridge.schedulers:ClusterScheduler",
            "cron_bridge_django": "cron_bridge.schedulers:DjangoClusterScheduler",
        },
    },
    "adapters/celery/pyproject.toml": {
        "cron_bridge.adapters": {"celery": "cron_bridge_celery:CeleryAdapter"},
        "cron_bridge.celery_schedulers": {
            "cron_bridge": "cron_bridge_celery:ClusterScheduler",
            "cron_bridge_django": "cron_bridge_celery.django_beat:DjangoClusterScheduler",
        },
        # Loads the check of `celery worker --beat` into every celery command.
        "celery.commands": {"cron-bridge-check": "cron_bridge_celery.celery_command:command"},
    },
    "adapters/rq/pyproject.toml": {
        "cron_bridge.adapters": {"rq": "cron_bridge_rq:RQAdapter"},
        "cron_bridge.commands": {"rq-cron": "cron_bridge_rq.rq_cron:rq_cron"},
        "cron_bridge.importers": {"rq-scheduler": "cron_bridge_rq.rq_scheduler:rq_scheduler"},
    },
    "adapters/dramatiq/pyproject.toml": {
        "cron_bridge.adapters": {"dramatiq": "cron_bridge_dramatiq:DramatiqAdapter"},
        "cron_bridge.commands": {
            "periodiq": "cron_bridge_dramatiq.periodiq:periodiq",
            "dramatiq-crontab": "cron_bridge_dramatiq.crontab:dramatiq_crontab",
        },
    },
}


def _declared(path: str) -> dict[str, dict[str, str]]:
    project = tomllib.loads((ROOT / path).read_text(encoding="utf-8"))["project"]
    found: dict[str, dict[str, str]] = dict(project.get("entry-points", {}))
    if "scripts" in project:
        found["scripts"] = project["scripts"]
    return found


@pytest.mark.parametrize("path", list(ENTRY_POINTS))
def test_entry_points_keep_their_groups_names_and_values(path: str) -> None:
    """What every pyproject.toml registers, and each value names an object that exists."""
    declared = _declared(path)
    assert declared == ENTRY_POINTS[path]
    for points in declared.values():
        for value in points.values():
            module, _, attribute = value.partition(":")
            assert getattr(importlib.import_module(module), attribute) is not None, value


def _command(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "cron_bridge", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_core_finds_the_adapters_and_their_commands_under_these_groups(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the adapters register (above) is what the core looks for: each library's adapter
    (``cron_bridge.adapters``), the drop-in commands (``cron_bridge.commands``) and the
    importers (``cron_bridge.importers``), through ``python -m cron_bridge``."""
    monkeypatch.setenv("CRON_BRIDGE_STORED_TASKS", "reports.tasks.nightly")
    for library in ("celery", "rq", "dramatiq"):
        StoredSchedules(MemoryStore()).check(
            "nightly", task="reports.tasks.nightly", library=library, every="1h"
        )
    listed = _command("--help")
    assert all(f"  {name} " in listed for name in ("rq-cron", "periodiq", "dramatiq-crontab"))
    assert "  rq-scheduler " in _command("import", "--help")
    assert _command("--version").startswith("cron-bridge ")


# Pickled schedules: kept by Celery's and Django's beat schedulers, and by user code.

PICKLED = {
    b"\x80\x04\x95H\x00\x00\x00\x00\x00\x00\x00\x8c\x15cron_bridge.schedules\x94\x8c\x05_cron"
    b"\x94\x93\x94(\x8c\x0b0 2 * * 1-5\x94\x8c\rEurope/Warsaw\x94\x88\x89t\x94R\x94.": Cron(
        "0 2 * * 1-5", tz="Europe/Warsaw"
    ),
    b"\x80\x04\x95E\x00\x00\x00\x00\x00\x00\x00\x8c\x15cron_bridge.schedules\x94\x8c\x05_cron"
    b"\x94\x93\x94(\x8c\x12*/15 9-17 1,15 * *\x94\x8c\x03UTC\x94\x89\x89t\x94R\x94.": Cron(
        "*/15 9-17 1,15 * *", day_or=False
    ),
    b"\x80\x04\x95\x95\x00\x00\x00\x00\x00\x00\x00\x8c\x15cron_bridge.schedules\x94\x8c\x05Every"
    b"\x94\x93\x94)\x81\x94N}\x94(\x8c\x0c_interval_ms\x94J\x90_\x01\x00\x8c\n_offset_ms\x94M"
    b"\x98:\x8c\x08interval\x94\x8c\x08datetime\x94\x8c\ttimedelta\x94\x93\x94K\x00KZK\x00\x87"
    b"\x94R\x94\x8c\x06offset\x94h\nK\x00K\x0fK\x00\x87\x94R\x94u\x86\x94b.": Every(
        "90s", offset="15s"
    ),
    b"\x80\x04\x95\x94\x00\x00\x00\x00\x00\x00\x00\x8c\x15cron_bridge.schedules\x94\x8c\x05Every"
    b"\x94\x93\x94)\x81\x94N}\x94(\x8c\x0c_interval_ms\x94J\x00\\&\x05\x8c\n_offset_ms\x94K\x00"
    b"\x8c\x08interval\x94\x8c\x08datetime\x94\x8c\ttimedelta\x94\x93\x94K\x01K\x00K\x00\x87"
    b"\x94R\x94\x8c\x06offset\x94h\nK\x00K\x00K\x00\x87\x94R\x94u\x86\x94b.": Every("1d"),
}


@pytest.mark.parametrize("pickled", list(PICKLED), ids=[repr(s) for s in PICKLED.values()])
def test_a_schedule_pickled_by_an_earlier_version_loads_as_it_was(pickled: bytes) -> None:
    schedule = pickle.loads(pickled)
    assert schedule == PICKLED[pickled]
    assert schedule.next_after(AT) == PICKLED[pickled].next_after(AT)


@pytest.mark.parametrize("protocol", range(2, pickle.HIGHEST_PROTOCOL + 1))
def test_a_schedule_pickled_today_loads_at_every_protocol(protocol: int) -> None:
    """From protocol 2, the first that pickles a class with ``__slots__`` (``Every``)."""
    for schedule in PICKLED.values():
        again = pickle.loads(pickle.dumps(schedule, protocol=protocol))
        assert again == schedule and again.next_after(AT) == schedule.next_after(AT)
