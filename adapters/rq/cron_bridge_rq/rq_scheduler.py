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

- ``interval=N``: ``every=N`` with the offset that keeps rq-scheduler's phase, and ``start=``
  its next run, so that run comes when rq-scheduler's would have, and none before it;
- ``cron_string``: ``cron=`` with ``day_or=False`` (the ``crontab`` package rq-scheduler reads
  it with requires every field to match), in the zone of rq-scheduler's host: rq-scheduler
  matches the fields against the host's local time whatever ``use_local_timezone`` says
  (``datetime.now()`` into ``CronTab.next``), so that zone is named (``TZ``,
  ``/etc/localtime``, or ``--tz``);
- ``repeat=N``: ``end=`` just after the N-th run from the next one (a cron job's from its
  first cron time after the move when its run is already due: all N runs, as rq-scheduler
  sends the overdue one and N-1 more; its ``start=`` says where the count starts);
  ``repeat`` 0 or 1, and a one-off (``enqueue_at``, ``enqueue_in``): ``at=`` its time;
- ``timeout``, ``result_ttl``, ``ttl``, ``meta`` and ``at_front``: ``send=``, handed to RQ
  with each message as rq-scheduler did (``timeout`` stays RQ's hard limit);
- a run missed while neither runs: ``misfire="run-once"``, as rq-scheduler runs it at its next
  poll.

Without ``--apply`` it only says what it would do. With it, it refuses without a store named
(the move deletes the jobs from rq-scheduler: an implicit local file no beat reads would lose
them) and while an ``rqscheduler`` process is alive (both would send), writes each stored
schedule, then deletes the job's hash and its member of the sorted set, so nothing of a moved
job is left behind; the sorted set goes once it is empty. A run killed between the two leaves
both; the next run knows the stored schedule as the one made from that job (the same spec,
made again as of the moment the first run fixed: a run already due comes ``DUE_LEAD`` after
that moment, not after the second's) and only deletes the job. What stays (``depends_on``,
callbacks, arguments that are not plain data) is said with how to run it beside the JSON
workers.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import click
from redis import Redis

from cron_bridge.adapters import (
    NAME_PATTERN,
    ConfigError,
    Cron,
    ScheduleEntry,
    StoredSchedules,
    load_zone,
    local_zone_name,
    redact_url,
)
from cron_bridge.commands import (
    load_app,
    one_line_errors,
    open_store,
    optional_app_option,
    print_table,
    store_option,
)
from cron_bridge_rq.scheduled_job import ScheduledJob, Unreadable, read_job, shown

__all__ = ["Move", "crontab_fields", "plan", "rq_scheduler", "stored_spec"]

SCHEDULED = "rq:scheduler:scheduled_jobs"
INSTANCES = "rq:scheduler_instance:"
LOCK = "rq:scheduler_lock"
DUE_LEAD = timedelta(seconds=10)  # a run already due comes this long after the move
CRONTAB_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@hourly": "0 * * * *",
}
CRON_REPEAT_MAX = 1000  # a cron job's runs stepped through to find its end (about 0.3 s)
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass
class Move:
    """What becomes of one of rq-scheduler's jobs: a stored schedule, or why it stays."""

    job_id: str
    task: str
    when: str
    name: str = ""
    queue: str = ""  # the queue it is sent to, when it could be read
    spec: dict[str, Any] = field(default_factory=dict)
    left: str = ""  # why it stays in rq-scheduler; empty when it moves
    job: ScheduledJob | None = field(default=None, repr=False)  # as read, when it could be


def _name(job_id: str, task: str, taken: set[str]) -> str:
    """The stored schedule's name: the job's own id when it is one a person chose, else the
    task with the id's first characters."""
    base = (
        job_id
        if not _UUID.fullmatch(job_id) and NAME_PATTERN.fullmatch(job_id)
        else (f"{task.rsplit('.', 1)[-1]}-{job_id[:8]}")
    )
    base = re.sub(r"[^A-Za-z0-9._-]", "-", base)[:180]
    name, count = base, 1
    while name in taken:
        count += 1
        name = f"{base}-{count}"
    taken.add(name)
    return name


