"""The control records of a Redis store: one hash per group, read within a reader's bounds (a
script over ``HSCAN``), created one at a time or a batch all or none (a script), written many
groups at once (a pipeline); a group of the wrong type is read as it was last read and written
to never. ``RedisStore`` takes them from this mixin."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from cron_bridge.errors import StoreUnavailable
from cron_bridge.plumbing import inbound
from cron_bridge.stores.records import (
    CONTROL_KEY_MAX,
    CONTROLS_BYTES,
    CONTROLS_MAX,
    FIRST_KEYS_MAX,
    ORDERED_GROUPS,
    UNREADABLE,
    control_records,
)
from cron_bridge.stores.redis_link import Client, RedisLink, raw
from cron_bridge.stores.redis_pending import hash_tag
from cron_bridge.stores.redis_types import LastReads

__all__ = ["RedisControls", "order_key"]


_log = logging.getLogger(__name__)

INDEX_MADE_MOST = 100_000
"""The most names of a group whose ordered index a reader makes again (one script: Redis
serves no one else meanwhile). 100,000 take about 0.2 s; a million took 4 to 5 s, past
Redis's busy-script-time, so that every beat's claim was answered BUSY. A larger group
without its index is read whole, as before the index, and its index is left to its
writers."""


class RedisControls:
    """The control records of a Redis store (a mixin: it uses the store's link, keys and last
    reads)."""

    _link: RedisLink
    _last_reads: LastReads
    _host: str

    if TYPE_CHECKING:  # the store's own, for the methods below

        def _key(self, key: str) -> str: ...

    # A control write into a group of the wrong type is refused, not skipped: an operator's

    def add_control(self, group: str, key: str, value: str) -> bool:
        if group in ORDERED_GROUPS:
            return not self._write_group(group, {key: value}, (), mode="add")
        name = self._key(f"controls:{group}")
        added = self._link.call(
            lambda client: int(client.hsetnx(name, key, value)),
            key=name,
            holds="hash",
            otherwise=None,
        )
        if added is None:
            raise self._refused_write(name)
        return bool(added)

    def write_controls(self, writes: Mapping[str, Mapping[str, str | None]]) -> None:
        commands: list[tuple[str, Any, list[str]]] = []  # (hash, values to set, keys to delete)
        refused: list[str] = []  # groups of another type: written to never, the others written
        for group, values in writes.items():
            sets = {k: v for k, v in values.items() if v is not None}
            deletes = [k for k, v in values.items() if v is None]
            if group in ORDERED_GROUPS and (sets or deletes):  # with its index: a script
                if self._group_written(group, sets, deletes) is None:
                    refused.append(self._key(f"controls:{group}"))
            elif sets or deletes:
                commands.append((self._key(f"controls:{group}"), sets, deletes))
        names = [
            name for name, sets, deletes in commands for _ in range(bool(sets) + bool(deletes))
        ]

        def work(client: Client) -> list[Any]:
            pipe = client.pipeline(transaction=False)
            for name, sets, deletes in commands:
                if sets:
                    pipe.hset(name, mapping=sets)
                if deletes:
                    pipe.hdel(name, *deletes)
            return self._link.replies(client, pipe, names, "hash")

        if commands:
            replies = self._link.call(work, pipelines=1, commands=0)
            refused += [name for name, reply in zip(names, replies, strict=True) if reply is None]
        if refused:
            raise self._refused_write(refused[0])

    def add_controls(self, group: str, values: Mapping[str, str]) -> list[str]:
        return self._write_group(group, values, (), mode="add") if values else []

    def put_controls(self, group: str, values: Mapping[str, str]) -> None:
        if values and group in ORDERED_GROUPS:
            self._write_group(group, values, ())
        elif values:
            name = self._key(f"controls:{group}")
            mapping: Any = dict(values)  # redis-py's stubs want an invariant key type
            done = self._link.call(
                lambda client: client.hset(name, mapping=mapping) >= 0,
                key=name,
                holds="hash",
                otherwise=False,
            )
            if not done:
                raise self._refused_write(name)

    def replace_controls(self, group: str, values: Mapping[str, str]) -> list[str]:
        return self._write_group(group, values, (), mode="replace") if values else []

    def _write_group(
        self,
        group: str,
        sets: Mapping[str, str],
        deletes: Sequence[str],
        *,
        mode: str = "put",
    ) -> list[str]:
        """Set and delete records of a group (and its index, when it is ordered) in one
        script; ``add``: create them all or none, ``replace``: replace them all or none. The
        keys that existed (``add``) or did not (``replace``), sorted.

        Raises:
            StoreUnavailable: the group's key holds another type (nothing written), or the
                store could not be reached.
        """
        found = self._group_written(group, sets, deletes, mode=mode)
        if found is None:
            raise self._refused_write(self._key(f"controls:{group}"))
        return found

    def _group_written(
        self,
        group: str,
        sets: Mapping[str, str],
        deletes: Sequence[str],
        *,
        mode: str = "put",
    ) -> list[str] | None:
        """``_write_group``, None when the group's key holds another type."""
        flat = [item for pair in sets.items() for item in pair]
        args = [mode, len(sets), *flat, *deletes]
        keys = [self._key(f"controls:{group}")]
        if group in ORDERED_GROUPS:
            keys.append(self._order_key(group))
        found = self._link.call(
            lambda client: self._link.run_script(client, "write_group", keys, args)
        )
        if int(found[0]) == 0:
            return None
        return sorted(bytes(key).decode(errors="replace") for key in found[1:])

    def _order_key(self, group: str) -> str:
        return order_key(self._key(""), group)

    def _refused_write(self, name: str) -> StoreUnavailable:
        return StoreUnavailable(
            f"redis: the key {name!r} is not a hash (another program's key, "
            "or a hostile one): nothing was written; delete it to repair",
            host=self._host,
        )

    def controls(
        self, group: str, *, most: int = CONTROLS_MAX, max_bytes: int = CONTROLS_BYTES
    ) -> dict[str, str]:
        bounds = [most, max_bytes, inbound.MAX_BYTES, CONTROL_KEY_MAX]
        name = self._key(f"controls:{group}")
        found = self._link.call(
            lambda client: self._link.run_script(client, "controls", [name], bounds),
            key=name,
            holds="hash",
        )
        if found is None:  # of the wrong type: as it was last read (a pause stays paused)
            return self._last_reads.get(group)
        pairs = zip(found[1::2], found[2::2], strict=True)
        read = control_records(pairs, group, most=most, max_bytes=max_bytes, total=int(found[0]))
        self._last_reads.keep(group, read, max_bytes)
        return read

    def control_keys(self, group: str, *, most: int = CONTROLS_MAX) -> list[str]:
        name = self._key(f"controls:{group}")
        found = self._link.call(
            lambda client: self._link.run_script(
                client, "control_keys", [name], [most, CONTROL_KEY_MAX]
            ),
            key=name,
            holds="hash",
        )
        if found is None:  # of the wrong type: as it was last read
            return sorted(self._last_reads.get(group))
        return sorted(_unpacked(found, f"controls:{group}"))

    def first_control_keys(
        self, group: str, count: int, *, most: int = CONTROLS_MAX
    ) -> tuple[list[str], int]:
        if group not in ORDERED_GROUPS:
            keys = self.control_keys(group, most=most)
            return keys[: max(count, 0)], len(keys)
        name = self._key(f"controls:{group}")
        made_most = min(most, INDEX_MADE_MOST)
        args = [min(max(count, 0), FIRST_KEYS_MAX), CONTROL_KEY_MAX, made_most]
        found = self._link.call(
            lambda client: self._link.run_script(
                client, "first_keys", [name, self._order_key(group)], args
            ),
            key=name,
            holds="hash",
        )
        if found is None:  # of the wrong type: as it was last read
            last = sorted(self._last_reads.get(group))
            return last[: max(count, 0)], len(last)
        if not isinstance(found, list) or len(found) != 3 or not isinstance(found[0], int):
            # more than ``made_most`` fields without an index to read them by: read whole
            keys = self.control_keys(group, most=most)
            return keys[: max(count, 0)], len(keys)
        return _unpacked(found, f"controls:{group}"), max(found[0], 0)

    def controls_of(self, group: str, keys: Sequence[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        name = self._key(f"controls:{group}")
        values = self._link.call(
            lambda client: raw(client, "HMGET", name, *wanted), key=name, holds="hash"
        )
        if values is None:  # of the wrong type: as it was last read
            last = self._last_reads.get(group)
            return {key: last[key] for key in wanted if key in last}
        found = {}
        for key, value in zip(wanted, values, strict=True):
            if value is not None:
                text = inbound.text(value, f"controls:{group}", key)
                found[key] = UNREADABLE if text is None else text
        return found

    def control(self, group: str, key: str) -> str | None:
        name = self._key(f"controls:{group}")
        value = self._link.call(
            lambda client: raw(client, "HGET", name, key),
            key=name,
            holds="hash",
            otherwise=self._last_reads.value(group, key),
        )
        if value is None:
            return None
        if isinstance(value, str):  # as the group was last read
            return value
        found = inbound.text(value, f"controls:{group}", key)
        return UNREADABLE if found is None else found


def order_key(prefix: str, group: str) -> str:
    """The ordered index of ``group``'s keys (``ORDERED_GROUPS``), in the group's own Redis
    Cluster slot (a script writes both): ``<prefix>controls-order:{<prefix>controls:<group>}``,
    whose hash tag is the group's whole name, or ``<prefix>controls-order:<group>`` where the
    prefix has a hash tag of its own, which then decides both slots (as ``fence_key``)."""
    if hash_tag(prefix):
        return f"{prefix}controls-order:{group}"
    return f"{prefix}controls-order:{{{prefix}controls:{group}}}"


def _unpacked(found: list[Any], where: str) -> list[str]:
    """The names ``control_keys.lua`` packed: their lengths, then their bytes one after
    another; a name that is not UTF-8 is warned once and left out."""
    lengths, blob = found[1:3] if isinstance(found, list) and len(found) == 3 else (b"", b"")
    if not isinstance(lengths, bytes) or not isinstance(blob, bytes):
        lengths, blob = b"", b""
    try:
        sizes = [int(size) for size in lengths.split(b",")] if lengths else []
    except ValueError:
        sizes = [-1]
    if any(size < 0 for size in sizes) or sum(sizes) != len(blob):
        # not what the script packs: a server that is not Redis
        inbound.warn_once(_log, where, "", lengths, "skipping unreadable names in %s", where)
        return []
    ends = list(accumulate(sizes))
    starts = [0, *ends[:-1]] if ends else []
    if blob.isascii():  # then a character is a byte: one decode, and slices of it
        text = blob.decode()
        return [text[start:end] for start, end in zip(starts, ends, strict=True)]
    names = (
        inbound.text(blob[start:end], where, blob[start:end], max_bytes=CONTROL_KEY_MAX)
        for start, end in zip(starts, ends, strict=True)
    )
    return [name for name in names if name is not None]
