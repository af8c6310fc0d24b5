"""Every kind of record in every shared store written hostile (nested 100,000 deep, huge and
non-finite numbers, wrong types, megabyte strings, markup), then a beat, ``list``,
``history``, ``history --audit`` and the dashboard run over them: nothing crashes, the other
jobs run, each bad stored schedule and pause is named once in the log however often it is
read, and health stays true."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import datetime
from io import BytesIO
from typing import Any

import pytest
from click.testing import CliRunner

from cron_bridge import Beat, declare, untrusted
from cron_bridge.cli.main import main
from cron_bridge.control import aside, catalog
from cron_bridge.control import pause as control
from cron_bridge.control.schedules import FEED_GROUP, GROUP, StoredSchedule
from cron_bridge.http import wsgi_app
from cron_bridge.storable import ENV
from cron_bridge.stores import Store
from tests.conftest import StoreKit
from tests.e2e.test_http import SECRET

DEEP = "[" * 100_000 + "]" * 100_000
MEGA = "x" * 900_000  # under the 1 MB a NATS message may carry
MARKUP = "<script>alert(1)</script>"
# What a hostile writer puts in a JSON record, each a separate record.
HOSTILE = {
    "deep": DEEP,
    "deep-object": '{"a":' * 50_000 + "1" + "}" * 50_000,
    "huge-number": '{"name": 1e999, "every": 9e18}',
    "nan": '{"name": NaN, "since": NaN}',
    "wrong-types": '{"name": ["x"], "library": 7, "task": {"a": 1}, "options": "cron"}',
    "mega": json.dumps({"name": "mega", "task": MEGA}),
    "markup": json.dumps({"name": MARKUP, "reason": MARKUP, "by": MARKUP}),
    "not-json": "\x07\xff{",  # no NUL: PostgreSQL text cannot hold one
    "int-digits": "9" * 5000,
    # Past a float and a 64-bit integer: float() and math.isfinite() raise OverflowError.
    "huge-int": '{"name": "huge", "every": 1' + "0" * 400 + ', "since": -1' + "0" * 400 + "}",
}
HUGE_INT = "1" + "0" * 400
REDIS_KINDS = ("redis", "valkey", "redis-cluster", "redis-sentinel")


def _raw_run(kit: StoreKit, store: Any, job: str, values: dict[str, Any]) -> None:
    """A run record written past ``record_many``'s checks, as a hostile peer writes it."""
    if kit.kind in REDIS_KINDS:
        text = values.get("raw") or json.dumps(values)
        store._call(lambda c: c.lpush(store._key(f"runs:{job}"), text))
    elif kit.kind == "sqlite":
        row = [values.get(c, "x") for c in ("occurrence_id", "outcome", "reason", "trigger",
                                             "attempt", "replica", "started_at", "duration_ms",
                                             "error")]  # fmt: skip
        store._run(lambda conn: conn.execute("INSERT INTO runs (job, occurrence_id, outcome, "
                   "reason, trigger, attempt, replica, started_at, duration_ms, error) VALUES "
                   "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [job, *row]))  # fmt: skip
    elif kit.kind == "postgres":
        statement = store._sql(
            "INSERT INTO {runs} (job, occurrence_id, outcome, reason, trigger, attempt, replica,"
            " started_at, duration_ms, error) VALUES (%s, %s, %s, %s, %s, 1, %s, now(), 1, %s)"
        )
        store._call(lambda conn: conn.execute(statement, (
            job, str(values.get("occurrence_id"))[:900], str(values.get("outcome")),
            str(values.get("reason")), str(values.get("trigger")), str(values.get("replica")),
            str(values.get("error")))))  # fmt: skip
    elif kit.kind == "nats":
        from cron_bridge.stores.nats import _enc

        text = values.get("raw") or json.dumps(values)
        store._run(lambda: store._js.publish(f"{store.prefix}.runs.{_enc(job)}", text.encode()))


def _raw_replicas(kit: StoreKit, store: Any) -> None:
    """Heartbeats no beat writes: alive until 9e18 ms, or until a text."""
    if kit.kind in REDIS_KINDS:
        store._call(lambda c: c.zadd(store._key("replicas"), {"evil-9e18": 9e18, MARKUP: 9e15}))
    elif kit.kind == "sqlite":
        rows = [("evil-9e18", 9e18), ("evil-text", "soon")]
        store._run(lambda conn: conn.executemany("INSERT INTO replicas VALUES (?, ?)", rows))
    elif kit.kind == "postgres":
        statement = store._sql("INSERT INTO {replicas} (id, expires_at, clock_offset_ms) VALUES"
                               " ('evil-inf', 'infinity', 'NaN'), ('evil-far', now() + interval"
                               " '1000 years', 'Infinity')")  # fmt: skip
        store._call(lambda conn: conn.execute(statement))
    elif kit.kind == "nats":
        from cron_bridge.stores.nats import _enc

        alive = int(time.time() * 1000) + 60_000  # alive, with an offset past any float
        for name, value in (("evil-9e18", b'{"x": 9e18}'), ("evil-nan", b'{"x": NaN}'),
                            ("evil-deep", DEEP.encode()),
                            ("evil-huge-offset", f'{{"x": {alive}, "off": {HUGE_INT}}}'.encode()),
                            ):  # fmt: skip
            store._run(lambda v=value, n=name: store._state.put(f"rep.{_enc(n)}", v))


def _raw_last_claimed(kit: StoreKit, store: Any, job: str) -> None:
    """A last claimed occurrence far past the year 9999, for catch-up to read."""
    if kit.kind in REDIS_KINDS:
        store._call(lambda c: c.hset(store._key("last"), job, "900000000000000000"))
    elif kit.kind == "sqlite":
        store._run(lambda conn: conn.execute("INSERT INTO last_claimed VALUES (?, ?)",
                                             (job, 9 * 10**17)))  # fmt: skip
    elif kit.kind == "postgres":
        statement = store._sql("INSERT INTO {last_claimed} (job, scheduled_ms) VALUES (%s, %s)")
        store._call(lambda conn: conn.execute(statement, (job, 9 * 10**17)))
    elif kit.kind == "nats":
        from cron_bridge.stores.nats import _enc

        store._run(lambda: store._state.put(f"last.{_enc(job)}", b'{"ms": 900000000000000000}'))


def _write_everything_hostile(kit: StoreKit, store: Store) -> None:
    for key, raw in HOSTILE.items():
        for group in (GROUP, control.PAUSES, catalog.GROUP, aside.GROUP, aside.JOBS_GROUP,
                      control.CHANGES.format(job="hostile.tick")):  # fmt: skip
            store.put_control(group, f"bad.{key}", raw)
    store.put_control(control.PAUSES, "hostile.stored", json.dumps({"since": MARKUP}))
    # The change feed the replicas follow: entries of every kind, and a head that is none.
    store.put_control(FEED_GROUP, "head", MARKUP)
    for number, raw in enumerate(HOSTILE.values(), start=1):
        store.put_control(FEED_GROUP, f"seq:{number}", raw)
    # The other kinds of record: run records of the job that runs, heartbeats, catch-up.
    for values in [
        {"raw": DEEP}, {"raw": MEGA}, {"raw": "NaN"},
        {"occurrence_id": "hostile.tick@2026-12-01T10:00:00.000Z", "outcome": MARKUP,
         "trigger": "x", "replica": "r", "started_at": "2026-12-01T10:00:00+00:00"},
        {"occurrence_id": "hostile.tick@2026-12-01T10:00:01.000Z", "outcome": "failed",
         "trigger": "queue", "replica": MARKUP, "started_at": "2026-12-01T10:00:01+00:00",
         "attempt": "many", "error": MARKUP + MEGA, "reason": "refused"},
        {"raw": f'{{"job": "hostile.tick", "occurrence_id": '
                f'"hostile.tick@2026-12-01T10:00:02.000Z", "outcome": "completed", '
                f'"trigger": "schedule", "replica": "r", "attempt": 1, '
                f'"started_at": "2026-12-01T10:00:02+00:00", "duration_ms": {HUGE_INT}}}',
         "occurrence_id": "hostile.tick@2026-12-01T10:00:02.000Z", "outcome": "completed",
         "trigger": "schedule", "replica": "r", "attempt": 1,
         "started_at": "2026-12-01T10:00:02+00:00", "duration_ms": HUGE_INT},
    ]:  # fmt: skip
        _raw_run(kit, store, "hostile.tick", values)
    _raw_replicas(kit, store)
    _raw_last_claimed(kit, store, "hostile.tick")


def _page(app: Callable[..., Any], path: str) -> tuple[str, str]:
    said: list[str] = []
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "",
               "HTTP_AUTHORIZATION": f"Bearer {SECRET}", "wsgi.input": BytesIO(b""),
               "REMOTE_ADDR": "127.0.0.1", "wsgi.url_scheme": "http"}  # fmt: skip
    body = b"".join(app(environ, lambda status, headers: said.append(status)))
    return said[0], body.decode()


@pytest.mark.slow
def test_hostile_records_in_every_store_stop_nothing(
    shared_kit: StoreKit, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "proj.*")
    monkeypatch.setattr(untrusted, "_seen", type(untrusted._seen)())  # this test's warnings
    store = shared_kit.open()
    _write_everything_hostile(shared_kit, store)
    good = StoredSchedule(name="tenant.good", library="rq", task="proj.report",
                          options={"every": "1h"})  # fmt: skip
    store.put_control(GROUP, "tenant.good", json.dumps(good.to_json()))
    ran: list[datetime] = []
    job = declare("hostile.tick", every="1s", misfire="run-once", target="inline",
                  handler=lambda ctx: ran.append(ctx.scheduled_at))  # fmt: skip
    caplog.set_level(logging.WARNING)
    beat = Beat(store, [job], heartbeat_interval="1s")
    app = wsgi_app(beat, secret=SECRET)
    try:
        beat.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(ran) < 3:
            time.sleep(0.1)
        assert len(ran) >= 3, "the declared job stopped running"
        assert "tenant.good" in {j.name for j in beat.jobs()}, "the good stored schedule"
        health = beat.health()
        assert health["running"] and "failing" not in health, health
        for path in ("/_scheduler/", "/_scheduler/jobs/hostile.tick", "/_scheduler/healthz"):
            status, body = _page(app, path)
            assert status.startswith("200"), (path, status, body[:300])
            assert MARKUP not in body, path
    finally:
        beat.stop()
    runner = CliRunner()
    url = shared_kit.url
    for args in (["list", "-A", "tests.apps.cli_app", "--store", url],
                 ["history", "hostile.tick", "--store", url, "-n", "50"],
                 ["history", "hostile.tick", "--store", url, "--json"],
                 ["history", "bad.deep", "--audit", "--since", "1h", "--store", url],
                 ["history", "tenant.good", "--audit", "--since", "10m", "--store", url],
                 ["history", "hostile.tick", "--changes", "--store", url],
                 ["schedule", "list", "--store", url]):  # fmt: skip
        done = runner.invoke(main, args)
        assert done.exit_code in (0, 1), (args, done.output[-500:], done.exception)
        assert not isinstance(done.exception, RecursionError | OverflowError | TypeError), args
    ledgers = set(store.controls(aside.GROUP))
    for _ in range(2):  # the readers of the other records, twice: still named once each
        catalog.read(store)
        aside.Aside(store)  # every ledger of the namespace, as history and the audit read them
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    for key in HOSTILE:
        said = [m for m in warned if f"'bad.{key}'" in m and "stored schedule" in m]
        assert len(said) == 1, (key, said)
        paused = [m for m in warned if f"'bad.{key}'" in m and "pause record" in m]
        assert len(paused) == 1, (key, paused)
        said = [m for m in warned if f"'bad.{key}'" in m and "catalog entry" in m]
        assert len(said) == 1, (key, said)
        # A ledger no live replica writes is deleted by the beat's prune; one still there is
        # named once.
        said = [m for m in warned if f"'bad.{key}'" in m and "ledger" in m]
        assert len(said) == (f"bad.{key}" in ledgers), (key, said)
    assert all(len(m) < 5000 for m in warned), "a megabyte record copied into the log"


def test_a_beat_whose_loop_keeps_failing_says_so_in_its_health(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A store answering with something that breaks every tick: 503 from /healthz, with the
    reason, after three failed ticks; healthy again once the ticks pass."""
    from cron_bridge.stores import MemoryStore

    class Broken(MemoryStore):
        broken = True

        def controls(self, group: str, **bounds: int) -> dict[str, str]:
            if self.broken and group == GROUP:
                raise RuntimeError("an answer nobody expected")
            return super().controls(group, **bounds)

    store = Broken(allow_local_cluster=True)
    beat = Beat(store, [declare("tick", every="1h", target="inline", handler=lambda c: None)])
    app = wsgi_app(beat, secret=SECRET)
    try:
        beat.start()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and beat.health()["running"]:
            time.sleep(0.1)
        status, body = _page(app, "/_scheduler/healthz")
        assert status.startswith("503") and "failed 3 ticks in a row (RuntimeError)" in body
        assert "an answer nobody expected" not in body  # the message stays in the log
        store.broken = False
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not beat.health()["running"]:
            time.sleep(0.1)
        assert _page(app, "/_scheduler/healthz")[0].startswith("200")
    finally:
        beat.stop()
    failures = [r for r in caplog.records if "failed" in r.getMessage() and r.exc_info]
    assert len(failures) == 1, "a failing tick is logged with its traceback once, not each tick"