def _read(
    client: Redis, member: bytes, score: float, taken: set[str], zone: str, now: datetime
) -> Move:
    """The move of one job: read through ``read_job``, which bounds and checks it, so a job
    that holds anything else stays, with the reason in one line, and the others go on."""
    try:
        job = read_job(client, member, score)
    except Unreadable as exc:
        return Move(
            job_id=shown(member.decode(errors="replace")), task="?", when="?", left=str(exc)
        )
    move = Move(job_id=job.job_id, task=job.task, when=job.when, queue=job.queue, job=job)
    if job.instance:
        move.left = "it calls a method of an object"
    elif job.cannot:
        move.left = f"a stored schedule cannot carry {', '.join(job.cannot)}"
    else:
        try:
            move.spec = stored_spec(job, zone, now)
        except ConfigError as exc:
            move.left = shown(f"{exc.option}={exc.value!r}: {exc.reason}", 300)
        else:
            move.name = _name(job.job_id, job.task, taken)
            if "at" in move.spec:
                move.when = f"once, {move.spec['at']}"
    return move


def stored_spec(job: ScheduledJob, zone: str, now: datetime) -> dict[str, Any]:
    """The stored schedule's fields.

    A run rq-scheduler missed (its process was stopped for the move) runs once when the beat
    sees it (``misfire="run-once"``), as rq-scheduler runs a job whose time has passed at its
    next poll, once.

    Raises:
        ConfigError: the option that cannot be carried over, and why.
    """
    spec: dict[str, Any] = {
        "task": job.task,
        "library": "rq",
        "queue": job.queue,
        "args": job.args,
        "kwargs": job.kwargs,
        "misfire": "run-once",
    }
    send: dict[str, Any] = {}
    for option, value in (
        ("job_timeout", job.timeout),
        ("result_ttl", job.result_ttl),
        ("ttl", job.ttl),
        ("meta", job.meta or None),
        ("at_front", job.at_front or None),
    ):
        if value is not None:
            send[option] = value
    if send:
        spec["send"] = send
    # A run already due (rqscheduler was stopped for the move) comes right after the move, as
    # at rq-scheduler's next poll; an interval counts on from there, as rq-scheduler's does
    # (in whole seconds, as its scores are).
    first = max(job.next_at, (now + DUE_LEAD).replace(microsecond=0))
    once = (job.interval is None and job.cron is None) or job.repeat in (0, 1)
    if once:
        # A one-off, or a job with one run left (rq-scheduler runs repeat=0 once, too).
        spec["at"] = first.isoformat()
        return spec
    if job.interval is not None:
        spec["every"] = f"{job.interval}s"
        score = first.timestamp()
        if score % job.interval:
            spec["offset"] = f"{score % job.interval:g}s"
        spec["start"] = first.isoformat()  # not before its first run, however far ahead
    else:
        spec["cron"], spec["tz"] = crontab_fields(cast(str, job.cron)), zone
        spec["day_or"] = False  # the crontab package requires every field to match
        if job.repeat is not None:
            # Its N runs are counted from the first that will happen: an overdue one is sent
            # at its next cron time (rqscheduler.overdue_cron), not at a time already past.
            spec["start"] = first.isoformat()
    if job.repeat is not None:
        spec["end"] = _end(spec, first, job.repeat).isoformat()
    return spec


