"""A stored schedule's spec and its checks: what ``StoredSchedules`` stores, validated exactly
as ``@cluster_task`` validates a declaration (``ScheduleEntry.job``), and the allow-list of the
tasks a stored schedule may name (``check_storable``), before anything is written.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any

from cron_bridge.control import pause as control
from cron_bridge.errors import ConfigError
from cron_bridge.jobs import NAME_PATTERN, Backoff, Job, declare
from cron_bridge.options import STORED, WHEN, StoredOptions
from cron_bridge.queues.installed import get_adapter
from cron_bridge.schedules import parse_duration
from cron_bridge.storable import refusal

__all__ = [
    "LIBRARIES",
    "MIN_EVERY",
    "SPEC_MAX",
    "TASK_MAX",
    "ScheduleEntry",
    "StoredChanges",
    "as_stored",
    "backoff_json",
    "changed",
    "check_own",
    "check_storable",
    "shared_key",
    "spec_from",
    "stored_json",
    "summary",
]

LIBRARIES = ("celery", "rq", "dramatiq")
TASK_MAX = 300
SPEC_MAX = 64 * 1024  # bytes of JSON per schedule
# Every replica follows the stored schedules once a second, and whoever holds the secret must
# not be able to make one schedule flood the broker (every="1ms" is a thousand sends a second).
MIN_EVERY = timedelta(seconds=1)


_SHARED = frozenset({"library", "task", "queue"})
_INTERNED_MAX = 256  # longer texts are a tenant's own: not kept in the interpreter's table


def _interned(value: Any) -> Any:
    if isinstance(value, str) and len(value) <= _INTERNED_MAX:
        return sys.intern(value)
    return value


@dataclass(frozen=True, kw_only=True)
class ScheduleEntry:
    """One stored schedule: which task, on which library and queue, when, with what."""

    name: str
    library: str
    task: str
    options: dict[str, Any] = field(default_factory=dict)  # schedule and run options
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None
    backoff: dict[str, Any] | None = None  # {"kind": "fixed"|"exponential", "base", "max"}

    def to_json(self) -> dict[str, Any]:
        """The spec as stored (its fields as they are, not copied: ``json.dumps`` them)."""
        return {f: getattr(self, f) for f in _FIELDS}

    @classmethod
    def from_json(cls, data: object) -> ScheduleEntry:
        """The spec a record's JSON holds. Its texts that many schedules share (library,
        task, queue, and the options' texts: a cron expression, a zone) are interned: a
        replica holding a million stored schedules keeps one copy of each."""
        if not isinstance(data, dict):
            raise ValueError("a stored schedule is a JSON object")
        shared = {k: _interned(v) if k in _SHARED else v for k, v in data.items()}
        if isinstance(shared.get("options"), dict):
            shared["options"] = {k: _interned(v) for k, v in shared["options"].items()}
        return cls(**shared)

    def job(self, *, worker: bool = False) -> Job:
        """The job: as the beat enqueues it (to the library's stored-schedule task, which
        finds this spec by name), or with ``worker`` as the worker runs it (the task itself).

        Raises:
            ConfigError: naming the schedule, the option and the value, exactly as
                ``@cluster_task`` does.
        """
        if self.library not in LIBRARIES:
            raise ConfigError(
                f"expected one of {', '.join(LIBRARIES)}",
                job=self.name,
                option="library",
                value=self.library,
            )
        if not isinstance(self.task, str) or not 0 < len(self.task) <= TASK_MAX:
            raise ConfigError(
                f"expected the task's name, at most {TASK_MAX} characters",
                job=self.name,
                option="task",
                value=self.task,
            )
        for option, kind, said in (
            ("args", list, "a JSON list"),
            ("kwargs", dict, "a JSON object"),
            ("options", dict, "a JSON object"),
            ("queue", (str, type(None)), "a queue name"),
        ):
            if not isinstance(getattr(self, option), kind):
                raise ConfigError(
                    f"expected {said}", job=self.name, option=option, value=getattr(self, option)
                )
        # The options marked stored (cron_bridge.options); args, kwargs, queue and backoff
        # are fields of their own.
        unknown = set(self.options) - set(STORED)
        if unknown:
            raise ConfigError(
                "unknown option",
                job=self.name,
                option=sorted(unknown)[0],
                value=self.options[sorted(unknown)[0]],
            )
        for option in ("args", "kwargs"):
            try:
                json.dumps(getattr(self, option), allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise ConfigError(
                    f"must be JSON ({exc})",
                    job=self.name,
                    option=option,
                    value=getattr(self, option),
                ) from None
        if "every" in self.options:
            _check_every(self.name, self.options["every"])
        if "send" in self.options:
            _check_send(self)
        task = self.task if worker else _stored_task(self)
        kwargs = self.kwargs if worker else {"schedule": self.name}
        return declare(
            self.name,
            target="queue",
            adapter=self.library,
            task=task,
            queue=self.queue,
            kwargs=kwargs,
            backoff=_backoff(self),
            **self.options,
        )


def _check_every(name: str, every: object) -> None:
    try:
        interval = parse_duration(every, option="every")
    except ConfigError as exc:
        raise exc.for_job(name) from None
    if interval < MIN_EVERY:
        raise ConfigError(
            f"a stored schedule runs at most once every {MIN_EVERY.seconds}s",
            job=name,
            option="every",
            value=every,
        )


def _check_send(spec: ScheduleEntry) -> None:
    """What the schedule hands its queue library with each message (``send``), checked by the
    library's adapter (``check_send``), which names the option and the value it refuses."""
    send = spec.options["send"]
    if not isinstance(send, dict):
        raise ConfigError(
            "expected a JSON object of the queue library's options",
            job=spec.name,
            option="send",
            value=send,
        )
    adapter = get_adapter(spec.library)
    try:
        adapter.check_send(send)
    except ConfigError as exc:
        raise exc.for_job(spec.name) from None


