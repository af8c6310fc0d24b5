"""``cron-bridge import rq-scheduler`` reads another tool's records: a job hash that holds
anything (a list for ``meta``, an int for ``args``, an ``origin`` that is not UTF-8, an
``interval`` of ``"0"``, a ``repeat`` of 10**30, a cron job repeated 10**9 times, a pickle of
a few bytes that expands to 2**40 values) stays where it is with its reason in one line, in
bounded time, and every good job beside it is imported, dry run and ``--apply`` alike."""

from __future__ import annotations

import os
import pickle
import pickletools
import subprocess
import sys
import time
import uuid
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cron_bridge.adapters import META_KEY, Dispatch
from cron_bridge.control.schedules import ScheduleEntry, StoredSchedules
from cron_bridge.storable import ENV
from cron_bridge.stores import store_from_url
from cron_bridge_rq.adapter import RQAdapter
from cron_bridge_rq.rq_scheduler import SCHEDULED, plan, rq_scheduler
from cron_bridge_rq.scheduled_job import NODES_MAX, Unreadable, read_job
from tests.servers import RedisServer

pytestmark = pytest.mark.redis

TASK = "tests.apps.rq_cron_tasks.send_report"
GOOD_ID = "nightly-report"
NEXT_AT = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def job_hash(
    *,
    func: Any = TASK,
    args: Any = ("daily",),
    kwargs: Any = None,
    meta: Any = None,
    data: bytes | None = None,
    **fields: bytes,
) -> dict[bytes, bytes]:
    """A job hash as rq-scheduler writes one: pickled, compressed data and pickled meta."""
    meta = {"cron_string": "*/10 * * * *"} if meta is None else meta
    body = data if data is not None else zlib.compress(pickle.dumps((func, None, args, kwargs)))
    found = {
        b"data": body,
        b"meta": pickle.dumps(meta),
        b"origin": b"reports",
        b"result_ttl": b"-1",
    }
    found.update({key.encode(): value for key, value in fields.items()})
    return found


def shared_bomb(depth: int = 40) -> bytes:
    """A list holding the same list twice, ``depth`` deep: under 300 bytes of pickle, 2**40
    values once expanded (json.dumps never finishes it)."""
    nested: list[Any] = []
    for _ in range(depth):
        nested = [nested, nested]
    return pickletools.optimize(pickle.dumps(nested, protocol=2))


def data_with_args(ops: bytes) -> bytes:
    """A job's data whose args are the value the pickle opcodes ``ops`` build (no PROTO or
    STOP): how an argument list no pickler writes (too deep, too shared) is made."""
    head = b"\x80\x02(\x8c" + bytes([len(TASK)]) + TASK.encode() + b"N"
    return zlib.compress(head + ops + b"Nt.")


MALFORMED: dict[str, dict[bytes, bytes]] = {
    "meta-a-list": {**job_hash(), b"meta": pickle.dumps(["cron_string", "* * * * *"])},
    "args-an-int": job_hash(args=7),
    "origin-not-utf8": job_hash(origin=b"\xff\xfe"),
    "interval-zero": job_hash(meta={"interval": "0"}),
    "repeat-huge": job_hash(meta={"interval": 60, "repeat": 10**30}),
    "cron-repeat-1e9": job_hash(meta={"cron_string": "*/10 * * * *", "repeat": 10**9}),
    "cron-repeat-5000": job_hash(meta={"cron_string": "*/10 * * * *", "repeat": 5000}),
    "interval-past-9999": job_hash(meta={"interval": 10**9, "repeat": 10**6}),
    "bomb-args": job_hash(data=data_with_args(shared_bomb()[2:-1])),
    "bomb-meta": {
        **job_hash(),
        b"meta": pickle.dumps(
            {"cron_string": "0 * * * *", "owner": pickle.loads(shared_bomb())}, protocol=2
        ),
    },
    "deep-args": job_hash(data=data_with_args(b"]" * 100_000 + b"a" * 99_999)),
    "not-a-pickle": job_hash(data=b"\x80\x05garbage"),
    "control-chars": job_hash(func="tests.apps.\x1b]0;pwned\x07x"),
    "nan-arg": job_hash(args=[float("nan")]),
    "set-arg": job_hash(args=[{1, 2}]),
}


