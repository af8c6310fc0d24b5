"""One of rq-scheduler's jobs, read from another tool's records through one boundary.

Whatever a job hash in rq-scheduler's Redis holds (written by any version of rq-scheduler, by
hand, or by whoever can write to that Redis), ``read_job`` either returns a ``ScheduledJob`` of
validated, bounded plain values, or raises ``Unreadable`` with one short line saying why; it
never runs anything the job names, and its cost is bounded by the limits below, not by what
the bytes claim to be:

- the hash: at most ``FIELDS_MAX`` fields of at most ``FIELD_MAX`` bytes each, asked for their
  sizes before any is read;
- ``data`` (the function, instance, args and kwargs) decompressed to at most ``DATA_MAX`` and
  ``meta`` at most ``META_MAX``, unpickled by an unpickler that refuses every class;
- what they unpickle to, walked before anything serialises it, visiting a shared reference
  each time it is reached (as ``json.dumps`` would expand it): at most ``NODES_MAX`` values,
  ``DATA_MAX`` characters of text and ``DEPTH_MAX`` levels, so a pickle of a few bytes that
  expands to 2**40 values is refused in microseconds;
- ``interval``, ``repeat``, ``timeout``, ``result_ttl``, ``ttl`` and the next run time: whole
  numbers in range.
"""

from __future__ import annotations

import io
import json
import math
import pickle
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from redis import Redis

from cron_bridge.adapters import override

__all__ = ["ScheduledJob", "Unreadable", "plain", "read_job"]

FIELDS_MAX = 64
FIELD_MAX = 2 << 20  # bytes of one field as stored (data is compressed)
DATA_MAX = 1 << 20  # bytes of data decompressed, and characters of text its values expand to
META_MAX = 64 << 10
NODES_MAX = 100_000
DEPTH_MAX = 64
INT_DIGITS_MAX = 30  # an argument's integer (json.dumps refuses those over 4,300 digits)
INTERVAL_MAX = 10**9  # seconds: about 31 years
REPEAT_MAX = 10**6  # runs left (the importer steps through at most 1,000 of a cron job's)
TIMEOUT_MAX = 10**9  # seconds (about 31 years): timeout, result_ttl, ttl
ID_MAX = 200
_SHOWN_MAX = 200


