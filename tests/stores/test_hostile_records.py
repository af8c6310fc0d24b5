"""Every kind of record in every shared store written hostile (nested 100,000 deep, huge and
non-finite numbers, wrong types, megabyte strings, markup), then a beat, ``list``,
``history``, ``history --audit`` and the dashboard run over them: nothing crashes, the other
jobs run, each bad stored schedule and pause is named once in the log however often it is
read, and health stays true."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from io import BytesIO
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cron_bridge import Beat, declare
from cron_bridge.cli.main import main
from cron_bridge.control import catalog, lost_claims
from cron_bridge.control import pause as control
from cron_bridge.control.schedules import FEED_GROUP, GROUP, ScheduleEntry, StoredSchedules
from cron_bridge.errors import StoreUnavailable
from cron_bridge.http import wsgi_app
from cron_bridge.jobs import Occurrence
from cron_bridge.plumbing import inbound
from cron_bridge.plumbing.keys import lock_key
from cron_bridge.run.guard import Guard
from cron_bridge.storable import ENV
from cron_bridge.stores import RunRecord, Store
from cron_bridge.stores.base import done_key
from tests.conftest import StoreKit, make_kit, store_kinds
from tests.e2e.test_http import SECRET
from tests.stores import test_hostile_bytes as hostile_bytes
from tests.waiting import wait_for, waited

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
TYPED_EXAMPLES = 40  # 30 to 60 s on a loaded machine


def _raw_run(kit: StoreKit, store: Any, job: str, values: dict[str, Any]) -> None:
    """A run record written past ``record_many``'s checks, as a hostile peer writes it."""
    if kit.kind in REDIS_KINDS:
        text = values.get("raw") or json.dumps(values)
        store._link.call(lambda c: c.lpush(store._key(f"runs:{job}"), text))
    elif kit.kind == "sqlite":
        row = [
            values.get(c, "x")
            for c in (
                "occurrence_id",
                "outcome",
                "reason",
                "trigger",
                "attempt",
                "replica",
                "started_at",
                "duration_ms",
                "error",
            )
        ]
        store._run(
            lambda conn: conn.execute(
                "INSERT INTO runs (job, occurrence_id, outcome, "
                "reason, trigger, attempt, replica, started_at, duration_ms, error) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [job, *row],
            )
        )
    elif kit.kind == "postgres":
        statement = store._sql(
            "INSERT INTO {runs} (job, occurrence_id, outcome, reason, trigger, attempt, replica,"
            " started_at, duration_ms, error) VALUES (%s, %s, %s, %s, %s, 1, %s, now(), 1, %s)"
        )
        store._call(
            lambda conn: conn.execute(
                statement,
                (
                    job,
                    str(values.get("occurrence_id"))[:900],
                    str(values.get("outcome")),
                    str(values.get("reason")),
                    str(values.get("trigger")),
                    str(values.get("replica")),
                    str(values.get("error")),
                ),
            )
        )
    elif kit.kind == "nats":
        from cron_bridge.stores.nats_link import enc as _enc

        text = values.get("raw") or json.dumps(values)
        store._run(lambda: store._js.publish(f"{store.prefix}.runs.{_enc(job)}", text.encode()))


def _raw_replicas(kit: StoreKit, store: Any) -> None:
    """Heartbeats no beat writes: alive until 9e18 ms, or until a text."""
    if kit.kind in REDIS_KINDS:
        store._link.call(
            lambda c: c.zadd(store._key("replicas"), {"evil-9e18": 9e18, MARKUP: 9e15})
        )
    elif kit.kind == "sqlite":
        rows = [("evil-9e18", 9e18), ("evil-text", "soon")]
        store._run(lambda conn: conn.executemany("INSERT INTO replicas VALUES (?, ?)", rows))
    elif kit.kind == "postgres":
        statement = store._sql(
            "INSERT INTO {replicas} (id, expires_at, clock_offset_ms) VALUES"
            " ('evil-inf', 'infinity', 'NaN'), ('evil-far', now() + interval"
            " '1000 years', 'Infinity')"
        )
        store._call(lambda conn: conn.execute(statement))
    elif kit.kind == "nats":
        from cron_bridge.stores.nats_link import enc as _enc

        alive = int(time.time() * 1000) + 60_000  # alive, with an offset past any float
        for name, value in (
            ("evil-9e18", b'{"x": 9e18}'),
            ("evil-nan", b'{"x": NaN}'),
            ("evil-deep", DEEP.encode()),
            ("evil-huge-offset", f'{{"x": {alive}, "off": {HUGE_INT}}}'.encode()),
        ):
            store._run(lambda v=value, n=name: store._state.put(f"rep.{_enc(n)}", v))