@pytest.fixture
def rq_redis(redis_server: RedisServer) -> Iterator[tuple[redis.Redis, str, str]]:
    """rq-scheduler's Redis (a database of its own, emptied) and a store URL beside it."""
    db = 10
    client = redis.Redis(port=redis_server.port, db=db)
    client.flushdb()
    base = redis_server.url.rsplit("/", 1)[0]
    yield client, f"{base}/{db}", f"{base}/9?prefix=rqs{uuid.uuid4().hex[:8]}:"
    client.flushdb()
    client.close()


def put(client: redis.Redis, jobs: dict[bytes, dict[bytes, bytes]], score: float = NEXT_AT) -> None:
    with client.pipeline() as pipe:
        for member, fields in jobs.items():
            if fields:
                pipe.hset(b"rq:job:" + member, mapping=fields)
            pipe.zadd(SCHEDULED, {member: score})
        pipe.execute()


REASONS = {
    "meta-a-list": "its meta is not a mapping",
    "args-an-int": "its args are a int, not a list",
    "origin-not-utf8": "its queue (origin) is not UTF-8",
    "interval-zero": "its interval 0 is not a whole number from 1",
    "repeat-huge": "its meta hold an integer of more than 30 digits",
    "cron-repeat-1e9": "its repeat 1000000000 is not a whole number",
    "cron-repeat-5000": "more runs than the importer counts for a cron job",
    "interval-past-9999": "its last run is past the year 9999",
    "bomb-args": "its arguments expand to more than",
    "bomb-meta": "its meta expand to more than",
    "deep-args": "its arguments are nested more than 64 levels deep",
    "not-a-pickle": "not plain data",
    "control-chars": "its function is not a dotted path",
    "nan-arg": "its arguments hold a number that is not finite",
    "set-arg": "not JSON (a set)",
    "gone": "its job hash is gone",
    "inf-score": "its next run time inf is not a time",
}


def test_each_malformed_job_stays_with_its_reason_in_one_line_and_the_good_one_moves(
    rq_redis: tuple[redis.Redis, str, str], tmp_path: Path
) -> None:
    """The real command, in a process of its own (a job that never finishes would hang the
    test run otherwise): dry run, then --apply; each exits 0 within seconds."""
    client, url, store_url = rq_redis
    put(client, {GOOD_ID.encode(): job_hash(kwargs={"to": "team@example.com"})})
    put(client, {name.encode(): fields for name, fields in MALFORMED.items()})
    put(client, {b"gone": {}, b"\xff\xfe-id": job_hash()})
    put(client, {b"inf-score": job_hash()}, score=float("inf"))
    untouched = {name: client.hgetall(f"rq:job:{name}") for name in MALFORMED}
    env = {**os.environ, ENV: "tests.apps.rq_cron_tasks.*"}
    for apply in ([], ["--apply"]):
        began = time.monotonic()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "cron_bridge",
                "import",
                "rq-scheduler",
                "-u",
                url,
                "--store",
                store_url,
                *apply,
            ],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        took = time.monotonic() - began
        assert done.returncode == 0, done.stderr[-3000:]
        assert took < 30, took
        lines = done.stdout.splitlines()
        # the header, a row per job, the total, how to run what stays
        assert len(lines) == 3 + len(MALFORMED) + 4, lines
        assert lines[-1].startswith("What stays keeps running with rq-scheduler"), lines[-1]
        rows = {line.split()[0]: line for line in lines[1:-2]}
        for name, reason in REASONS.items():
            assert "stays:" in rows[name] and reason in rows[name], (name, rows[name])
        assert "stays: its id is not UTF-8" in rows["\ufffd\ufffd-id"]
        assert ("moved" if apply else "would move") in rows[GOOD_ID], rows[GOOD_ID]
        assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    (stored,) = StoredSchedules(store_from_url(store_url)).list().values()
    assert (stored.name, stored.task, stored.args) == (GOOD_ID, TASK, ["daily"])
    assert {name: client.hgetall(f"rq:job:{name}") for name in MALFORMED} == untouched
    assert not client.exists(f"rq:job:{GOOD_ID}")