class Unreadable(ValueError):
    """A job that cannot be read as plain, bounded data; ``str()`` is one line."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduledJob:
    """What one rq-scheduler job says, every value checked.

    Attributes:
        job_id: the member of rq-scheduler's sorted set (and ``rq:job:<job_id>``).
        next_at: the next run, from the sorted set's score.
        task: the function's dotted path, as the job names it (printable, bounded).
        instance: whether it calls a method of an object.
        args: the positional arguments, plain JSON values.
        kwargs: the keyword arguments, plain JSON values under string keys.
        interval: seconds between runs, for an interval job.
        cron: the cron string, for a cron job.
        local_zone: ``use_local_timezone`` (which moves no run: rq-scheduler reads a cron
            string's fields in the host's local time either way).
        repeat: how many runs are left, when counted (``0`` runs once, as ``1`` does).
        queue: the queue it is sent to.
        timeout: the job's timeout in seconds (RQ's hard limit; ``-1`` none), when set.
        result_ttl: seconds RQ keeps its result (``-1`` for ever), when set.
        ttl: seconds it may wait in its queue, when set.
        meta: the job's own meta, without what rq-scheduler keeps there.
        at_front: sent to the front of its queue.
        cannot: what it has that a stored schedule cannot carry.
    """

    job_id: str
    next_at: datetime
    task: str
    instance: bool
    args: list[Any]
    kwargs: dict[str, Any]
    interval: int | None
    cron: str | None
    local_zone: bool
    repeat: int | None
    queue: str
    timeout: int | None
    result_ttl: int | None
    ttl: int | None
    meta: dict[str, Any]
    at_front: bool
    cannot: tuple[str, ...]

    @property
    def when(self) -> str:
        """``every Ns``, the cron string, or ``once``."""
        if self.interval is not None:
            return f"every {self.interval}s"
        return shown(self.cron) if self.cron is not None else "once"


class _PlainOnly(pickle.Unpickler):
    """Builds plain values only: any class or function named in the pickle is refused."""

    @override
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{shown(module)}.{shown(name)} is not plain data")


def plain(raw: bytes) -> Any:
    """A pickled or JSON value of rq's serializers, read without running anything.

    Raises:
        Unreadable: it is neither, or names a class.
    """
    try:
        if raw[:1] == b"\x80":
            return _PlainOnly(io.BytesIO(raw)).load()
        return json.loads(raw)
    # An unpickler fed hostile bytes fails in many ways (a bad opcode, a missing memo entry, a
    # truncated frame, text that is not UTF-8, nesting past the recursion limit): each is why
    # this job stays, never an error of the whole import.
    except Exception as exc:  # noqa: BLE001
        raise Unreadable(f"not plain data ({_said(exc)})") from None


def read_job(client: Redis, member: bytes, score: float) -> ScheduledJob:
    """The job ``member`` of rq-scheduler's sorted set, whose score is ``score``.

    Raises:
        Unreadable: its hash is gone, too large, or holds something that is not plain,
            bounded data of the kinds rq-scheduler writes.
    """
    job_id = _job_id(member)
    raw = _fields(client, f"rq:job:{job_id}")
    stored = raw.get(b"data", b"")
    try:
        body = zlib.decompressobj().decompress(stored, DATA_MAX + 1)
    except zlib.error:
        body = stored  # as rq reads it: data it did not compress is taken as it is
    if len(body) > DATA_MAX:
        raise Unreadable("its data is larger than 1 MiB once decompressed")
    values = plain(body)
    if not isinstance(values, list | tuple) or len(values) != 4:
        raise Unreadable("its data is not (function, instance, args, kwargs)")
    func, instance, args, kwargs = values
    meta_raw = raw.get(b"meta") or b""
    if len(meta_raw) > META_MAX:
        raise Unreadable("its meta is larger than 64 KiB")
    meta = plain(meta_raw) if meta_raw else {}
    if not isinstance(meta, Mapping) or not all(isinstance(key, str) for key in meta):
        raise Unreadable("its meta is not a mapping of names")
    _check_plain([args, kwargs], "arguments")
    _check_plain(dict(meta), "meta")
    interval = _whole(meta.get("interval"), "interval", 1, INTERVAL_MAX)
    cron = meta.get("cron_string")
    if cron is not None and (not isinstance(cron, str) or len(cron) > _SHOWN_MAX):
        raise Unreadable("its cron_string is not a short string")
    return ScheduledJob(
        job_id=job_id,
        next_at=_next_at(score),
        task=_task(func),
        instance=instance is not None,
        args=_args(args),
        kwargs=_kwargs(kwargs),
        interval=interval,
        cron=cron or None,
        local_zone=bool(meta.get("use_local_timezone")),
        repeat=_whole(meta.get("repeat"), "repeat", 0, REPEAT_MAX),
        queue=_queue(raw.get(b"origin")),
        timeout=_seconds(raw.get(b"timeout"), "timeout", 1),
        result_ttl=_seconds(raw.get(b"result_ttl"), "result_ttl", 0),
        ttl=_seconds(raw.get(b"ttl"), "ttl", 1),
        meta=_own_meta(meta),
        at_front=raw.get(b"enqueue_at_front") in (b"1", b"true", b"True"),
        cannot=_cannot(raw) + (("a queue class",) if meta.get("queue_class_name") else ()),
    )


def shown(value: object, limit: int = _SHOWN_MAX) -> str:
    """``value`` as one printable line of at most ``limit`` characters."""
    text = value if isinstance(value, str) else repr(value)
    line = "".join(c if c.isprintable() else "?" for c in text[: limit + 1])
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _said(exc: BaseException) -> str:
    return shown(str(exc) or type(exc).__name__, 120)


def _job_id(member: bytes) -> str:
    if len(member) > ID_MAX:
        raise Unreadable(f"its id is longer than {ID_MAX} bytes")
    try:
        job_id = member.decode()
    except UnicodeDecodeError:
        raise Unreadable("its id is not UTF-8") from None
    if not job_id.isprintable():
        raise Unreadable("its id holds control characters")
    return job_id


def _fields(client: Redis, key: str) -> dict[bytes, bytes]:
    """The job's hash, its size asked for before it is read."""
    count = client.hlen(key)
    if not count:
        raise Unreadable("its job hash is gone (rq-scheduler drops such ids itself)")
    if count > FIELDS_MAX:
        raise Unreadable(f"its job hash has {count} fields, more than {FIELDS_MAX}")
    names = cast(list[bytes], client.hkeys(key))
    with client.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.hstrlen(key, name)
        sizes = cast(list[int], pipe.execute())
    if any(size > FIELD_MAX for size in sizes):
        raise Unreadable("a field of its job hash is larger than 2 MiB")
    return cast(dict[bytes, bytes], client.hgetall(key))


