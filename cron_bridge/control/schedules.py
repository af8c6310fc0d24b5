"""Schedules as data: jobs added, changed and removed at run time, kept in the store and run
by every replica, for a task the workers already know by name.

A stored schedule is a control record (group ``schedule``, key its name) holding its spec as
JSON (``schedule_spec``, validated exactly as ``@cluster_task`` validates a declaration before
anything is written). Every change is also announced in the schedules' change feed
(``schedule-feed``, ``control.feed``), which every replica follows once a second: a change is
followed within about a second, and an occurrence already claimed under the old spec is not
affected (the claim key is the job and the scheduled time, whatever the spec).

Many are added, changed and removed at once with ``add_many``, ``update_many`` and
``remove_many``: every entry checked as one would be (``control.bulk``) before anything is
written, then written a few thousand a round trip.

The beat enqueues a stored schedule's occurrences to its queue library's *stored-schedule
task* (the adapter's ``stored_task``: ``cron_bridge_rq.stored.run_stored``,
``cron_bridge.stored`` for Celery, ``cron_bridge_stored`` for Dramatiq), which reads the spec
on the worker and runs the named task under the same guard as a decorated job.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Unpack

from cron_bridge.control import pause as control
from cron_bridge.control.bulk import (
    BULK,
    checked_adds,
    checked_names,
    checked_updates,
    stored_only,
)
from cron_bridge.control.feed import Feed
from cron_bridge.control.schedule_spec import (
    LIBRARIES,
    SPEC_MAX,
    ScheduleEntry,
    StoredChanges,
    changed,
    check_storable,
    spec_from,
    stored_json,
    summary,
)
from cron_bridge.errors import ConfigError, StoreUnavailable
from cron_bridge.jobs import Backoff
from cron_bridge.options import StoredOptions
from cron_bridge.plumbing import inbound
from cron_bridge.stores.base import Store

__all__ = [
    "BULK",
    "FEED",
    "FEED_GROUP",
    "LIBRARIES",
    "SPEC_MAX",
    "ScheduleEntry",
    "StoredSchedules",
    "announce",
    "feed_head",
]

log = logging.getLogger(__name__)

GROUP = "schedule"
FEED_GROUP = "schedule-feed"
FEED = Feed(FEED_GROUP)  # followed by every replica (cron_bridge.beat.stored_sync)
FULL_EVERY_MINUTES = 10  # how often replicas read every schedule (cron_bridge.beat.stored_sync)
# Every schedule must be read, or it does not run: a reader holds up to a million of them (a
# tenant's is a few hundred bytes); one past the bytes is read unreadable, and warned about.
SCHEDULES_MOST = 1_000_000
SCHEDULES_BYTES = 512 * 1024 * 1024


class StoredSchedules:
    """Stored schedules in ``store``: add, update, remove, list. Every change is validated
    before anything is written, and goes to the schedule's change log (who, when, what)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def add(
        self,
        name: str,
        *,
        task: str,
        library: str,
        by: str = "python",
        args: list[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        queue: str | None = None,
        backoff: Backoff | dict[str, Any] | None = None,
        **options: Unpack[StoredOptions],
    ) -> ScheduleEntry:
        """Store a new schedule (``cron=``, ``every=`` or ``at=``, and the options of
        ``@cluster_task``); every replica runs it from its next occurrence on.

        Raises:
            ConfigError: a bad option (nothing is written), or a schedule of that name exists.
            StoreUnavailable: the store could not be reached; nothing changed.
        """
        spec = self.check(
            name,
            task=task,
            library=library,
            args=args,
            kwargs=kwargs,
            queue=queue,
            backoff=backoff,
            **options,
        )  # validates, naming the option, before anything is written
        self._write(spec, by=by, action="schedule added", create=True)
        return spec

    def check(
        self,
        name: str,
        *,
        task: str,
        library: str,
        args: list[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        queue: str | None = None,
        backoff: Backoff | dict[str, Any] | None = None,
        **options: Unpack[StoredOptions],
    ) -> ScheduleEntry:
        """What ``add`` would store, checked as ``add`` checks it, without writing anything
        (an import's dry run).

        Raises:
            ConfigError: what ``add`` would refuse, naming the option.
        """
        spec = spec_from(
            name,
            task=task,
            library=library,
            args=args,
            kwargs=kwargs,
            queue=queue,
            backoff=backoff,
            **options,
        )
        spec.job()
        check_storable(spec)
        return spec

    def add_many(
        self, entries: Iterable[Mapping[str, Any]], *, by: str = "python"
    ) -> list[ScheduleEntry]:
        """Store many new schedules at once (a signup service's tenants, an import). Each
        entry is what ``add`` takes, as a mapping: ``name``, ``task``, ``library``, and
        ``args``, ``kwargs``, ``queue``, ``backoff`` and the options when given. Every entry
        is checked as ``add`` checks it before anything is written; then ``BULK`` of them are
        written at a time, each batch all or nothing in one round trip (``add_controls``),
        its change logs in one more and its feed entries in one or two.

        Raises:
            ConfigError: a bad entry, naming it (``entry``), the option and the value, or two
                entries of one name (nothing is written); or a batch with a name already
                stored (that batch and the ones after it are not written: the message says
                how many were).
            StoreUnavailable: the store could not be reached (the batches before are
                written: the message says how many).
        """
        checked = checked_adds(entries)
        specs = [spec for spec, _ in checked]
        added = 0
        for start in range(0, len(checked), BULK):
            batch = checked[start : start + BULK]
            with _counted(added, len(specs), "added"):
                taken = self.store.add_controls(GROUP, {spec.name: raw for spec, raw in batch})
            if taken:
                error = ConfigError(
                    f"stored schedules of these names exist; update them ({added} of "
                    f"{len(specs)} added before this batch of {len(batch)}, which is not)",
                    job=taken[0],
                    option="name",
                    value=", ".join(taken[:5]) + (", ..." if len(taken) > 5 else ""),
                )
                at = {spec.name: index for index, (spec, _) in enumerate(batch, start)}
                error.entry = at.get(taken[0])
                raise error
            added += len(batch)
            with _counted(added, len(specs), "added"):
                self._logged_and_announced(
                    {spec.name: summary(spec) for spec, _ in batch}, by=by, action="schedule added"
                )
        return specs

    def update_many(
        self, changes: Iterable[Mapping[str, Any]], *, by: str = "python"
    ) -> list[ScheduleEntry]:
        """Change many stored schedules at once. Each entry is a mapping of the schedule's
        ``name`` and the fields to change, as ``update`` takes them (an option given as None
        is dropped). Every entry is checked as ``update`` checks it (the schedule must exist;
        a new task is asked of the allow-list) before anything is written, reading ``BULK``
        schedules a round trip; then ``BULK`` of them are written at a time, each batch in one
        round trip (``replace_controls``: one transaction on PostgreSQL and SQLite, one script
        on Redis; on NATS checked, then written record by record), its change logs in one more
        and its feed entries in one or two. A schedule removed by someone else since it was
        read is not written again: its batch is refused whole (``ConfigError`` naming it; on
        NATS, which has no transactions, the others of the batch may be written: they are
        announced and logged as any update, and the message counts them).

        Returns:
            The schedules as stored now, in the order given.

        Raises:
            ConfigError: a bad entry, naming it (``entry``), the option and the value; a name
                that is not stored; or two entries of one name (nothing is written). A name
                removed since it was read (the batches before it are written: the message
                says how many).
            StoreUnavailable: the store could not be reached (the batches before are
                written: the message says how many).
        """
        checked = checked_updates(changes, self.get_many)
        updated = 0
        for start in range(0, len(checked), BULK):
            batch = checked[start : start + BULK]
            with _counted(updated, len(checked), "updated"):
                gone = self.store.replace_controls(
                    GROUP, {spec.name: raw for spec, raw, _ in batch}
                )
            if gone:
                written = self._written_of(batch, gone, by=by, done=updated, total=len(checked))
                refused = ConfigError(
                    f"no stored schedule of this name: removed since it was read, and not "
                    f"written again ({updated} of {len(checked)} schedule(s) updated before "
                    f"its batch{f', {written} of its batch' if written else ''})",
                    job=gone[0],
                    option="name",
                    value=gone[0],
                )
                refused.entry = start + [spec.name for spec, _, _ in batch].index(gone[0])
                raise refused
            updated += len(batch)
            with _counted(updated, len(checked), "updated"):
                self._logged_and_announced(
                    {spec.name: said for spec, _, said in batch}, by=by, action="schedule updated"
                )
        return [spec for spec, _, _ in checked]

    def _written_of(
        self,
        batch: Sequence[tuple[ScheduleEntry, str, str]],
        gone: Sequence[str],
        *,
        by: str,
        done: int,
        total: int,
    ) -> int:
        """Of a refused batch (``gone`` removed since read), how many were written all the
        same, announced and logged as any update is: none where the store writes a batch all
        or none (``atomic_batches``); on NATS, which has no transactions, the others of the
        batch that hold what this update wrote (read back in one round trip)."""
        lost = set(gone)
        rest = [(spec, raw, said) for spec, raw, said in batch if spec.name not in lost]
        if not rest or self.store.atomic_batches:  # nothing of it was written
            return 0
        with _counted(done, total, "updated"):
            now = self.store.controls_of(GROUP, [spec.name for spec, _, _ in rest])
        written = {spec.name: said for spec, raw, said in rest if now.get(spec.name) == raw}
        if written:
            with _counted(done + len(written), total, "updated"):
                self._logged_and_announced(written, by=by, action="schedule updated")
        return len(written)

    def remove_many(
        self, names: Iterable[str], *, by: str = "python"
    ) -> dict[str, ScheduleEntry | None]:
        """Stop running many stored schedules on every replica. A name that is not stored
        (or whose schedule cannot be read) is left as ``remove`` leaves it, and said (None); a
        name given twice is removed once. ``BULK`` names at a time: their schedules read in
        one round trip, deleted in one more (one transaction on PostgreSQL and SQLite, one
        ``HDEL`` on Redis; on NATS record by record), their change logs in one more and their
        feed entries in one or two.

        Returns:
            Each name given, once, in order: the schedule removed, or None when there was none.

        Raises:
            ConfigError: a name that is not text, naming its entry (nothing is removed).
            StoreUnavailable: the store could not be reached (the batches before are
                removed: the message says how many).
        """
        wanted = checked_names(names)
        removed: dict[str, ScheduleEntry | None] = dict.fromkeys(wanted)
        done = 0
        for start in range(0, len(wanted), BULK):
            found = self.get_many(stored_only(wanted[start : start + BULK]))
            if not found:
                continue
            with _counted(done, len(wanted), "removed"):
                self.store.write_controls({GROUP: dict.fromkeys(found)})
            removed.update(found)
            done += len(found)
            with _counted(done, len(wanted), "removed"):
                self._logged_and_announced(
                    {name: summary(spec) for name, spec in found.items()},
                    by=by,
                    action="schedule removed",
                )
        return removed

    def _logged_and_announced(self, summaries: Mapping[str, str], *, by: str, action: str) -> None:
        """The feed names the schedules first (every replica follows them within a second,
        whatever comes next), then each one's change log gets its entry, in one write, as
        ``update`` and ``remove`` do it for one.

        Raises:
            StoreUnavailable: the change logs could not be written (the schedules are, and
                the replicas told, or told within ``FULL_EVERY_MINUTES``).
        """
        try:
            FEED.announce_many(self.store, list(summaries))
        except StoreUnavailable as exc:  # written: every replica sees them at its next full read
            log.warning(
                "%d stored schedule(s) changed, but the replicas are not told (%s); they "
                "see them within %d minutes",
                len(summaries),
                exc,
                FULL_EVERY_MINUTES,
            )
        now = datetime.now(UTC)
        self.store.write_controls(
            {
                control.CHANGES.format(job=name): {
                    control.change_key(): json.dumps(
                        control.Change(
                            job=name,
                            action=action,
                            by=by,
                            at=now,
                            reason=said[: control.REASON_MAX],
                        ).to_json()
                    )
                }
                for name, said in summaries.items()
            }
        )

    def update(
        self, name: str, *, by: str = "python", **changes: Unpack[StoredChanges]
    ) -> ScheduleEntry:
        """Change some of a stored schedule's fields (an option given as None is dropped).

        Raises:
            ConfigError: no such schedule, or a bad value (nothing is written).
            StoreUnavailable: the store could not be reached; nothing changed.
        """
        current = self.get(name)
        if current is None:
            raise ConfigError(
                "no stored schedule of this name", job=name, option="name", value=name
            )
        spec = changed(current, changes)
        spec.job()
        if (spec.library, spec.task) != (current.library, current.task):
            check_storable(spec)  # a new name is checked as when added
        self._write(
            spec,
            by=by,
            action="schedule updated",
            reason=f"{summary(current)} -> {summary(spec)}",
        )
        return spec

    def remove(self, name: str, *, by: str = "python") -> ScheduleEntry | None:
        """Stop running a stored schedule on every replica; the one removed, if any."""
        current = self.get(name)
        if current is None:
            return None
        self.store.put_control(GROUP, name, None)
        self._announce(name)
        control.log_change(self.store, name, "schedule removed", by=by, reason=summary(current))
        return current

    def get(self, name: str) -> ScheduleEntry | None:
        """One stored schedule (one store read: what a worker does for each delivery); None
        when there is none or it cannot be read."""
        raw = self.store.control(GROUP, name)
        return None if raw is None else _read(name, raw)

    def names(self) -> list[str]:
        """The names of every stored schedule, sorted, without reading the schedules (a page
        of a listing picks its names from them)."""
        return self.store.control_keys(GROUP, most=SCHEDULES_MOST)

    def first_names(self, count: int) -> tuple[list[str], int]:
        """The first ``count`` names of the stored schedules, sorted, and how many there are:
        a listing's first pages, read without the other names where the store can (SQL, and
        Redis's ordered index of the names)."""
        return self.store.first_control_keys(GROUP, count, most=SCHEDULES_MOST)

    def stored_of(self, names: Sequence[str]) -> set[str]:
        """Those of ``names`` that are stored schedules (readable or not), in one round trip
        where the store can."""
        return set(self.store.controls_of(GROUP, names)) if names else set()

    def get_many(self, names: Sequence[str]) -> dict[str, ScheduleEntry]:
        """Those of ``names`` that are stored schedules and can be read, in one round trip
        where the store can (an unreadable one is logged and left out)."""
        found = {}
        for name, raw in self.store.controls_of(GROUP, names).items():
            spec = _read(name, raw)
            if spec is not None:
                found[name] = spec
        return found

    def list(self) -> dict[str, ScheduleEntry]:
        """Every stored schedule that can be read (an unreadable one is logged and left out)."""
        return {spec.name: spec for spec in self.each()}

    def each(self) -> Iterator[ScheduleEntry]:
        """Every stored schedule that can be read, one at a time: what a replica makes of
        each is kept, the spec and its text need not be (a million of them at once would be
        gigabytes)."""
        read = self.store.controls(GROUP, most=SCHEDULES_MOST, max_bytes=SCHEDULES_BYTES)
        while read:
            name, raw = read.popitem()
            spec = _read(name, raw)
            if spec is not None:
                yield spec

    def _write(
        self,
        spec: ScheduleEntry,
        *,
        by: str,
        action: str,
        reason: str | None = None,
        create: bool = False,
    ) -> None:
        """Write ``spec``; with ``create``, only if no schedule has its name (of two
        concurrent adds one wins, the other is told)."""
        raw = stored_json(spec)
        if not create:
            if self.store.replace_controls(GROUP, {spec.name: raw}):
                raise ConfigError(
                    "no stored schedule of this name: removed since it was read; nothing "
                    "was written",
                    job=spec.name,
                    option="name",
                    value=spec.name,
                )
        elif not self.store.add_control(GROUP, spec.name, raw):
            raise ConfigError(
                "a stored schedule of this name exists; update it",
                job=spec.name,
                option="name",
                value=spec.name,
            )
        self._announce(spec.name)
        said = summary(spec) if reason is None else reason
        control.log_change(self.store, spec.name, action, by=by, reason=said[: control.REASON_MAX])

    def _announce(self, name: str) -> None:
        try:
            announce(self.store, name)
        except StoreUnavailable as exc:  # written: every replica sees it at its next full read
            log.warning(
                "stored schedule %s changed, but the replicas are not told (%s); they "
                "see it within %d minutes",
                name,
                exc,
                FULL_EVERY_MINUTES,
            )


@contextmanager
def _counted(done: int, total: int, verb: str) -> Iterator[None]:
    """A store failure within, saying how many of the ``total`` schedules were ``verb``
    (written) before it."""
    try:
        yield
    except StoreUnavailable as exc:
        raise StoreUnavailable(f"{exc} ({done} of {total} schedule(s) {verb} before it)") from exc


def _read(name: str, raw: str) -> ScheduleEntry | None:
    """The schedule a record holds; None, warned once, when it cannot be read (written by
    something else, damaged, or hostile: nested, huge, of the wrong types)."""
    try:
        spec = ScheduleEntry.from_json(inbound.loads(raw, max_bytes=SPEC_MAX))
        if spec.name != name:
            raise ValueError(f"it is kept under another name, {spec.name!r:.200}")
        spec = replace(spec, name=name)  # the key's text: one copy of the name, not two
    except (TypeError, ValueError) as exc:
        inbound.warn_once(
            log,
            GROUP,
            name,
            raw,
            "the stored schedule %.200r is unreadable (%.300s); skipped",
            name,
            exc,
        )
        return None
    return spec


def announce(store: Store, name: str) -> int:
    """Append ``name`` to the schedules' feed; the number it got.

    Raises:
        StoreUnavailable: the store could not be reached (the change itself is written: every
            replica sees it at its next full read).
    """
    return FEED.announce(store, name)


def feed_head(store: Store) -> int:
    """The schedules' feed's last number, as its ``head`` hint says (0 for none or a bad one)."""
    return FEED.head(store)