def test_a_shared_reference_bomb_is_refused_in_bounded_time(
    rq_redis: tuple[redis.Redis, str, str],
) -> None:
    """The walk counts a shared list each time it is reached, so 2**40 values stop it after
    NODES_MAX of them, not after the heat death of the machine."""
    client, _, _ = rq_redis
    put(client, {b"bomb": MALFORMED["bomb-args"]})
    began = time.monotonic()
    with pytest.raises(Unreadable, match=f"more than {NODES_MAX:,} values"):
        read_job(client, b"bomb", NEXT_AT)
    assert time.monotonic() - began < 2


# Generated job hashes: plain values and the kinds no JSON holds, meta keys rq-scheduler reads
# with values of every type and the edges of their ranges, bytes that are no pickle at all.
_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=12)
    | st.binary(max_size=8)
)
_values = st.recursive(
    _scalars | st.sets(st.integers(), max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=6) | st.integers(), inner, max_size=3)
    ),
    max_leaves=10,
)
_edges = st.sampled_from(
    [
        "0",
        "60",
        "-1",
        "1e3",
        "*/5 * * * *",
        "61 * * * *",
        "",
        0,
        -5,
        1,
        60,
        2.5,
        10**9,
        10**30,
        5000,
        float("inf"),
        True,
    ]
)
_meta = st.dictionaries(
    st.sampled_from(["interval", "cron_string", "repeat", "use_local_timezone", "owner"]),
    _edges | _values,
    max_size=4,
)
_func = st.sampled_from([TASK, "os.system", "", "a" * 300, "x.\x1b[2J"]) | _values
_data = st.one_of(
    st.tuples(_func, st.none() | _values, _values, _values).map(pickle.dumps).map(zlib.compress),
    st.builds(pickle.dumps, _values).map(zlib.compress),
    st.binary(max_size=40),
    st.binary(max_size=40).map(zlib.compress),
    st.just(MALFORMED["bomb-args"][b"data"]),
    st.just(MALFORMED["deep-args"][b"data"]),
)
_fields = st.fixed_dictionaries(
    {b"data": _data},
    optional={
        b"meta": _meta.map(pickle.dumps)
        | st.builds(pickle.dumps, _values)
        | st.binary(max_size=30)
        | st.just(shared_bomb()),
        b"origin": st.binary(max_size=8),
        b"timeout": st.sampled_from([b"180", b"-1", b"0", b"99999999999", b"\xff", b"1.5"]),
        b"result_ttl": st.sampled_from([b"-1", b"500"]),
        b"dependency_ids": st.binary(max_size=4),
    },
)
_jobs = st.dictionaries(
    st.binary(min_size=1, max_size=12).filter(lambda m: m != GOOD_ID.encode()),
    st.tuples(_fields, st.floats(allow_nan=False) | st.just(NEXT_AT)),
    min_size=1,
    max_size=4,
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)
@given(jobs=_jobs)
def test_any_job_hashes_beside_a_good_one_the_import_finishes_and_moves_the_good_one(
    rq_redis: tuple[redis.Redis, str, str],
    monkeypatch: pytest.MonkeyPatch,
    jobs: dict[bytes, tuple[dict[bytes, bytes], float]],
) -> None:
    client, url, _ = rq_redis
    client.flushdb()
    monkeypatch.setenv(ENV, "tests.apps.rq_cron_tasks.*")
    store_url = f"{url.rsplit('/', 1)[0]}/9?prefix=rqp{uuid.uuid4().hex[:8]}:"
    put(client, {GOOD_ID.encode(): job_hash()})
    for member, (fields, score) in jobs.items():
        put(client, {member: fields}, score=score)
    runner = CliRunner()
    for apply in ([], ["--apply"]):
        began = time.monotonic()
        done = runner.invoke(rq_scheduler, ["-u", url, "--store", store_url, *apply])
        assert done.exit_code == 0, (done.output[-2000:], done.exception)
        assert time.monotonic() - began < 10
        lines = done.output.splitlines()
        staying = lines[-1].startswith("What stays keeps running with rq-scheduler")
        assert len(lines) == 2 + 1 + len(jobs) + staying, lines  # every job on a line of its own
        (good,) = [line for line in lines if line.startswith(GOOD_ID + " ")]
        assert ("moved" if apply else "would move") in good, good
    assert GOOD_ID in StoredSchedules(store_from_url(store_url)).list()