def _check_plain(value: Any, what: str) -> None:
    """Walk ``value`` as ``json.dumps`` would, shared references once per place they are
    reached, within ``NODES_MAX`` values, ``DATA_MAX`` characters and ``DEPTH_MAX`` levels.

    Raises:
        Unreadable: it is larger or deeper than that, or holds a value JSON cannot carry.
    """
    nodes, text = 0, 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > NODES_MAX:
            raise Unreadable(f"its {what} expand to more than {NODES_MAX:,} values")
        if depth > DEPTH_MAX:
            raise Unreadable(f"its {what} are nested more than {DEPTH_MAX} levels deep")
        if item is None or isinstance(item, bool):
            continue
        if isinstance(item, int):
            if abs(item) >= 10**INT_DIGITS_MAX:
                raise Unreadable(f"its {what} hold an integer of more than {INT_DIGITS_MAX} digits")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise Unreadable(f"its {what} hold a number that is not finite")
        elif isinstance(item, str):
            text += len(item)
        elif isinstance(item, list | tuple):
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise Unreadable(f"its {what} are not JSON (a key that is not a string)")
                text += len(key)
                stack.append((child, depth + 1))
        else:
            raise Unreadable(f"its {what} are not JSON (a {shown(type(item).__name__)})")
        if text > DATA_MAX:
            raise Unreadable(f"its {what} expand to more than 1 MiB of text")


def _whole(value: object, what: str, low: int, high: int) -> int | None:
    """A whole number from ``low`` to ``high`` (also as digits), or None when unset."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 12:
        value = int(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise Unreadable(
            f"its {what} {shown(value, 40)} is not a whole number from {low} to {high:,}"
        )
    return value


def _text(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        raise Unreadable("a field of its job hash is not text") from None


def _next_at(score: float) -> datetime:
    if not math.isfinite(score) or not 0 <= score < 253402300799:  # up to 9999-12-31
        raise Unreadable(f"its next run time {shown(score, 40)} is not a time")
    return datetime.fromtimestamp(score, UTC)


def _task(func: object) -> str:
    if not isinstance(func, str) or not func or len(func) > _SHOWN_MAX or not func.isprintable():
        raise Unreadable("its function is not a dotted path")
    return func


def _args(args: object) -> list[Any]:
    if args is None:
        return []
    if not isinstance(args, list | tuple):
        raise Unreadable(f"its args are a {shown(type(args).__name__)}, not a list")
    return cast(list[Any], json.loads(json.dumps(list(args))))  # inner tuples: lists


def _kwargs(kwargs: object) -> dict[str, Any]:
    if kwargs is None:
        return {}
    if not isinstance(kwargs, dict):
        raise Unreadable(f"its kwargs are a {shown(type(kwargs).__name__)}, not a mapping")
    return cast(dict[str, Any], json.loads(json.dumps(kwargs)))


def _queue(raw: bytes | None) -> str:
    if not raw:
        return "default"
    try:
        queue = raw.decode()
    except UnicodeDecodeError:
        raise Unreadable("its queue (origin) is not UTF-8") from None
    if len(queue) > _SHOWN_MAX or not queue.isprintable():
        raise Unreadable("its queue (origin) is not a short printable name")
    return queue


def _seconds(raw: bytes | None, what: str, low: int) -> int | None:
    """RQ's whole number of seconds from ``low`` up, or ``-1`` (none: for ever, no limit)."""
    text = _text(raw)
    if text == "-1":
        return -1
    return _whole(text, what, low, TIMEOUT_MAX)


# What rq-scheduler keeps in a job's meta itself, not the user.
_OWN_META = ("interval", "cron_string", "use_local_timezone", "repeat", "queue_class_name")


def _own_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The user's meta (``meta=``), as JSON values."""
    own = {key: value for key, value in meta.items() if key not in _OWN_META}
    return cast(dict[str, Any], json.loads(json.dumps(own)))


def _cannot(raw: Mapping[bytes, bytes]) -> tuple[str, ...]:
    """What the job has that a stored schedule cannot carry."""
    return tuple(
        label
        for label, key in (
            ("depends_on", b"dependency_ids"),
            ("on_success", b"success_callback_name"),
            ("on_failure", b"failure_callback_name"),
        )
        if raw.get(key) not in (None, b"")
    )