def _raw_last_claimed(kit: StoreKit, store: Any, job: str) -> None:
    """A last claimed occurrence far past the year 9999, for catch-up to read."""
    if kit.kind in REDIS_KINDS:
        store._link.call(lambda c: c.hset(store._key("last"), job, "900000000000000000"))
    elif kit.kind == "sqlite":
        store._run(
            lambda conn: conn.execute("INSERT INTO last_claimed VALUES (?, ?)", (job, 9 * 10**17))
        )
    elif kit.kind == "postgres":
        statement = store._sql("INSERT INTO {last_claimed} (job, scheduled_ms) VALUES (%s, %s)")
        store._call(lambda conn: conn.execute(statement, (job, 9 * 10**17)))
    elif kit.kind == "nats":
        from cron_bridge.stores.nats_link import enc as _enc

        store._run(lambda: store._state.put(f"last.{_enc(job)}", b'{"ms": 900000000000000000}'))


def _write_everything_hostile(kit: StoreKit, store: Store) -> None:
    for key, raw in HOSTILE.items():
        for group in (
            GROUP,
            control.PAUSES,
            catalog.GROUP,
            lost_claims.GROUP,
            lost_claims.JOBS_GROUP,
            control.CHANGES.format(job="hostile.tick"),
        ):
            store.put_control(group, f"bad.{key}", raw)
    store.put_control(control.PAUSES, "hostile.stored", json.dumps({"since": MARKUP}))
    # The change feed the replicas follow: entries of every kind, and a head that is none.
    for feed in (FEED_GROUP, control.FEED.group):
        store.put_control(feed, "head", MARKUP)
        for number, raw in enumerate(HOSTILE.values(), start=1):
            store.put_control(feed, f"seq:{number}", raw)
    # The other kinds of record: run records of the job that runs, heartbeats, catch-up.
    for values in [
        {"raw": DEEP},
        {"raw": MEGA},
        {"raw": "NaN"},
        {
            "occurrence_id": "hostile.tick@2026-12-01T10:00:00.000Z",
            "outcome": MARKUP,
            "trigger": "x",
            "replica": "r",
            "started_at": "2026-12-01T10:00:00+00:00",
        },
        {
            "occurrence_id": "hostile.tick@2026-12-01T10:00:01.000Z",
            "outcome": "failed",
            "trigger": "queue",
            "replica": MARKUP,
            "started_at": "2026-12-01T10:00:01+00:00",
            "attempt": "many",
            "error": MARKUP + MEGA,
            "reason": "refused",
        },
        {
            "raw": f'{{"job": "hostile.tick", "occurrence_id": '
            f'"hostile.tick@2026-12-01T10:00:02.000Z", "outcome": "completed", '
            f'"trigger": "schedule", "replica": "r", "attempt": 1, '
            f'"started_at": "2026-12-01T10:00:02+00:00", "duration_ms": {HUGE_INT}}}',
            "occurrence_id": "hostile.tick@2026-12-01T10:00:02.000Z",
            "outcome": "completed",
            "trigger": "schedule",
            "replica": "r",
            "attempt": 1,
            "started_at": "2026-12-01T10:00:02+00:00",
            "duration_ms": HUGE_INT,
        },
    ]:
        _raw_run(kit, store, "hostile.tick", values)
    _raw_replicas(kit, store)
    _raw_last_claimed(kit, store, "hostile.tick")


def _page(app: Callable[..., Any], path: str) -> tuple[str, str]:
    said: list[str] = []
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "HTTP_AUTHORIZATION": f"Bearer {SECRET}",
        "wsgi.input": BytesIO(b""),
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.url_scheme": "http",
    }
    body = b"".join(app(environ, lambda status, headers: said.append(status)))
    return said[0], body.decode()