def check_storable(spec: ScheduleEntry) -> None:
    """Refuse, before anything is written, a task this process knows stored schedules may
    not name (``cron_bridge.storable``); the workers check it again on every delivery."""
    why = refusal(spec.library, spec.task)
    if why is not None:
        raise ConfigError(
            f"{why} (in the process that adds it, too)",
            job=spec.name,
            option="task",
            value=spec.task,
        )


def _stored_task(spec: ScheduleEntry) -> str:
    task = get_adapter(spec.library).stored_task
    if task is None:
        raise ConfigError(
            f"the {spec.library} adapter cannot run stored schedules yet",
            job=spec.name,
            option="library",
            value=spec.library,
        )
    return task


def _backoff(spec: ScheduleEntry) -> Backoff | None:
    if spec.backoff is None:
        return None
    data = spec.backoff
    if not isinstance(data, dict) or data.get("kind") not in ("fixed", "exponential"):
        raise ConfigError(
            'expected {"kind": "fixed" or "exponential", "base": seconds}',
            job=spec.name,
            option="backoff",
            value=data,
        )
    if data["kind"] == "fixed":
        return Backoff.fixed(data.get("base", 0))
    return Backoff.exponential(data.get("base", 1), max=data.get("max"))


_FIELDS = tuple(f.name for f in fields(ScheduleEntry))


class StoredChanges(StoredOptions, total=False):
    """What ``StoredSchedules.update`` changes: any option, and the task and its arguments."""

    task: str
    library: str
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str | None
    backoff: Backoff | dict[str, Any] | None


def as_stored(options: Mapping[str, Any], name: str) -> dict[str, Any]:
    """``options`` as stored: a ``timedelta`` as its seconds (``"90s"``), a ``datetime`` as
    ISO 8601 text (a naive one is then refused, as ``@cluster_task`` refuses it)."""
    stored: dict[str, Any] = {}
    for key, value in options.items():
        if isinstance(value, timedelta):
            if value < timedelta(0):
                raise ConfigError(
                    "expected a duration of 0 or more", job=name, option=key, value=value
                )
            value = f"{value.total_seconds():.6f}".rstrip("0").rstrip(".") + "s"
        elif isinstance(value, datetime):
            value = value.isoformat()
        stored[key] = value
    return stored


