"""Pausing and resuming jobs across the cluster, at run time.

A pause is a control record (group ``pause``, key the job) in the store: why, who, since
when. Every pause and resume is also appended to the job's change log (group
``change:<job>``, key ``<epoch ns>:<random>``, the last 100 kept), shown by
``cron-bridge history NAME --changes`` and the job's page.

Every pause and resume is announced in the pauses' feed (``pause-feed``, ``control.feed``).
Right before it claims, every replica asks that feed what changed since it last looked (one
small read, however many jobs are paused) and reads again the pause of each job it names
(``cron_bridge.beat.pause_sync``): it obeys a pause from its next claim on. It reads every
pause at start, and again every ``FULL_EVERY_MINUTES`` in case an announcement was lost.

A paused job's occurrences are still claimed, once, and the winner records them
``skipped-paused`` (reason: who paused it and why) instead of running them: the history shows
every occurrence the pause held back. Resuming deletes the record; the next occurrence runs,
and the paused ones are not caught up.

What is read from the store is treated as hostile: a record that does not parse keeps its
job paused (fail closed), with a warning; so does one the store cannot hand over (bytes that
are not UTF-8, too large: ``stores.records.UNREADABLE``).
"""

from __future__ import annotations

import getpass
import json
import logging
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cron_bridge.control.feed import Feed
from cron_bridge.errors import ConfigError, StoreUnavailable
from cron_bridge.jobs import NAME_PATTERN, Occurrence
from cron_bridge.plumbing import inbound, keys
from cron_bridge.stores.base import Store

__all__ = [
    "FEED",
    "FULL_EVERY_MINUTES",
    "Change",
    "Pause",
    "catch_up_key",
    "change_key",
    "changes",
    "cli_actor",
    "latest_paused",
    "log_change",
    "pause",
    "pause_of",
    "paused",
    "pauses_of",
    "resume",
]

log = logging.getLogger(__name__)

PAUSES = "pause"  # the control group of the paused jobs, by job
FEED = Feed("pause-feed")  # every pause and resume, followed by every replica
FULL_EVERY_MINUTES = 10  # how often replicas read every pause (cron_bridge.beat.pause_sync)
# Every pause must be read, or its job runs: a reader holds up to a million (a pause is about
# a hundred bytes); one past the bytes is read unreadable, which keeps its job paused.
PAUSED_MOST = 1_000_000
PAUSED_BYTES = 256 * 1024 * 1024
CHANGES = "change:{job}"  # a job's change log, by <epoch ns>:<random>
CHANGES_KEPT = 100  # per job
REASON_MAX = 500
ACTOR_MAX = 200


@dataclass(frozen=True, kw_only=True, slots=True)
class Pause:
    """Why a job is paused, who paused it, and since when."""

    job: str
    reason: str
    by: str
    since: datetime

    def describe(self) -> str:
        """For records and logs: ``paused by <who> since <when>[: <reason>]``."""
        said = f"paused by {self.by} since {self.since.isoformat(timespec='seconds')}"
        return f"{said}: {self.reason}" if self.reason else said

    def to_json(self) -> dict[str, Any]:
        return {"reason": self.reason, "by": self.by, "since": self.since.isoformat()}


def cli_actor() -> str:
    """Who runs this command: ``cli:<user>@<host>``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's arbitrary user)
        user = "unknown"
    return f"cli:{user}@{socket.gethostname()}"


def _text(value: str, option: str, limit: int, job: str | None = None) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise ConfigError(
            f"expected text of at most {limit} characters",
            job=job,
            option=option,
            value=str(value)[:80],
        )
    if any(ord(ch) < 32 and ch not in "\t" for ch in value):
        raise ConfigError(
            "expected text without control characters", job=job, option=option, value=value[:80]
        )
    return value


@dataclass(frozen=True, kw_only=True, slots=True)
class Change:
    """One change an operator made to a job: ``paused`` or ``resumed``, by whom, when, and
    the pause it set or ended."""

    job: str
    action: str
    by: str
    at: datetime
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "action": self.action,
            "by": self.by,
            "at": self.at.isoformat(),
            "reason": self.reason,
        }


def changes(store: Store, job: str) -> list[Change]:
    """The last ``CHANGES_KEPT`` changes to ``job``, newest first; unreadable ones skipped."""
    found = []
    for key, raw in sorted(store.controls(CHANGES.format(job=job)).items(), reverse=True):
        try:
            data = inbound.loads(raw)
            found.append(
                Change(
                    job=job,
                    action=_text(data["action"], "action", 40, job),
                    by=_text(data["by"], "by", ACTOR_MAX, job),
                    at=_moment(data["at"], "at"),
                    reason=_text(data.get("reason", ""), "reason", REASON_MAX, job),
                )
            )
        except (ValueError, TypeError, KeyError, ConfigError) as exc:
            inbound.warn_once(
                log,
                CHANGES.format(job=job),
                key,
                raw,
                "skipping an unreadable change record %.200r (%.300s)",
                key,
                exc,
            )
    return found


def log_change(store: Store, job: str, action: str, *, by: str, reason: str = "") -> None:
    """Append a change an operator made to ``job`` (``action``: what, in a few words) to its
    change log."""
    _log_change(store, Change(job=job, action=action, by=by, at=datetime.now(UTC), reason=reason))


def change_key() -> str:
    """The key of a new change log entry: ``<epoch ns>:<random>``, in time order."""
    return f"{time.time_ns():020d}:{uuid.uuid4().hex[:6]}"


def _log_change(store: Store, change: Change) -> None:
    """Append ``change`` to the job's change log, keeping the last ``CHANGES_KEPT``."""
    group = CHANGES.format(job=change.job)
    key = change_key()
    store.put_control(group, key, json.dumps(change.to_json()))
    kept = sorted(store.controls(group))
    for old in kept[: max(0, len(kept) - CHANGES_KEPT)]:
        store.put_control(group, old, None)