@pytest.mark.slow
def test_hostile_records_in_every_store_stop_nothing(
    shared_kit: StoreKit, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "proj.*")
    monkeypatch.setattr(inbound, "_seen", type(inbound._seen)())  # this test's warnings
    store = shared_kit.open()
    _write_everything_hostile(shared_kit, store)
    good = ScheduleEntry(
        name="tenant.good", library="rq", task="proj.report", options={"every": "1h"}
    )
    store.put_control(GROUP, "tenant.good", json.dumps(good.to_json()))
    ran: list[datetime] = []
    job = declare(
        "hostile.tick",
        every="1s",
        misfire="run-once",
        target="inline",
        handler=lambda ctx: ran.append(ctx.scheduled_at),
    )
    caplog.set_level(logging.WARNING)
    beat = Beat(store, [job], heartbeat_interval="1s")
    app = wsgi_app(beat, secret=SECRET)
    try:
        beat.start()
        waited(lambda: len(ran) >= 3, 30)
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
    for args in (
        ["list", "-A", "tests.apps.cli_app", "--store", url],
        ["history", "hostile.tick", "--store", url, "-n", "50"],
        ["history", "hostile.tick", "--store", url, "--json"],
        ["history", "bad.deep", "--audit", "--since", "1h", "--store", url],
        ["history", "tenant.good", "--audit", "--since", "10m", "--store", url],
        ["history", "hostile.tick", "--changes", "--store", url],
        ["schedule", "list", "--store", url],
    ):
        done = runner.invoke(main, args)
        assert done.exit_code in (0, 1), (args, done.output[-500:], done.exception)
        assert not isinstance(done.exception, RecursionError | OverflowError | TypeError), args
    ledgers = set(store.controls(lost_claims.GROUP))
    for _ in range(2):  # the readers of the other records, twice: still named once each
        catalog.read(store)
        lost_claims.LostClaims(
            store
        )  # every ledger of the namespace, as history and the audit read them
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
        waited(lambda: not beat.health()["running"], 30)
        status, body = _page(app, "/_scheduler/healthz")
        assert status.startswith("503") and "failed 3 ticks in a row (RuntimeError)" in body
        assert "an answer nobody expected" not in body  # the message stays in the log
        store.broken = False
        waited(lambda: beat.health()["running"], 30)
        assert _page(app, "/_scheduler/healthz")[0].startswith("200")
    finally:
        beat.stop()
    failures = [r for r in caplog.records if "failed" in r.getMessage() and r.exc_info]
    assert len(failures) == 1, "a failing tick is logged with its traceback once, not each tick"


# Every key kind of the Redis store, and what the store keeps in it: a key of any other Redis
# type is unreadable, never an outage (docs/security.md, "The boundaries").
KEY_KINDS = {
    **{f"controls:{group}": "hash" for group in hostile_bytes.GROUPS},
    "last": "hash",
    "runs": "list",
    "replicas": "zset",
    "clock": "string",
    "claim": "string",
    "lock": "string",
    "mark": "string",
}
TYPES = ["string", "list", "set", "zset", "hash", "stream"]
FORGED = "r-forged"  # a live replica whose clock key is written of the wrong type


def _keys_of(kind: str, job: str) -> list[str]:
    """The keys (without the prefix) of one kind: PAGE's claims, lock and marks (its own
    records: a wrong type there costs those), or a record that TICK's runs go through."""
    recent = [Occurrence(job=hostile_bytes.PAGE, scheduled_at=_minute(k)) for k in range(4)]
    return {
        "last": ["last"],
        "runs": [f"runs:{job}"],
        "replicas": ["replicas"],
        "clock": [f"clock:{FORGED}"],
        "claim": [o.claim_key for o in recent],
        "lock": [lock_key(hostile_bytes.PAGE)],
        "mark": [done_key(o) for o in recent],
    }.get(kind, [kind])


def _minute(back: int) -> datetime:
    return datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=back)


