"""``cron-bridge import rq-scheduler``: rq-scheduler's cron and interval jobs, moved into stored
schedules.

rq-scheduler keeps each recurring job as an RQ job hash (``rq:job:<id>``, its function, args
and kwargs in ``data``, ``interval``/``cron_string``/``repeat`` in ``meta``) and its next time
in the sorted set ``rq:scheduler:scheduled_jobs``. This reads both without running anything
they name: ``data`` and ``meta`` are unpickled with an unpickler that builds plain values only
(strings, numbers, lists, dicts...) and refuses every class, so a job whose arguments are
anything else is left where it is, with the reason. Each job becomes a stored schedule of the
``rq`` library, which the RQ workers run through ``cron_bridge_rq.stored.run_stored`` (the
task must be agreed for stored schedules: ``@storable``, ``CRON_BRIDGE_STORED_TASKS``):

- ``interval=N``: ``every=N`` with the offset that keeps rq-scheduler's phase, so the next run
  comes when rq-scheduler's would have;
- ``cron_string``: ``cron=`` in UTC, or in the local zone with ``use_local_timezone=True``;
- ``repeat=N``: ``end=`` just after the N-th run from the next one.

Without ``--apply`` it only says what it would do. With it, it refuses while an
``rqscheduler`` process is alive (both would send), writes each stored schedule, then deletes
the job's hash and its member of the sorted set, so nothing of a moved job is left behind; the
sorted set goes once it is empty. One-off jobs (``enqueue_at``, ``enqueue_in``) stay for
rq-scheduler to run.
"""

from __future__ import annotations

import io
import json
import pickle
import re
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import click
from redis import Redis

from cron_bridge.adapters import (
    NAME_PATTERN,
    ConfigError,
    Cron,
    Schedules,
    load_app,
    local_zone_name,
    one_line_errors,
    open_store,
    optional_app_option,
    print_table,
    redact_url,
    store_option,
)

__all__ = ["Move", "plan", "rq_scheduler"]

SCHEDULED = "rq:scheduler:scheduled_jobs"
INSTANCES = "rq:scheduler_instance:"
LOCK = "rq:scheduler_lock"
DATA_MAX = 1 << 20  # bytes of a job's data, decompressed: what an argument list may hold
# What rq-scheduler sets itself, not the user: left out of "cannot carry" (periodic jobs
# keep their results forever unless told otherwise).
_DEFAULT_RESULT_TTL = (None, b"-1", b"")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class _PlainOnly(pickle.Unpickler):
    """Builds plain values only: any class or function named in the pickle is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


def _plain(raw: bytes) -> Any:
    """A pickled or JSON value of rq's serializers, read without running anything."""
    if raw[:1] == b"\x80":
        return _PlainOnly(io.BytesIO(raw)).load()
    return json.loads(raw)


@dataclass
class Move:
    """What becomes of one of rq-scheduler's jobs: a stored schedule, or why it stays."""

    job_id: str
    task: str
    when: str
    name: str = ""
    spec: dict[str, Any] = field(default_factory=dict)
    left: str = ""  # why it stays in rq-scheduler; empty when it moves


def _name(job_id: str, task: str, taken: set[str]) -> str:
    """The stored schedule's name: the job's own id when it is one a person chose, else the
    task with the id's first characters."""
    base = job_id if not _UUID.fullmatch(job_id) and NAME_PATTERN.fullmatch(job_id) else (
        f"{task.rsplit('.', 1)[-1]}-{job_id[:8]}")  # fmt: skip
    base = re.sub(r"[^A-Za-z0-9._-]", "-", base)[:180]
    name, count = base, 1
    while name in taken:
        count += 1
        name = f"{base}-{count}"
    taken.add(name)
    return name