def test_timeout_result_ttl_ttl_meta_and_at_front_go_to_rq_as_rq_scheduler_gave_them(
    rq_redis: tuple[redis.Redis, str, str],
) -> None:
    """rq-scheduler hands RQ its ``timeout`` (the hard limit that kills the work horse),
    ``result_ttl`` (``-1``: kept for ever), ``ttl`` and ``meta``: the stored schedule sends the
    same, not a cooperative timeout with a hard limit 30 s later and RQ's 500 s results."""
    client, _, _ = rq_redis
    meta = {"cron_string": "0 2 * * *", "use_local_timezone": False, "owner": "ops"}
    put(client, {b"report": job_hash(meta=meta, timeout=b"5", ttl=b"600", enqueue_at_front=b"1")})
    (move,) = plan(client, "Europe/Warsaw")
    assert not move.left, move.left
    assert move.spec["send"] == {
        "job_timeout": 5,
        "result_ttl": -1,
        "ttl": 600,
        "meta": {"owner": "ops"},
        "at_front": True,
    }
    assert "timeout" not in move.spec
    fields = ("task", "library", "queue", "args", "kwargs")
    options = {key: value for key, value in move.spec.items() if key not in fields}
    stored = ScheduleEntry(name="report", options=options, **{f: move.spec[f] for f in fields})
    job = stored.job()
    sent = RQAdapter()._data(
        Dispatch(
            job=job,
            occurrence=job.occurrence(datetime(2026, 3, 1, 1, tzinfo=UTC)),
            trigger="schedule",
            replica="r1",
        )
    )
    assert (sent.timeout, sent.result_ttl, sent.ttl, sent.at_front) == (5, -1, 600, True)
    assert sent.meta["owner"] == "ops" and META_KEY in sent.meta


@pytest.mark.parametrize("repeat", [0, 1])
def test_repeat_0_or_1_runs_once_at_its_time(
    rq_redis: tuple[redis.Redis, str, str], repeat: int
) -> None:
    """rq-scheduler runs a job with ``repeat=0`` once (it decrements only a count above 0,
    then stops at 0), as it does with ``repeat=1``: a one-off at its next time."""
    client, _, _ = rq_redis
    put(client, {b"once": job_hash(meta={"interval": 60, "repeat": repeat})})
    (move,) = plan(client, "UTC", now=datetime(2026, 1, 1, tzinfo=UTC))
    assert not move.left, move.left
    assert move.spec["at"] == datetime.fromtimestamp(NEXT_AT, UTC).isoformat()
    assert "every" not in move.spec and "end" not in move.spec


def test_a_one_off_moves_as_at_and_one_already_due_runs_soon(
    rq_redis: tuple[redis.Redis, str, str],
) -> None:
    """``enqueue_at``/``enqueue_in`` jobs (no interval, no cron string) move as ``at=``; one
    whose time passed while rqscheduler was stopped for the move runs as soon as the beat
    sees it, as at rq-scheduler's next poll."""
    client, _, _ = rq_redis
    put(client, {b"later": job_hash(meta={"owner": "ops"})})
    put(client, {b"due": job_hash(meta={})}, score=NEXT_AT - 86400)
    now = datetime.fromtimestamp(NEXT_AT - 3600, UTC)
    moves = {move.job_id: move for move in plan(client, "UTC", now=now)}
    assert moves["later"].spec["at"] == datetime.fromtimestamp(NEXT_AT, UTC).isoformat()
    assert moves["later"].spec["send"]["meta"] == {"owner": "ops"}
    assert moves["due"].spec["at"] == (now + timedelta(seconds=10)).isoformat()
    assert moves["due"].spec["misfire"] == "run-once"