def pause(store: Store, job: str, *, reason: str = "", by: str) -> Pause:
    """Pause ``job`` on every replica (again: the reason and actor are replaced).

    Raises:
        ConfigError: a job name, reason or actor that is too long or has control characters.
        StoreUnavailable: the store could not be reached: nothing changed, or the pause is
            written but the replicas were not told (the message says which); pausing again
            tells them.
    """
    if not isinstance(job, str) or not NAME_PATTERN.fullmatch(job):
        raise ConfigError(
            "expected a job name (letters, digits, '.', '_', '-'; at most 200)",
            option="name",
            value=str(job)[:80],
        )
    record = Pause(
        job=job,
        reason=_text(reason, "reason", REASON_MAX, job),
        by=_text(by, "by", ACTOR_MAX, job),
        since=datetime.now(UTC),
    )
    store.put_control(PAUSES, job, json.dumps(record.to_json()))
    log.warning("%s %s", job, record.describe())
    _log_change(
        store, Change(job=job, action="paused", by=record.by, at=record.since, reason=record.reason)
    )
    _announce(store, job, "paused")
    return record


def resume(store: Store, job: str, *, by: str) -> Pause | None:
    """Resume ``job``: its next occurrence runs. Returns the pause it ended (None: it was not
    paused).

    Raises:
        StoreUnavailable: the store could not be reached: nothing changed, or the pause is
            deleted but the replicas were not told (the message says which); resuming again
            tells them.
    """
    _text(by, "by", ACTOR_MAX, job)
    ended = pause_of(store, job)
    store.put_control(PAUSES, job, None)
    if ended is not None:
        log.warning("%s resumed by %s (%s)", job, by, ended.describe())
        _log_change(
            store,
            Change(job=job, action="resumed", by=by, at=datetime.now(UTC), reason=ended.reason),
        )
    _announce(store, job, "resumed")
    return ended


def _announce(store: Store, job: str, done: str) -> None:
    """Tell every replica that ``job``'s pause changed. A pause they are not told of is
    obeyed only from their next full read: the caller hears of it, and asking again (the
    same pause or resume) tells them."""
    try:
        FEED.announce(store, job)
    except StoreUnavailable as exc:
        raise StoreUnavailable(
            f"{job} is {done}, but the replicas are not told ({exc}); they see it within "
            f"{FULL_EVERY_MINUTES} minutes, or at once when this is asked again"
        ) from exc


def latest_paused(store: Store, pause: Pause) -> Occurrence | None:
    """The latest occurrence that ``pause`` held back (recorded ``skipped-paused`` with its
    reason: the records of one pause are known by it, whatever the replicas' clocks)."""
    said = pause.describe()
    held = [
        Occurrence.parse(r.occurrence_id)
        for r in store.history(pause.job, store.history_limit)
        if r.outcome == "skipped-paused" and r.reason == said
    ]
    return max(held, key=lambda o: o.scheduled_at, default=None)


def catch_up_key(occurrence: Occurrence) -> str:
    """The claim of the one catch-up run of a paused occurrence: ``catchup:<job>:<ms>``."""
    return keys.catch_up_key(occurrence.job, occurrence.epoch_ms)


def paused(store: Store) -> dict[str, Pause]:
    """Every paused job, in one round trip.

    Raises:
        StoreUnavailable: the store could not be reached.
    """
    read = store.controls(PAUSES, most=PAUSED_MOST, max_bytes=PAUSED_BYTES)
    return {job: _read(job, raw) for job, raw in read.items()}


def pauses_of(store: Store, jobs: Sequence[str]) -> dict[str, Pause]:
    """The pauses of those of ``jobs`` that are paused, in one round trip where the store
    can (a page of a listing).

    Raises:
        StoreUnavailable: the store could not be reached.
    """
    return {job: _read(job, raw) for job, raw in store.controls_of(PAUSES, jobs).items()}


def pause_of(store: Store, job: str) -> Pause | None:
    """``job``'s pause, if it is paused, in one read.

    Raises:
        StoreUnavailable: the store could not be reached.
    """
    raw = store.control(PAUSES, job)
    return None if raw is None else _read(job, raw)


def _moment(value: object, name: str) -> datetime:
    at = inbound.moment(value)
    if at is None:
        raise ValueError(f"{name} is no time with a zone from 1970 to 9999: {value!r:.80}")
    return at


def _read(job: str, raw: str) -> Pause:
    try:
        data = inbound.loads(raw)
        since = _moment(data["since"], "since")
        return Pause(
            job=job,
            reason=_text(data["reason"], "reason", REASON_MAX, job),
            by=_text(data["by"], "by", ACTOR_MAX, job),
            since=since,
        )
    except (ValueError, TypeError, KeyError, ConfigError) as exc:
        inbound.warn_once(
            log,
            PAUSES,
            job,
            raw,
            "the pause record of %.200r is unreadable (%.300s); the job stays paused",
            job,
            exc,
        )
        return Pause(
            job=job,
            reason="unreadable pause record",
            by="unknown",
            since=datetime.fromtimestamp(0, UTC),
        )