def changed(current: ScheduleEntry, changes: Mapping[str, Any]) -> ScheduleEntry:
    """The schedule ``update`` would store (not checked yet): ``current`` with ``changes``,
    its own fields (task, library, args, kwargs, queue, backoff) replaced and its options
    merged, an option given as None dropped, and a new ``cron``, ``every`` or ``at``
    replacing whichever of them it had."""
    name = current.name
    fields: dict[str, Any] = {k: v for k, v in changes.items() if k in _OWN}
    if "backoff" in fields:
        fields["backoff"] = backoff_json(fields["backoff"])
    options = dict(current.options)
    for key, value in as_stored(changes, name).items():
        if key in fields:
            continue
        if key in _KINDS and value is not None:
            for other in _KINDS:
                options.pop(other, None)
        if value is None:
            options.pop(key, None)
        else:
            options[key] = value
    return ScheduleEntry(**{**current.to_json(), **fields, "options": options})


_OWN = ("task", "library", "args", "kwargs", "queue", "backoff")  # fields, not options
_KINDS = ("cron", "every", "at")  # a schedule has one of them


def spec_from(
    name: str,
    *,
    task: str,
    library: str,
    args: list[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    queue: str | None = None,
    backoff: Backoff | dict[str, Any] | None = None,
    **options: Any,
) -> ScheduleEntry:
    """The schedule ``add`` would store (not checked yet)."""
    return ScheduleEntry(
        name=name,
        library=library,
        task=task,
        options=as_stored(options, name),
        args=[] if args is None else args,
        kwargs={} if kwargs is None else kwargs,
        queue=queue,
        backoff=backoff_json(backoff),
    )


def shared_key(spec: ScheduleEntry) -> str | None:
    """What ``ScheduleEntry.job`` and the allow-list check of ``spec`` depend on besides its
    name, arguments and size, as text (None when it is not JSON: checked each time)."""
    try:
        return json.dumps(
            [spec.library, spec.task, spec.options, spec.queue, spec.backoff],
            sort_keys=True,
            allow_nan=False,
        )
    except (TypeError, ValueError):
        return None


def check_own(spec: ScheduleEntry) -> None:
    """The checks of ``ScheduleEntry.job`` that depend on the name and the arguments: of an
    entry whose task and options were checked with another name, and whose arguments are
    JSON (the whole spec was). In the order ``job`` makes them (the arguments' types, then
    the name, which ``declare`` checks), so that an entry wrong in both is refused for the
    same option either way."""
    for option, kind, said in (("args", list, "a JSON list"), ("kwargs", dict, "a JSON object")):
        value = getattr(spec, option)
        if not isinstance(value, kind):
            raise ConfigError(f"expected {said}", job=spec.name, option=option, value=value)
    if not isinstance(spec.name, str) or not NAME_PATTERN.fullmatch(spec.name):
        raise ConfigError(
            "a name is [A-Za-z0-9][A-Za-z0-9._-]{0,199}",
            job=str(spec.name),
            option="name",
            value=spec.name,
        )


def backoff_json(backoff: Backoff | dict[str, Any] | None) -> dict[str, Any] | None:
    """A ``Backoff`` as the spec keeps it; a dict as given (checked by ``ScheduleEntry.job``)."""
    if isinstance(backoff, Backoff):
        return {"kind": backoff.kind, "base": backoff.base, "max": backoff.max}
    return backoff


def stored_json(spec: ScheduleEntry, raw: str | None = None) -> str:
    """``spec`` as stored (``raw``, when made already): its JSON, at most ``SPEC_MAX`` bytes.

    Raises:
        ConfigError: larger, naming ``kwargs`` (where the bytes are).
        TypeError, ValueError: not JSON (``ScheduleEntry.job`` refuses it first).
    """
    if raw is None:
        raw = json.dumps(spec.to_json(), allow_nan=False)
    if len(raw.encode()) > SPEC_MAX:
        raise ConfigError(
            f"a stored schedule is at most {SPEC_MAX} bytes of JSON",
            job=spec.name,
            option="kwargs",
            value=len(raw),
        )
    return raw


def summary(spec: ScheduleEntry) -> str:
    when = ", ".join(f"{k}={v}" for k, v in spec.options.items() if k in WHEN)
    return f"{spec.library} {spec.task} {when}"[: control.REASON_MAX]