def test_cron_strings_are_read_in_the_hosts_zone_whatever_use_local_timezone_says(
    rq_redis: tuple[redis.Redis, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """rq-scheduler walks ``datetime.now()`` (the host's local time) whichever way
    ``use_local_timezone`` is set: under TZ=Europe/Warsaw ``0 2 * * *`` runs at 02:00 Warsaw
    time, so the stored schedule says so; ``--tz`` names another host's zone."""
    client, url, store_url = rq_redis
    monkeypatch.setenv("TZ", "Europe/Warsaw")
    monkeypatch.setenv(ENV, "tests.apps.rq_cron_tasks.*")
    for flag in (False, True):
        put(
            client,
            {
                f"nightly-{flag}".encode(): job_hash(
                    meta={"cron_string": "0 2 * * *", "use_local_timezone": flag}
                )
            },
        )
    runner = CliRunner()
    done = runner.invoke(rq_scheduler, ["-u", url, "--store", store_url])
    assert done.exit_code == 0, done.output
    assert "(cron strings read in Europe/Warsaw)" in done.output
    for move in plan(client, "Europe/Warsaw"):
        assert (move.spec["cron"], move.spec["tz"], move.spec["day_or"]) == (
            "0 2 * * *",
            "Europe/Warsaw",
            False,
        )
    done = runner.invoke(rq_scheduler, ["-u", url, "--store", store_url, "--tz", "America/Chicago"])
    assert "(cron strings read in America/Chicago)" in done.output, done.output


def test_apply_without_a_store_is_refused_and_moves_nothing(
    rq_redis: tuple[redis.Redis, str, str], tmp_path: Path
) -> None:
    """The move deletes the jobs from rq-scheduler: into ./cron-bridge.db, which no beat
    reads, they would be lost. Without --store or CRON_BRIDGE_STORE, --apply says so in one
    line, exits non-zero and touches nothing."""
    client, url, _ = rq_redis
    put(client, {GOOD_ID.encode(): job_hash()})
    before = client.hgetall(f"rq:job:{GOOD_ID}")
    env = {k: v for k, v in os.environ.items() if k != "CRON_BRIDGE_STORE"}
    env[ENV] = "tests.apps.rq_cron_tasks.*"
    done = subprocess.run(
        [sys.executable, "-m", "cron_bridge", "import", "rq-scheduler", "-u", url, "--apply"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert done.stderr.strip().count("\n") == 0 and "--apply needs the store" in done.stderr
    assert not list(tmp_path.iterdir())  # no cron-bridge.db
    assert client.hgetall(f"rq:job:{GOOD_ID}") == before
    assert client.zscore(SCHEDULED, GOOD_ID) == NEXT_AT


class Killed(BaseException):
    """The import killed (``kill -9``) between writing a stored schedule and deleting the job."""


def _overdue_jobs(client: redis.Redis, now: datetime) -> None:
    """Jobs whose run is already due (rqscheduler was stopped for the move), so the stored
    schedule's first run depends on the moment of the move, and one that is not."""
    put(client, {b"overdue-int": job_hash(meta={"interval": 600})}, score=now.timestamp() - 30)
    put(client, {b"overdue-once": job_hash(meta={})}, score=now.timestamp() - 5)
    put(
        client,
        {b"overdue-cron2": job_hash(meta={"cron_string": "0 * * * *", "repeat": 2})},
        score=now.replace(minute=0, second=0, microsecond=0).timestamp(),
    )
    put(
        client,
        {b"future-int": job_hash(meta={"interval": 3600, "repeat": 3})},
        score=now.timestamp() + 3600,
    )


@pytest.mark.parametrize(
    "killed_after", ["overdue-int", "overdue-once", "overdue-cron2", "future-int"]
)
def test_an_apply_killed_between_writing_and_deleting_is_completed_by_the_next(
    rq_redis: tuple[redis.Redis, str, str], monkeypatch: pytest.MonkeyPatch, killed_after: str
) -> None:
    """``--apply`` killed once a job's stored schedule is written and before the job is
    deleted from rq-scheduler leaves both. The next ``--apply``, minutes later, knows that
    schedule as the one made from this job (for a job already due, its first run was fixed by
    the moment of the first move, not the second's) and deletes the job: it runs once, from
    the store only, and ``rqscheduler`` is not needed for it."""
    from cron_bridge_rq import rq_scheduler as importer

    client, url, store_url = rq_redis
    monkeypatch.setenv(ENV, "tests.apps.rq_cron_tasks.*")
    now = datetime.now(UTC)
    _overdue_jobs(client, now)
    schedules = StoredSchedules(store_from_url(store_url))
    real_plan, real_add = importer.plan, StoredSchedules.add

    def add(self: StoredSchedules, name: str, **spec: Any) -> ScheduleEntry:
        written = real_add(self, name, **spec)
        if name == killed_after:
            raise Killed
        return written

    with monkeypatch.context() as killed:
        killed.setattr(
            importer,
            "plan",
            lambda client, zone: real_plan(client, zone, now=now - timedelta(minutes=5)),
        )
        killed.setattr(StoredSchedules, "add", add)
        with pytest.raises(Killed):
            CliRunner().invoke(
                rq_scheduler,
                ["-u", url, "--store", store_url, "--apply", "--tz", "UTC"],
                catch_exceptions=False,
            )
    assert killed_after in schedules.list()
    assert client.zscore(SCHEDULED, killed_after) is not None  # both: the state to complete
    first = schedules.list()[killed_after].to_json()

    done = CliRunner().invoke(
        rq_scheduler, ["-u", url, "--store", store_url, "--apply", "--tz", "UTC"]
    )
    assert done.exit_code == 0, done.output
    (line,) = [line for line in done.output.splitlines() if line.startswith(killed_after + " ")]
    assert line.rstrip().endswith("moved"), done.output
    assert "What stays" not in done.output and "exists already" not in done.output
    assert not client.exists(SCHEDULED) and not client.keys("rq:job:*")  # in the store only
    stored = schedules.list()
    assert set(stored) == {"overdue-int", "overdue-once", "overdue-cron2", "future-int"}
    assert stored[killed_after].to_json() == first  # written once, untouched


def test_a_different_stored_schedule_of_the_name_stays_and_the_job_with_it(
    rq_redis: tuple[redis.Redis, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stored schedule of the job's name that the job would not make (other arguments, or
    another first run) is not the job's: the job stays in rq-scheduler, said."""
    client, url, store_url = rq_redis
    monkeypatch.setenv(ENV, "tests.apps.rq_cron_tasks.*")
    now = datetime.now(UTC)
    _overdue_jobs(client, now)
    schedules = StoredSchedules(store_from_url(store_url))
    (once,) = [m for m in plan(client, "UTC", now=now) if m.job_id == "overdue-once"]
    (every,) = [m for m in plan(client, "UTC", now=now) if m.job_id == "overdue-int"]
    schedules.add("overdue-once", **{**once.spec, "args": ["weekly"]})
    early = (now - timedelta(minutes=1)).replace(microsecond=0)  # before its rq-scheduler score
    schedules.add(
        "overdue-int",
        **{**every.spec, "start": early.isoformat(), "offset": f"{early.timestamp() % 600:g}s"},
    )
    done = CliRunner().invoke(
        rq_scheduler, ["-u", url, "--store", store_url, "--apply", "--tz", "UTC"]
    )
    assert done.exit_code == 0, done.output
    for job_id in ("overdue-once", "overdue-int"):
        (line,) = [line for line in done.output.splitlines() if line.startswith(job_id + " ")]
        assert f"stays: a stored schedule '{job_id}' exists already" in line, done.output
        assert client.exists(f"rq:job:{job_id}") and client.zscore(SCHEDULED, job_id)
    assert not client.exists("rq:job:future-int")


def test_an_overdue_cron_job_with_repeat_keeps_all_its_runs(
    rq_redis: tuple[redis.Redis, str, str],
) -> None:
    """``repeat=N`` on a cron job whose run passed while rqscheduler was stopped:
    rq-scheduler sends the overdue run at its next poll and N-1 more; the stored schedule,
    which sends it at its next cron time (``rqscheduler.overdue_cron``), counts its N runs
    from there, not from the time already past."""
    client, _, _ = rq_redis
    now = datetime(2026, 3, 1, 12, 20, 30, tzinfo=UTC)
    for repeat in (2, 5):
        put(
            client,
            {
                f"hourly{repeat}".encode(): job_hash(
                    meta={"cron_string": "0 * * * *", "repeat": repeat}
                )
            },
            score=datetime(2026, 3, 1, 12, tzinfo=UTC).timestamp(),
        )
    for move in plan(client, "UTC", now=now):
        fields = ("task", "library", "queue", "args", "kwargs")
        options = {key: value for key, value in move.spec.items() if key not in fields}
        stored = ScheduleEntry(name="h", options=options, **{f: move.spec[f] for f in fields})
        runs = list(stored.job().schedule.occurrences(now, now + timedelta(days=1)))
        repeat = int(move.job_id.removeprefix("hourly"))
        assert runs == [datetime(2026, 3, 1, 13 + k, tzinfo=UTC) for k in range(repeat)]