def _read(client: Redis, job_id: str, score: float, taken: set[str]) -> Move:
    raw = cast(dict[bytes, bytes], client.hgetall(f"rq:job:{job_id}"))
    move = Move(job_id=job_id, task="?", when="?")
    if not raw:
        move.left = "its job hash is gone (rq-scheduler drops such ids itself)"
        return move
    try:
        data = zlib.decompressobj().decompress(raw.get(b"data", b""), DATA_MAX + 1)
        if len(data) > DATA_MAX:
            raise ValueError("larger than 1 MiB")
        func_name, instance, args, kwargs = _plain(data)
        meta = _plain(raw[b"meta"]) if raw.get(b"meta") else {}
    except (pickle.UnpicklingError, ValueError, TypeError, zlib.error, EOFError) as exc:
        move.left = f"its function or arguments are not plain data ({exc})"
        return move
    move.task = str(func_name)
    interval, cron_string = meta.get("interval"), meta.get("cron_string")
    move.when = f"every {interval}s" if interval else str(cron_string or "once")
    if instance is not None:
        move.left = "it calls a method of an object"
        return move
    if not interval and not cron_string:
        move.left = "a one-off job (enqueue_at, enqueue_in): rq-scheduler runs it"
        return move
    cannot = [label for label, key in (("depends_on", b"dependency_ids"),
                                       ("on_success", b"success_callback_name"),
                                       ("on_failure", b"failure_callback_name"))
              if raw.get(key) not in (None, b"")]  # fmt: skip
    if raw.get(b"result_ttl") not in _DEFAULT_RESULT_TTL:
        cannot.append("result_ttl")
    if raw.get(b"ttl") not in (None, b""):
        cannot.append("ttl")
    if raw.get(b"enqueue_at_front") in (b"1", b"true", b"True"):
        cannot.append("at_front")
    own = {k for k in meta if k not in ("interval", "cron_string", "use_local_timezone",
                                        "repeat", "queue_class_name")}  # fmt: skip
    if own:
        cannot.append(f"meta {sorted(own)}")
    if cannot:
        move.left = f"a stored schedule cannot carry {', '.join(cannot)}"
        return move
    spec: dict[str, Any] = {
        "task": move.task,
        "library": "rq",
        "queue": (raw.get(b"origin") or b"default").decode(),
        "args": list(args or ()),
        "kwargs": dict(kwargs or {}),
    }
    try:
        json.dumps(spec, allow_nan=False)
        next_at = datetime.fromtimestamp(score, UTC)
        if interval:
            seconds = int(interval)
            spec["every"] = f"{seconds}s"
            if score % seconds:
                spec["offset"] = f"{score % seconds:g}s"
        else:
            zone = local_zone_name(why="rq-scheduler") if meta.get("use_local_timezone") else "UTC"
            spec["cron"], spec["tz"] = str(cron_string), zone
        if raw.get(b"timeout") not in (None, b""):
            spec["timeout"] = f"{int(raw[b'timeout'])}s"
        if meta.get("repeat") is not None:
            spec["end"] = _end(spec, next_at, int(meta["repeat"])).isoformat()
    except ConfigError as exc:
        move.left = f"{exc.option}={exc.value!r}: {exc.reason}"
        return move
    except (TypeError, ValueError) as exc:
        move.left = f"its arguments are not JSON ({exc})"
        return move
    move.name = _name(job_id, move.task, taken)
    move.spec = spec
    return move


def _end(spec: dict[str, Any], next_at: datetime, repeat: int) -> datetime:
    """Just after the ``repeat``-th run from ``next_at`` on (rq-scheduler counts down)."""
    if repeat <= 0:
        raise ConfigError("no run left", option="repeat", value=repeat)
    if "every" in spec:
        last = next_at + timedelta(seconds=int(spec["every"][:-1]) * (repeat - 1))
    else:
        schedule = Cron(spec["cron"], tz=spec["tz"])
        last = next_at - timedelta(seconds=1)
        for _ in range(repeat):
            last = schedule.next_after(last)
    return last + timedelta(seconds=1)


def plan(client: Redis) -> list[Move]:
    """What each of rq-scheduler's jobs would become, in the order of their next run."""
    taken: set[str] = set()
    moves = []
    members = cast(list[tuple[bytes, float]], client.zrange(SCHEDULED, 0, -1, withscores=True))
    for member, score in members:
        job_id = member.decode(errors="replace")
        moves.append(_read(client, job_id, float(score), taken))
    return moves