def _write_typed(client: Any, key: bytes, kind: str) -> None:
    """``key`` replaced by a value of the Redis type ``kind``, in one transaction: the beat
    running meanwhile writes some of these keys, and would otherwise make its own type again
    between the delete and the write (WRONGTYPE, seen on a loaded machine)."""
    with client.pipeline(transaction=True) as step:
        step.delete(key)
        {
            "string": lambda: step.set(key, b"x"),
            "list": lambda: step.rpush(key, b"x"),
            "set": lambda: step.sadd(key, b"x"),
            "zset": lambda: step.zadd(key, {b"x": 1}),
            "hash": lambda: step.hset(key, b"x", b"x"),
            "stream": lambda: step.xadd(key, {b"x": b"x"}),
        }[kind]()
        step.execute()


@st.composite
def typed_writes(draw: st.DrawFn) -> tuple[str, str, str]:
    """A key kind of the Redis store and a Redis type it does not hold. Runs are written of
    the wrong type for OTHER only: TICK's must stay readable for the beat's runs to be seen,
    and PAGE's for ``history PAGE`` to know the name when the catalog is of the wrong type
    too (then no job is known: exit 2, as in a store no beat published to)."""
    kind = draw(st.sampled_from(sorted(KEY_KINDS)))
    wrong = draw(st.sampled_from([t for t in TYPES if t != KEY_KINDS[kind]]))
    return kind, wrong, hostile_bytes.OTHER


