"""Jobs and their occurrences.

A ``Job`` is a validated declaration: what runs, when, and under which guarantees. It is a
value: registering it, running it and enqueueing it happen elsewhere. The options it is
declared with are defined once, in ``cron_bridge.options``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Unpack

from cron_bridge.backoff import Backoff
from cron_bridge.errors import ConfigError
from cron_bridge.monitors import Monitor
from cron_bridge.monitors import resolve as resolve_monitor
from cron_bridge.options import (
    CHOICES,
    DEFAULTS,
    DeclareOptions,
    Misfire,
    Overlap,
    Scope,
    Target,
    given,
)
from cron_bridge.plumbing.keys import claim_key
from cron_bridge.schedules import EPOCH, Cron, Every, Schedule, load_zone, parse_duration
from cron_bridge.windows import At, Window

__all__ = [
    "Backoff",
    "Job",
    "Occurrence",
    "declare",
    "name_for",
]

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")
CLAIM_TTL = timedelta(hours=48)
_ONE_MS = timedelta(milliseconds=1)
MAX_JITTER = timedelta(days=1)
_NOT_IN_NAMES = re.compile(r"[^A-Za-z0-9._-]+")


def name_for(shown: str, *, fallback: str) -> str:
    """The job name of a declaration another tool names ``shown`` (any text: an RQ
    registration, an actor): ``shown`` itself when it is a valid job name, else its letters,
    digits, ``.``, ``_`` and ``-`` (the rest as ``-``) and 8 hex digits of its digest, so every
    replica maps it alike and two names that differ only in the replaced characters stay
    apart (``nightly report (EU)`` is ``nightly-report-EU-<digest>``); ``fallback`` when
    nothing of it is left (``<fallback>-<digest>``)."""
    if NAME_PATTERN.fullmatch(shown):
        return shown
    digest = hashlib.sha256(shown.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    base = _NOT_IN_NAMES.sub("-", shown).strip("-._")[:180]
    return f"{base}-{digest}" if base else f"{fallback}-{digest}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Occurrence:
    """One due time of one job: the unit that is claimed once in the store."""

    job: str
    scheduled_at: datetime
    # The id and the time in ms, made when first asked for: a burst asks for them several
    # times per occurrence.
    _id: str | None = field(default=None, init=False, repr=False, compare=False)
    _ms: int | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        at = self.scheduled_at
        if at.tzinfo is None:
            raise ValueError("an occurrence needs an aware scheduled_at")
        if at.tzinfo is UTC and not at.microsecond % 1000:
            return  # what schedules give: nothing to convert
        # Ids and keys carry milliseconds; keep the value equal to what they say.
        utc = at.astimezone(UTC)
        object.__setattr__(
            self, "scheduled_at", utc.replace(microsecond=utc.microsecond // 1000 * 1000)
        )

    @property
    def epoch_ms(self) -> int:
        made = self._ms
        if made is None:
            made = (self.scheduled_at - EPOCH) // _ONE_MS
            object.__setattr__(self, "_ms", made)
        return made

    @property
    def id(self) -> str:
        """``<job>@<scheduled time as UTC ISO-8601 with milliseconds>``, for every year (the
        year always has four digits, so ``parse`` reads back every id this writes)."""
        made = self._id
        if made is None:
            stamp = self.scheduled_at.replace(tzinfo=None).isoformat(timespec="milliseconds")
            made = f"{self.job}@{stamp}Z"
            object.__setattr__(self, "_id", made)
        return made

    @property
    def claim_key(self) -> str:
        """The store key claimed once for this occurrence."""
        return claim_key(self.job, self.epoch_ms)

    @classmethod
    def parse(cls, occurrence_id: str) -> Occurrence:
        """The occurrence an id names.

        Raises:
            ValueError: the id is not ``<job>@<YYYY-MM-DDTHH:MM:SS.mmmZ>``.
        """
        if not isinstance(occurrence_id, str) or len(occurrence_id) > 300:
            raise ValueError(f"not an occurrence id: {str(occurrence_id)[:300]!r}")
        job, sep, stamp = occurrence_id.rpartition("@")
        if not sep or not NAME_PATTERN.fullmatch(job) or not _STAMP.fullmatch(stamp):
            raise ValueError(f"not an occurrence id: {occurrence_id!r}")
        return cls(job=job, scheduled_at=datetime.fromisoformat(stamp[:-1] + "+00:00"))


_SCHEDULE_TYPES: set[type] = set()  # classes already found to be schedules


def _is_schedule(obj: object) -> bool:
    """``isinstance(obj, Schedule)``, once per class: a runtime protocol check inspects every
    member, about 80 µs, which 100,000 declared jobs would pay twice each."""
    kind = type(obj)
    if kind in _SCHEDULE_TYPES:
        return True
    if isinstance(obj, Schedule):
        _SCHEDULE_TYPES.add(kind)
        return True
    return False


@dataclass(frozen=True, kw_only=True, slots=True)
class Job:
    """A validated job declaration. Build one with ``declare()`` or ``@cluster_task``.

    Attributes:
        handler: the callable that runs: for an inline target the beat calls it; for a
            queue target it is the wrapped task, which the beat never calls.
        adapter: the name of the adapter that enqueues a queue target.
        task: the name the adapter enqueues by (task name, dotted path, actor name).
    """

    # The options, validated: their defaults, meanings and the options folded into
    # ``schedule`` (cron, every, at, tz, day_or, offset, start, end) are in cron_bridge.options.
    name: str
    schedule: Schedule
    scope: Scope = DEFAULTS["scope"]
    overlap: Overlap = DEFAULTS["overlap"]
    misfire: Misfire = DEFAULTS["misfire"]
    misfire_grace: timedelta = DEFAULTS["misfire_grace"]
    coalesce: bool = DEFAULTS["coalesce"]
    attempts: int = DEFAULTS["attempts"]
    backoff: Backoff = DEFAULTS["backoff"]
    lock_ttl: timedelta = DEFAULTS["lock_ttl"]
    timeout: timedelta | None = DEFAULTS["timeout"]
    jitter: timedelta = DEFAULTS["jitter"]
    on_demand: bool = DEFAULTS["on_demand"]
    kwargs: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULTS["kwargs"]))
    queue: str | None = None
    # JSON values, checked by the adapter.
    send: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULTS["send"]))
    target: Target = DEFAULTS["target"]
    handler: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    adapter: str | None = None
    task: str | None = None
    # None: the process's default (CRON_BRIDGE_MONITOR, --monitor), if any.
    monitor: Monitor | None = field(default=DEFAULTS["monitor"], compare=False)

    def __post_init__(self) -> None:
        def fail(option: str, value: Any, reason: str) -> ConfigError:
            return ConfigError(reason, job=self.name, option=option, value=value)

        if not isinstance(self.name, str) or not NAME_PATTERN.fullmatch(self.name):
            raise fail("name", self.name, "a name is [A-Za-z0-9][A-Za-z0-9._-]{0,199}")
        if not _is_schedule(self.schedule):
            raise fail("schedule", self.schedule, "expected a Cron or Every schedule")
        for option, allowed in CHOICES.items():
            value = getattr(self, option)
            if value not in allowed:
                raise fail(option, value, f"expected one of {', '.join(allowed)}")
        if not isinstance(self.coalesce, bool):
            raise fail("coalesce", self.coalesce, "expected True or False")
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int):
            raise fail("attempts", self.attempts, "expected a whole number of tries, at least 1")
        if self.attempts < 1:
            raise fail("attempts", self.attempts, "at least 1 try (the first one counts)")
        if not isinstance(self.backoff, Backoff):
            raise fail(
                "backoff", self.backoff, "expected Backoff.fixed(...) or Backoff.exponential(...)"
            )
        for option in ("misfire_grace", "lock_ttl", "timeout"):
            value = getattr(self, option)
            if value is not None and value <= timedelta(0):
                raise fail(option, value, "expected a positive duration")
        if not timedelta(0) <= self.jitter <= MAX_JITTER:
            raise fail("jitter", self.jitter, "expected a duration from 0 to 1 day")
        if self.lock_ttl < timedelta(milliseconds=30):
            raise fail("lock_ttl", self.lock_ttl, "too short to heartbeat (at least 30ms)")
        try:
            if self.kwargs or not isinstance(self.kwargs, Mapping):
                json.dumps(dict(self.kwargs), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise fail("kwargs", self.kwargs, f"must be JSON-serialisable ({exc})") from exc
        if self.send:
            if not isinstance(self.send, Mapping) or not all(isinstance(k, str) for k in self.send):
                raise fail("send", self.send, "expected a mapping of option names")
            if self.target != "queue":
                raise fail("send", self.send, "an inline target sends nothing")
            try:
                json.dumps(dict(self.send), allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise fail("send", self.send, f"must be JSON-serialisable ({exc})") from exc
        if self.target == "queue":
            if self.scope == "instance":
                raise fail("scope", self.scope, 'a queue target needs scope="cluster"')
            if self.adapter is None or self.task is None:
                raise fail("target", self.target, "a queue target needs an adapter and a task name")
        elif not callable(self.handler):
            raise fail("target", self.target, "an inline target needs a callable")
        elif self.queue is not None:
            raise fail("queue", self.queue, "an inline target runs in the beat, not on a queue")
        if self.monitor is not None:
            if not isinstance(self.monitor, Monitor):
                raise fail("monitor", self.monitor, 'expected "sentry" or a Ping(...)')
            self.monitor.check(self.name, self.schedule, self.misfire_grace, self.timeout)

    @property
    def is_cluster(self) -> bool:
        return self.scope == "cluster"

    @property
    def external(self) -> bool:
        """The old name of ``on_demand``."""
        return self.on_demand

    def occurrence(self, scheduled_at: datetime) -> Occurrence:
        return Occurrence(job=self.name, scheduled_at=scheduled_at)

    def fire_at(self, scheduled_at: datetime) -> datetime:
        """When the occurrence due at ``scheduled_at`` is fired: that time plus its share of
        ``jitter``, the same on every replica (from the occurrence id), to the millisecond.
        Its claim key and id stay the scheduled time."""
        if not self.jitter:
            return scheduled_at
        occurrence_id = self.occurrence(scheduled_at).id
        digest = hashlib.sha256(occurrence_id.encode()).digest()
        fraction = int.from_bytes(digest[:8], "big") / 2**64
        return scheduled_at + (self.jitter * fraction) // _ONE_MS * _ONE_MS


def declare(
    name: str,
    *,
    queue: str | None = None,
    handler: Callable[..., Any] | None = None,
    adapter: str | None = None,
    task: str | None = None,
    **options: Unpack[DeclareOptions],
) -> Job:
    """Validate the options (``cron_bridge.options``, described in docs/jobs.md) and build
    the ``Job``.

    Args:
        name: the job's name.
        queue: the queue a queue target is sent to (None: the task's own).
        handler: the callable: what an inline target runs, a queue target's wrapped task.
        adapter: the adapter that enqueues a queue target.
        task: the name that adapter enqueues by.
        **options: the job's options.

    Raises:
        ConfigError: naming the job, the option and the value.
        TypeError: an option there is none of.
    """
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ConfigError(
            "a name is [A-Za-z0-9][A-Za-z0-9._-]{0,199}", job=str(name), option="name", value=name
        )
    values = given(options, DeclareOptions, caller="declare", job=name)
    start, end, send = values["start"], values["end"], values["send"]
    try:
        schedule = _schedule(values)
        if start is not None or end is not None:
            if values["at"] is not None:
                raise ConfigError(
                    "a one-off run (at=) takes no start or end",
                    option="start" if start is not None else "end",
                    value=start if start is not None else end,
                )
            schedule = Window(schedule, start=start, end=end)
        grace = parse_duration(values["misfire_grace"], option="misfire_grace")
        lock_lifetime = parse_duration(values["lock_ttl"], option="lock_ttl")
        timeout = values["timeout"]
        time_limit = None if timeout is None else parse_duration(timeout, option="timeout")
        spread = parse_duration(values["jitter"], option="jitter")
        watcher = resolve_monitor(values["monitor"], job=name)
    except ConfigError as exc:
        raise exc.for_job(name) from None
    backoff = values["backoff"]
    return Job(
        name=name,
        schedule=schedule,
        scope=values["scope"],
        overlap=values["overlap"],
        misfire=values["misfire"],
        coalesce=values["coalesce"],
        attempts=values["attempts"],
        backoff=DEFAULTS["backoff"] if backoff is None else backoff,
        on_demand=values["on_demand"],
        kwargs=dict(values["kwargs"] or {}),
        queue=queue,
        send=dict(send) if isinstance(send, Mapping) else ({} if send is None else send),
        target=values["target"],
        handler=handler,
        adapter=adapter,
        task=task,
        misfire_grace=grace,
        lock_ttl=lock_lifetime,
        timeout=time_limit,
        jitter=spread,
        monitor=watcher,
    )


def _schedule(values: Mapping[str, Any]) -> Schedule:
    """The schedule the options ``cron``, ``every``, ``at``, ``tz``, ``day_or`` and ``offset``
    say."""
    cron, every, at = values["cron"], values["every"], values["at"]
    tz, day_or, offset = values["tz"], values["day_or"], values["offset"]
    kinds = {
        name: value
        for name, value in (("cron", cron), ("every", every), ("at", at))
        if value is not None
    }
    if len(kinds) > 1:
        first = next(iter(kinds))
        raise ConfigError(
            f"give one of cron=, every= or at=, not {' and '.join(kinds)}",
            option=first,
            value=kinds[first],
        )
    if day_or is not True and (cron is None or day_or is not False):
        raise ConfigError(
            "day_or= is True or False, for a cron= schedule", option="day_or", value=day_or
        )
    if cron is not None:
        return Cron(cron, tz=tz, day_or=day_or)
    if at is not None:
        load_zone(tz)
        return At(at)
    if every is None:
        raise ConfigError("give one of cron=, every= or at=", option="cron", value=None)
    load_zone(tz)  # a zone is validated even where an interval does not use it
    return Every(every, offset=offset)