def _end(spec: dict[str, Any], next_at: datetime, repeat: int) -> datetime:
    """Just after the ``repeat``-th run from ``next_at`` on (rq-scheduler counts down)."""
    try:
        if "every" in spec:
            last = next_at + timedelta(seconds=int(spec["every"][:-1]) * (repeat - 1))
        else:
            if repeat > CRON_REPEAT_MAX:
                raise ConfigError(
                    f"more runs than the importer counts for a cron job "
                    f"(at most {CRON_REPEAT_MAX:,})",
                    option="repeat",
                    value=repeat,
                )
            schedule = Cron(spec["cron"], tz=spec["tz"], day_or=spec["day_or"])
            last = next_at - timedelta(seconds=1)
            for _ in range(repeat):
                last = schedule.next_after(last)
        return last + timedelta(seconds=1)
    except (OverflowError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(
            "its last run is past the year 9999", option="repeat", value=repeat
        ) from None


def crontab_fields(expr: str) -> str:
    """rq-scheduler's cron string (read by the ``crontab`` package) as the 5 fields
    cron-bridge reads with croniter: the package's ``?`` is croniter's ``*``, its ``l5``
    croniter's ``L5``; its seconds (first of 7 fields) and year (last of 6 or 7) are taken
    when they match every time croniter would fire (``0`` and ``*``).

    Raises:
        ConfigError: what croniter cannot read the same way (a ``Z`` day, seconds, a year).
    """
    fields = CRONTAB_ALIASES.get(expr.strip(), expr.strip()).lower().split()
    if len(fields) == 7:
        if fields[0] != "0":
            raise ConfigError(
                "cron-bridge fires on whole minutes, not on seconds",
                option="cron_string",
                value=expr,
            )
        fields = fields[1:]
    if len(fields) == 6:
        if fields[5] not in ("*", "?"):
            raise ConfigError(
                "a stored schedule has no year field", option="cron_string", value=expr
            )
        fields = fields[:5]
    if len(fields) != 5:
        raise ConfigError("expected 5 to 7 fields", option="cron_string", value=expr)
    if fields[2].startswith("z"):
        raise ConfigError(
            "croniter has no days before the end of the month (Z)", option="cron_string", value=expr
        )
    return " ".join(
        "*" if f == "?" else f.replace("l", "L") if f.startswith("l") else f for f in fields
    )


def plan(client: Redis, zone: str, now: datetime | None = None) -> list[Move]:
    """What each of rq-scheduler's jobs would become, in the order of their next run, its
    cron strings read in ``zone`` (the zone rq-scheduler's host is in)."""
    taken: set[str] = set()
    moves = []
    at = datetime.now(UTC) if now is None else now
    members = cast(list[tuple[bytes, float]], client.zrange(SCHEDULED, 0, -1, withscores=True))
    for member, score in members:
        moves.append(_read(client, member, float(score), taken, zone, at))
    return moves


def _alive(client: Redis) -> list[str]:
    """The rqscheduler processes still running (their hash has no ``death``), and its lock."""
    alive = [
        key.decode()
        for key in client.scan_iter(f"{INSTANCES}*")
        if not client.hexists(key, "death")
    ]
    if client.exists(LOCK):
        alive.append(LOCK)
    return alive


@click.command("rq-scheduler")
@click.option(
    "--url",
    "-u",
    envvar="RQ_REDIS_URL",
    default="redis://localhost:6379/0",
    show_default=True,
    help="The Redis rq-scheduler keeps its jobs in.",
)
@store_option
@optional_app_option(
    "The module that declares the tasks (repeatable; default $CRON_BRIDGE_APP): imported to "
    "check that stored schedules may name them (@storable or CRON_BRIDGE_STORED_TASKS)."
)
@click.option(
    "--tz",
    metavar="ZONE",
    default=None,
    help="The zone rq-scheduler's host is in, where its cron strings are read "
    "(default: this host's, from TZ or /etc/localtime).",
)
@click.option("--apply", is_flag=True, help="Move them; without it, only say what would move.")
def rq_scheduler(
    url: str, store: str | None, app: tuple[str, ...], tz: str | None, apply: bool
) -> None:
    """Move rq-scheduler's jobs (cron, interval and one-off) into stored schedules, which
    every beat replica runs; without --apply, only say what would move and what stays."""
    with one_line_errors():
        if apply and not (store or os.environ.get("CRON_BRIDGE_STORE")):
            # The move deletes the jobs from rq-scheduler: into a local file no beat reads,
            # they would be lost.
            raise ConfigError(
                "--apply needs the store your beats use (--store or CRON_BRIDGE_STORE)",
                option="--store",
                value=None,
            )
        if app:
            load_app(app)
        zone = local_zone_name(why="rq-scheduler") if tz is None else tz
        load_zone(zone)
        client = Redis.from_url(url, socket_connect_timeout=5, socket_timeout=10)
        try:
            client.ping()
        except Exception as exc:  # noqa: BLE001 - said in one line
            raise ConfigError(
                f"cannot reach rq-scheduler's Redis: {exc}", option="--url", value=redact_url(url)
            ) from None
        schedules = StoredSchedules(open_store(store))
        moves = plan(client, zone)
        if not moves:
            click.echo("rq-scheduler has no jobs in this Redis.")
            return
        written = _decide(moves, schedules, zone)
        if apply:
            _apply(client, moves, schedules, written)
        rows = [["JOB", "TASK", "WHEN", "STORED AS", "WHAT"]]
        for move in moves:
            action = f"stays: {move.left}" if move.left else ("moved" if apply else "would move")
            rows.append([move.job_id, move.task, move.when, move.name or "-", action])
        print_table(rows)
        moved = sum(1 for m in moves if not m.left)
        click.echo(
            f"{moved} of {len(moves)} job(s) {'moved' if apply else 'would move'}"
            + ("" if apply else "; run again with --apply to move them")
            + f" (cron strings read in {zone})"
        )
        if moved < len(moves):
            click.echo(_staying(moves))


def _staying(moves: list[Move]) -> str:
    """How to run what stays beside the moved jobs: rq-scheduler's jobs are pickled, which a
    JSON-serializer worker fails (``DeserializationError``), so no worker serves both."""
    stays = sorted({m.queue for m in moves if m.left and m.queue})
    moved = {m.queue for m in moves if not m.left}
    shared = [queue for queue in stays if queue in moved]
    said = (
        f"What stays keeps running with rq-scheduler: keep `rqscheduler` and serve its "
        f"queue(s) {', '.join(stays) or '(unknown)'} with an `rq worker` without "
        "--serializer (pickle); never point a JSON-serializer worker at them."
    )
    if shared:
        said += (
            f" Queue(s) {', '.join(shared)} get both kinds: give the moved schedules "
            "another queue (`cron-bridge schedule update NAME --queue ...`) or move what "
            "stays first."
        )
    return said


def _decide(moves: list[Move], schedules: StoredSchedules, zone: str) -> set[str]:
    """Check each move as ``schedule add`` would (the task agreed for stored schedules, every
    option valid); one that would be refused stays, with the reason. Returns the names whose
    stored schedule exists already as the move writes it (a run that stopped half-way)."""
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
            if existing[move.name].to_json() == stored.to_json():
                written.add(move.name)
            elif (spec := _made_from(existing[move.name], move, schedules, zone)) is not None:
                move.spec = spec
                if "at" in spec:
                    move.when = f"once, {spec['at']}"
                written.add(move.name)
            else:
                move.left = f"a stored schedule {move.name!r} exists already"
    return written


def _made_from(
    existing: ScheduleEntry, move: Move, schedules: StoredSchedules, zone: str
) -> dict[str, Any] | None:
    """The spec ``existing`` was made with, when an earlier run made it from the same job
    (and stopped before deleting the job); None when it is another schedule.

    Only the first run's time depends on the moment of the move (a run already due comes
    ``DUE_LEAD`` after it), and the spec keeps that time as its ``at=`` or ``start=``: the
    move is made again as of then and must give exactly ``existing``."""
    moment = existing.options.get("at", existing.options.get("start"))
    if move.job is None or not isinstance(moment, str):
        return None
    try:
        then = datetime.fromisoformat(moment)
        if then.tzinfo is None:
            return None
        spec = stored_spec(move.job, zone, then - DUE_LEAD)
        again = schedules.check(move.name, **spec)
    except (ValueError, OverflowError):  # ConfigError is a ValueError
        return None
    return spec if again.to_json() == existing.to_json() else None


def _apply(client: Redis, moves: list[Move], schedules: StoredSchedules, written: set[str]) -> None:
    """Write each stored schedule, then delete what rq-scheduler kept of the job (in one
    transaction): killed between the two, both are left, and the next run only deletes."""
    alive = _alive(client)
    if alive:
        raise ConfigError(
            f"rqscheduler is running: stop it first, or both would send ({', '.join(alive[:3])})",
            option="--apply",
            value=True,
        )
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
