"""The control records every store keeps (the part of the ``Store`` contract they make up):
small JSON records by group and key (pauses, stored schedules, their feeds and change logs,
the dashboard's catalog and run summaries), set, created, replaced and raised one at a time or
a batch at once, read by group within a reader's bounds, by keys, or a listing's first keys in
order. The defaults here are the steps a store without a better way takes; each store
overrides what it can do in one round trip (``redis_controls``, ``postgres_controls``,
``sqlite_controls``, ``nats_controls``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import ClassVar

from cron_bridge.stores import run_summary
from cron_bridge.stores.records import CONTROLS_BYTES, CONTROLS_MAX

__all__ = ["ControlRecords"]


class ControlRecords(ABC):
    """The control records of a store (``Store`` is one)."""

    atomic_batches: ClassVar[bool] = False
    """Whether ``add_controls`` and ``replace_controls`` write a batch all or none, even when
    another writer changes one of its records meanwhile (a transaction, or one script): then
    a refused batch wrote nothing. Where not (NATS, and the defaults here), the others of a
    refused batch may be written."""

    @abstractmethod
    def put_control(self, group: str, key: str, value: str | None) -> None:
        """Set the control record ``key`` of ``group`` to ``value`` (JSON text), or delete it
        with None."""

    def put_controls(self, group: str, values: Mapping[str, str]) -> None:
        """Set several control records of ``group`` at once: one round trip where the store
        can (a dashboard catalog of thousands of jobs), else one per record."""
        for key, value in values.items():
            self.put_control(group, key, value)

    @abstractmethod
    def add_control(self, group: str, key: str, value: str) -> bool:
        """Create the control record ``key`` of ``group`` with ``value`` unless it exists.

        Atomic: of concurrent callers for one key at most one gets True, and a record that
        exists is left as it is (False). A deleted record can be created again.
        """

    def write_controls(self, writes: Mapping[str, Mapping[str, str | None]]) -> None:
        """Set (or, with None, delete) control records of several groups, ``{group: {key:
        value}}``: in one round trip where the store can (the change logs of a batch of
        stored schedules), not necessarily at once. Where the store has transactions, what
        it sets in one group is set at once and what it deletes is deleted at once (memory,
        SQLite, PostgreSQL: one transaction; Redis: one ``HSET`` and one ``HDEL`` per group):
        a batch of stored schedules is written whole or not at all. This default, for a
        store without them, writes record by record.

        Raises:
            StoreUnavailable: the store could not be reached (some may be written).
        """
        for group, values in writes.items():
            for key, value in values.items():
                self.put_control(group, key, value)

    def add_controls(self, group: str, values: Mapping[str, str]) -> list[str]:
        """Create the control records ``values`` of ``group``, all of them or none: when any
        of their keys exists, nothing is written and those keys are returned (sorted); an
        empty list when every record was written. One round trip where the store can.

        Atomic where the store has transactions (memory, SQLite, PostgreSQL, Redis: one
        script on one hash). This default, for a store without them, checks, then creates
        each, and deletes what it created when another writer won a key meanwhile.

        Raises:
            StoreUnavailable: the store could not be reached (on this default, some of the
                records may be left written).
        """
        taken = sorted(self.controls_of(group, list(values)))
        if taken:
            return taken
        made: list[str] = []
        for key, value in values.items():
            if not self.add_control(group, key, value):
                for undone in made:
                    self.put_control(group, undone, None)
                return [key]
            made.append(key)
        return []

    def replace_controls(self, group: str, values: Mapping[str, str]) -> list[str]:
        """Replace the control records ``values`` of ``group``, all of them or none: when any
        of their keys does not exist, nothing is written and those keys are returned (sorted);
        an empty list when every record was replaced. One round trip where the store can: an
        update never brings back a record deleted since it was read.

        Atomic where the store has transactions (memory, SQLite, PostgreSQL, Redis: one
        script on one hash; NATS writes each on the revision it read, so a record deleted
        meanwhile is not written, and the others are). This default, for a store without
        either, checks, then writes: a record deleted between the two is written again.

        Raises:
            StoreUnavailable: the store could not be reached (on this default, some of the
                records may be left written).
        """
        missing = sorted(set(values) - set(self.controls_of(group, list(values))))
        if not missing:
            self.put_controls(group, values)
        return missing

    def raise_controls(self, group: str, values: Mapping[str, str], *, ceiling_ms: int) -> None:
        """Write each of ``values`` (run summaries' entries, which only go up) where its key
        is absent or holds an entry before it, one scheduled after ``ceiling_ms``, or text of
        another shape (``run_summary.raised``). One round trip where the store can, and
        atomic per key where it can.

        This default reads, then writes the greater ones: a raise by another writer in
        between can be undone (the job's next record mends it).

        Raises:
            StoreUnavailable: the store could not be reached.
        """
        if values:
            current = self.controls_of(group, list(values))
            greater = run_summary.keep_greatest(values, current, ceiling_ms)
            if greater:
                self.write_controls({group: greater})

    @abstractmethod
    def controls(
        self, group: str, *, most: int = CONTROLS_MAX, max_bytes: int = CONTROLS_BYTES
    ) -> dict[str, str]:
        """The control records of ``group``, by key, in one round trip: at most ``most`` of
        them and ``max_bytes`` of their values, read no further than that where the server
        can (``control_records``: a value it cannot hand over is ``UNREADABLE``)."""

    @abstractmethod
    def control(self, group: str, key: str) -> str | None:
        """One control record of ``group``, or None (a worker reading one stored schedule);
        ``UNREADABLE`` when there is one that cannot be handed over."""

    def control_keys(self, group: str, *, most: int = CONTROLS_MAX) -> list[str]:
        """The keys of ``group``'s control records, sorted, without their values where the
        store can (a page of stored schedules picked by name). At most ``most`` of them:
        which, when the group holds more, is the store's choice.

        Raises:
            StoreUnavailable: the store could not be reached.
        """
        return sorted(self.controls(group, most=most))

    def first_control_keys(
        self, group: str, count: int, *, most: int = CONTROLS_MAX
    ) -> tuple[list[str], int]:
        """The first ``count`` keys of ``group``'s control records in code-point order (as
        Python sorts text), and how many records the group holds: a listing's first pages,
        read without the rest of the group where the store can (SQL: an ordered read with a
        limit; Redis: an ordered index kept beside the group). Where the store reads the whole
        group (this default: ``control_keys``), at most ``most`` keys of it.

        Raises:
            StoreUnavailable: the store could not be reached.
        """
        keys = self.control_keys(group, most=most)
        return keys[: max(count, 0)], len(keys)

    def controls_of(self, group: str, keys: Sequence[str]) -> dict[str, str]:
        """The control records of ``group`` with those ``keys`` that exist, in one round trip
        where the store can (a page's pauses and stored schedules); ``UNREADABLE`` for one
        that cannot be handed over.

        Raises:
            StoreUnavailable: the store could not be reached.
        """
        found = {}
        for key in dict.fromkeys(keys):
            value = self.control(group, key)
            if value is not None:
                found[key] = value
        return found