def _write_through(store: Any, url: str) -> None:
    """What a beat and an operator write: none of it may fail for a key of the wrong type, and
    a batch writes every record but those of a wrong-typed key."""
    fresh = [
        Occurrence(
            job=job,
            scheduled_at=datetime(2030, 1, 1, tzinfo=UTC)
            + timedelta(milliseconds=time.time_ns() // 1000 % 10**9),
        )
        for job in (hostile_bytes.TICK, hostile_bytes.PAGE)
    ]
    assert store.claim_many(fresh, "r-1") == [True, True]  # a wrong-typed `last` or not
    assert store.claim_many(fresh, "r-2") == [False, False]
    mark = f"check:{uuid.uuid4().hex}"
    at = fresh[0].scheduled_at
    store.record_many(
        [
            RunRecord(
                job=job,
                occurrence_id=Occurrence(job=job, scheduled_at=at).id,
                outcome="completed",
                trigger="schedule",
                replica=mark,
                started_at=at,
            )
            for job in (hostile_bytes.OTHER, hostile_bytes.PAGE, hostile_bytes.TICK)
        ]
    )
    for job in (hostile_bytes.PAGE, hostile_bytes.TICK):  # whatever OTHER's list holds
        assert any(r.replica == mark for r in store.history(job, 5)), job
    store.heartbeat("r-check", timedelta(seconds=30), clock_offset_ms=1.0)
    store.acquire(lock_key(hostile_bytes.PAGE), "r-1", timedelta(seconds=5))
    store.release(lock_key(hostile_bytes.PAGE), "r-1")
    store.extend(lock_key(hostile_bytes.PAGE), "r-1", timedelta(seconds=5))
    app_of = ["-A", "tests.apps.cli_app", "--store", url]
    # A pause writes its record and its change-log entry: into a group of the wrong type it
    # writes nothing, and says so (one line, exit 2), instead of saying it paused.
    written = [
        f"controls:{group}"
        for group in (control.PAUSES, control.CHANGES.format(job=hostile_bytes.OTHER))
    ]
    kinds = {store._link.call(lambda c, k=key: c.type(store._key(k))) for key in written}
    refused = bool(kinds - {b"hash", b"none", "hash", "none"})
    for args in (["pause", hostile_bytes.OTHER, *app_of], ["resume", hostile_bytes.OTHER, *app_of]):
        done = CliRunner().invoke(main, args)
        if refused:
            assert done.exit_code == 2 and "delete it to repair" in done.output, done.output
            assert done.exception is None or isinstance(done.exception, SystemExit), args
        else:
            assert done.exit_code == 0, (args, done.output[-2000:], done.exception)


@pytest.mark.slow
def test_a_key_of_the_wrong_redis_type_is_unreadable_never_an_outage(
    request: pytest.FixtureRequest,
    tmp_path: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Generated keys of every kind the Redis store uses, each replaced by another Redis type
    (string, list, set, zset, hash, stream): every reader goes on (the CLI exits 0, the pages
    answer 200), every write of the others goes through (a batch claimed with a wrong-typed
    ``last`` is won, a batch of records with a wrong-typed list writes the others), the beat
    that ran meanwhile runs its job, and a beat started on what was left starts and runs it."""
    import redis

    monkeypatch.setattr(inbound, "_seen", type(inbound._seen)())
    caplog.set_level(logging.WARNING)
    kit = make_kit("redis", request, tmp_path)
    store: Any = kit.open()
    client = redis.Redis.from_url(kit.url.partition("?")[0])
    prefix = store.prefix.encode()
    jobs = hostile_bytes._jobs()
    beat = Beat(store, jobs, heartbeat_interval="1s")
    app = wsgi_app(beat, secret=SECRET)
    beat.start()
    try:
        wait_for(
            lambda: hostile_bytes._ran_since(
                store, hostile_bytes.TICK, datetime.min.replace(tzinfo=UTC)
            ),
            30,
            "a first run",
        )
        _write_through(store, kit.url)  # PAGE's first records, before any key is wrong

        @settings(
            max_examples=TYPED_EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(st.lists(typed_writes(), min_size=1, max_size=3))
        def each(batch: list[tuple[str, str, str]]) -> None:
            if client.type(prefix + b"replicas") in (b"zset", b"none"):  # a live replica
                client.zadd(prefix + b"replicas", {FORGED.encode(): time.time() * 1000 + 60_000})
            for kind, wrong, job in batch:
                for key in _keys_of(kind, job):
                    _write_typed(client, prefix + key.encode(), wrong)
            hostile_bytes.read_everything(store, jobs, app, kit.url)
            _write_through(store, kit.url)

        each()
        after = datetime.now(UTC)
        wait_for(
            lambda: hostile_bytes._ran_since(store, hostile_bytes.TICK, after),
            30,
            "a run after the writes",
        )
        health = beat.health()
        assert health["running"] and health["store_reachable"], health
    finally:
        beat.stop()
    started = kit.open()
    second = Beat(started, hostile_bytes._jobs(), heartbeat_interval="1s")
    since = datetime.now(UTC)
    second.start()
    try:
        wait_for(
            lambda: hostile_bytes._ran_since(started, hostile_bytes.TICK, since),
            30,
            "a run by a beat started on them",
        )
    finally:
        second.stop()
        client.close()
        kit.close()
    said = [r.getMessage() for r in caplog.records if "Redis type" in r.getMessage()]
    assert len(said) == len(set(said)), "a wrong-typed key warned more than once"


@pytest.mark.redis
def test_a_pause_group_of_the_wrong_redis_type_keeps_what_was_read_of_it(
    request: pytest.FixtureRequest,
    tmp_path: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/control.md: a pause group replaced by a string keeps the pauses a reader last read
    (fail closed) and holds none for a reader that never read it, warned once each."""
    import redis

    monkeypatch.setattr(inbound, "_seen", type(inbound._seen)())
    caplog.set_level(logging.WARNING)
    kit = make_kit("redis", request, tmp_path)
    running: Any = kit.open()
    control.pause(running, hostile_bytes.PAGE, reason="held", by="ops")
    assert set(control.paused(running)) == {hostile_bytes.PAGE}
    client = redis.Redis.from_url(kit.url.partition("?")[0])
    client.set(running.prefix + "controls:pause", "x")
    client.close()
    for _ in range(3):
        kept = control.paused(running)
        assert kept[hostile_bytes.PAGE].reason == "held", kept
    assert control.paused(kit.open()) == {}
    said = [r.getMessage() for r in caplog.records if "Redis type" in r.getMessage()]
    assert len(said) == 1 and "string" in said[0], said
    # Pausing into it writes nothing and says so, instead of saying it paused.
    with pytest.raises(StoreUnavailable, match="nothing was written; delete it to repair"):
        control.pause(running, hostile_bytes.OTHER, reason="held", by="ops")
    kit.close()


def _raw_fence(kit: StoreKit, store: Any, key: str, kind: str) -> None:
    """The fencing counter of ``key`` overwritten as a hostile peer would: ``text``, ``huge``
    (the counter's end), ``negative``, or another type (Redis) / a REAL (SQLite)."""
    values = {"text": "'abc'", "huge": "9223372036854775807", "negative": "-1", "other": "2.5"}
    if kit.kind in REDIS_KINDS:
        from cron_bridge.stores.redis import fence_key

        name = fence_key(store.prefix, key)
        if kind == "other":
            store._link.call(lambda c: (c.delete(name), c.hset(name, "t", "1")))
        else:
            store._link.call(lambda c: c.set(name, values[kind].strip("'")))
    elif kit.kind == "sqlite":
        store._run(
            lambda conn: conn.execute(
                f"INSERT OR REPLACE INTO fences (key, token) VALUES (?, {values[kind]})", (key,)
            )
        )
    elif kit.kind == "postgres":
        if kind in ("text", "other"):  # a bigint column holds neither
            kind = "negative"
        statement = store._sql(
            f"INSERT INTO {{fences}} (key, token) VALUES (%s, {values[kind]})"
            " ON CONFLICT (key) DO UPDATE SET token = EXCLUDED.token"
        )
        store._call(lambda conn: conn.execute(statement, (key,)))


@pytest.mark.parametrize("kind", ["text", "huge", "negative", "other"])
@pytest.mark.parametrize(
    "kit", store_kinds(["sqlite", "redis", "redis-cluster", "postgres"]), indirect=True
)
def test_a_hostile_fencing_counter_fails_its_job_alone_and_leaves_the_lock_free(
    kit: StoreKit, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A counter no token can follow: that job's run is recorded failed, naming the counter,
    without taking the lock or starting the handler, as often as it is tried (the refusal
    leaves the counter as it was); the store is not down and another job runs with its
    token."""
    store = kit.open()
    ran: list[int | None] = []
    broken = declare(
        "ledger.broken", every="1s", target="inline", handler=lambda ctx: ran.append(0)
    )
    fine = declare(
        "ledger.fine",
        every="1s",
        target="inline",
        handler=lambda ctx: ran.append(ctx.fencing_token),
    )
    _raw_fence(kit, store, lock_key(broken.name), kind)
    guard = Guard(store, "r1")
    at = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
    for _ in range(3):  # and again: a counter the refusal changed would count on from it
        record = guard.run(broken, Occurrence(job=broken.name, scheduled_at=at), trigger="schedule")
        assert record.outcome == "failed" and "fencing counter" in (record.reason or ""), record
        assert ran == [] and store.holder(lock_key(broken.name)) is None
    other = guard.run(fine, Occurrence(job=fine.name, scheduled_at=at), trigger="schedule")
    assert other.outcome == "completed" and ran == [1], (other, ran)


@pytest.mark.redis
def test_a_batch_into_a_group_of_the_wrong_redis_type_writes_nothing_and_says_so(
    request: pytest.FixtureRequest, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``add_controls`` and ``write_controls`` into a hash replaced by another type: one
    error saying nothing was written there, never a half-written batch."""
    import redis

    kit = make_kit("redis", request, tmp_path)
    store: Any = kit.open()
    client = redis.Redis.from_url(kit.url.partition("?")[0])
    client.rpush(store.prefix + "controls:schedule", "x")
    client.close()
    with pytest.raises(StoreUnavailable, match="nothing was written"):
        store.add_controls("schedule", {"a": "1", "b": "2"})
    with pytest.raises(StoreUnavailable, match="nothing was written"):
        store.write_controls({"schedule": {"a": "1"}, "change:a": {"k": "v"}})
    assert store.controls("change:a") == {"k": "v"}  # the other groups of the write are
    monkeypatch.setenv("CRON_BRIDGE_STORED_TASKS", "proj.*")
    with pytest.raises(StoreUnavailable, match="nothing was written"):
        StoredSchedules(store).add_many(
            [{"name": "t.1", "library": "rq", "task": "proj.x", "every": "1h"}]
        )
    assert store.controls("change:t.1") == {}
    kit.close()
