"""The control records of a Redis store: one hash per group, read within a reader's bounds (a
script over ``HSCAN``), created one at a time or a batch all or none (a script), written many
groups at once (a pipeline); a group of the wrong type is read as it was last read and written
to never. ``RedisStore`` takes them from this mixin."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cron_bridge.errors import StoreUnavailable
from cron_bridge.plumbing import inbound
from cron_bridge.stores.records import (
    CONTROL_KEY_MAX,
    CONTROLS_BYTES,
    CONTROLS_MAX,
    UNREADABLE,
    control_records,
)
from cron_bridge.stores.redis_link import Client, RedisLink, raw
from cron_bridge.stores.redis_types import LastReads

__all__ = ["RedisControls"]


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
        for group, values in writes.items():
            sets = {k: v for k, v in values.items() if v is not None}
            deletes = [k for k, v in values.items() if v is None]
            if sets or deletes:
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

        if not commands:
            return
        replies = self._link.call(work, pipelines=1, commands=0)
        refused = [name for name, reply in zip(names, replies, strict=True) if reply is None]
        if refused:
            raise self._refused_write(refused[0])

    def add_controls(self, group: str, values: Mapping[str, str]) -> list[str]:
        if not values:
            return []
        name = self._key(f"controls:{group}")
        flat = [item for pair in values.items() for item in pair]
        found = self._link.call(
            lambda client: self._link.run_script(client, "add_controls", [name], flat)
        )
        if int(found[0]) == 0:
            raise self._refused_write(name)
        return sorted(bytes(key).decode(errors="replace") for key in found[1:])

    def put_controls(self, group: str, values: Mapping[str, str]) -> None:
        if values:
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
        # The bounded read of ``controls`` with no bytes for values: names only.
        bounds = [most, 0, 0, CONTROL_KEY_MAX]
        name = self._key(f"controls:{group}")
        found = self._link.call(
            lambda client: self._link.run_script(client, "controls", [name], bounds),
            key=name,
            holds="hash",
        )
        if found is None:  # of the wrong type: as it was last read
            return sorted(self._last_reads.get(group))
        where = f"controls:{group}"
        keys = (inbound.text(k, where, k, max_bytes=CONTROL_KEY_MAX) for k in found[1::2])
        return sorted(key for key in keys if key is not None)

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