def _alive(client: Redis) -> list[str]:
    """The rqscheduler processes still running (their hash has no ``death``), and its lock."""
    alive = [key.decode() for key in client.scan_iter(f"{INSTANCES}*")
             if not client.hexists(key, "death")]  # fmt: skip
    if client.exists(LOCK):
        alive.append(LOCK)
    return alive


@click.command("rq-scheduler")
@click.option("--url", "-u", envvar="RQ_REDIS_URL", default="redis://localhost:6379/0",
              show_default=True, help="The Redis rq-scheduler keeps its jobs in.")  # fmt: skip
@store_option
@optional_app_option(
    "The module that declares the tasks (repeatable; default $CRON_BRIDGE_APP): imported to "
    "check that stored schedules may name them (@storable or CRON_BRIDGE_STORED_TASKS)."
)
@click.option("--apply", is_flag=True, help="Move them; without it, only say what would move.")
def rq_scheduler(url: str, store: str | None, app: tuple[str, ...], apply: bool) -> None:
    """Move rq-scheduler's cron and interval jobs into stored schedules, which every beat
    replica runs; without --apply, only say what would move and what stays."""
    with one_line_errors():
        if app:
            load_app(app)
        client = Redis.from_url(url, socket_connect_timeout=5, socket_timeout=10)
        try:
            client.ping()
        except Exception as exc:  # noqa: BLE001 - said in one line
            raise ConfigError(f"cannot reach rq-scheduler's Redis: {exc}", option="--url",
                              value=redact_url(url)) from None  # fmt: skip
        schedules = Schedules(open_store(store))
        moves = plan(client)
        if not moves:
            click.echo("rq-scheduler has no jobs in this Redis.")
            return
        written = _decide(moves, schedules)
        if apply:
            _apply(client, moves, schedules, written)
        rows = [["JOB", "TASK", "WHEN", "STORED AS", "WHAT"]]
        for move in moves:
            action = f"stays: {move.left}" if move.left else ("moved" if apply else "would move")
            rows.append([move.job_id, move.task, move.when, move.name or "-", action])
        print_table(rows)
        moved = sum(1 for m in moves if not m.left)
        click.echo(f"{moved} of {len(moves)} job(s) {'moved' if apply else 'would move'}"
                   + ("" if apply else "; run again with --apply to move them"))  # fmt: skip


def _decide(moves: list[Move], schedules: Schedules) -> set[str]:
    """Check each move as ``schedule add`` would (the task agreed for stored schedules, every
    option valid); one that would be refused stays, with the reason. Returns the names whose
    stored schedule exists already as the move would write it (a run that stopped half-way)."""
    existing = schedules.list()
    written = set()
    for move in moves:
        if move.left:
            continue
        try:
            stored = schedules.check(move.name, **move.spec)
        except ConfigError as exc:
            move.left = f"{exc.option}={exc.value!r}: {exc.reason}"
            continue
        if move.name in existing:
            if existing[move.name].to_json() != stored.to_json():
                move.left = f"a stored schedule {move.name!r} exists already"
            else:
                written.add(move.name)
    return written


def _apply(client: Redis, moves: list[Move], schedules: Schedules, written: set[str]) -> None:
    """Write each stored schedule, then delete what rq-scheduler kept of the job."""
    alive = _alive(client)
    if alive:
        raise ConfigError("rqscheduler is running: stop it first, or both would send "
                          f"({', '.join(alive[:3])})", option="--apply", value=True)  # fmt: skip
    for move in moves:
        if move.left:
            continue
        if move.name not in written:
            schedules.add(move.name, by="import rq-scheduler", **move.spec)
        with client.pipeline() as pipe:  # only once the stored schedule is there
            pipe.zrem(SCHEDULED, move.job_id)
            pipe.delete(f"rq:job:{move.job_id}")
            pipe.execute()
    if not client.zcard(SCHEDULED):
        client.delete(SCHEDULED)
