"""The control records of a NATS store: one key of the ``<prefix>-state`` bucket per record
(``ctl.<group>.<key>``, each part encoded), read by group from the stream itself within a
reader's bounds; created with the server's create-only write, raised and replaced on the
revision read (no transactions: a batch is checked, then written key by key).
``NatsStore`` takes them from this mixin."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from cron_bridge.plumbing import inbound
from cron_bridge.stores import run_summary
from cron_bridge.stores.nats_link import bounded, dec, enc
from cron_bridge.stores.records import (
    CONTROL_KEY_MAX,
    CONTROLS_BYTES,
    CONTROLS_MAX,
    UNREADABLE,
    control_records,
)

__all__ = ["NatsControls"]

T = TypeVar("T")
_RAISE_TRIES = 5  # a record raised or replaced by several writers at once: reads before giving up


class NatsControls:
    """The control records of a NATS store (a mixin: it uses the store's link and bounds)."""

    _timeout: float

    if TYPE_CHECKING:  # the store's own, for the methods below

        def _run(self, make: Callable[[], Awaitable[T]], trips: int = 1, size: int = 1) -> T: ...

        @property
        def _js(self) -> Any: ...

        @property
        def _state(self) -> Any: ...

    def put_control(self, group: str, key: str, value: str | None) -> None:
        name = f"ctl.{enc(group)}.{enc(key)}"

        async def work() -> None:
            if value is None:
                await self._state.delete(name)
            else:
                await self._state.put(name, value.encode())

        self._run(work)

    def add_control(self, group: str, key: str, value: str) -> bool:
        from nats.js.errors import KeyWrongLastSequenceError

        name = f"ctl.{enc(group)}.{enc(key)}"

        async def work() -> bool:
            try:  # create: refused by the server when the key holds a value
                await self._state.create(name, value.encode())
            except KeyWrongLastSequenceError:
                return False
            return True

        return self._run(work)

    def raise_controls(self, group: str, values: Mapping[str, str], *, ceiling_ms: int) -> None:
        from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

        async def one(key: str, value: str) -> None:
            name = f"ctl.{enc(group)}.{enc(key)}"
            for _ in range(_RAISE_TRIES):  # each write conditional on the revision read
                try:
                    entry = await self._state.get(name)
                except KeyNotFoundError:
                    entry = None
                held = None if entry is None or entry.value is None else entry.value
                current = None if held is None else held.decode(errors="replace")
                if not run_summary.raised(current, value, ceiling_ms):
                    return
                try:
                    if entry is None or entry.revision is None:
                        await self._state.create(name, value.encode())
                    else:
                        await self._state.update(name, value.encode(), last=entry.revision)
                except KeyWrongLastSequenceError:
                    continue  # another writer raised it meanwhile: read again
                return

        async def work() -> None:
            await bounded(one(key, value) for key, value in values.items())

        if values:
            self._run(work, size=len(values))

    def replace_controls(self, group: str, values: Mapping[str, str]) -> list[str]:
        from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

        names = {key: f"ctl.{enc(group)}.{enc(key)}" for key in values}

        async def revision(key: str) -> int | None:
            try:
                entry = await self._state.get(names[key])
            except KeyNotFoundError:
                return None
            return None if entry.value is None else entry.revision

        async def one(key: str, last: int) -> str | None:
            """The key when it was deleted before it could be written; None once written."""
            for _ in range(_RAISE_TRIES):  # each write conditional on the revision read
                try:
                    await self._state.update(names[key], values[key].encode(), last=last)
                except KeyWrongLastSequenceError:
                    read = await revision(key)  # changed meanwhile: deleted, or replaced
                    if read is None:
                        return key
                    last = read
                    continue
                return None
            return key

        async def work() -> list[str]:
            # No transactions: every key checked first (none written when one is missing),
            # then each written on the revision read, so one deleted meanwhile is not
            # written again (the others are).
            keys = list(values)
            read = await bounded(revision(key) for key in keys)
            missing = [key for key, last in zip(keys, read, strict=True) if last is None]
            if missing:
                return sorted(missing)
            lost = await bounded(
                one(key, last) for key, last in zip(keys, read, strict=True) if last is not None
            )
            return sorted(key for key in lost if key is not None)

        return self._run(work, size=len(values)) if values else []

    def put_controls(self, group: str, values: Mapping[str, str]) -> None:
        if not values:
            return
        writes = {f"ctl.{enc(group)}.{enc(key)}": value.encode() for key, value in values.items()}

        async def work() -> None:  # sent together, each acknowledged
            await bounded(self._state.put(name, value) for name, value in writes.items())

        self._run(work, size=len(writes))

    def controls(
        self, group: str, *, most: int = CONTROLS_MAX, max_bytes: int = CONTROLS_BYTES
    ) -> dict[str, str]:
        pattern = f"ctl.{enc(group)}.*"

        async def work() -> tuple[dict[bytes, bytes | None], int]:
            # The keys the bucket holds now, from the stream itself: nats-py's watcher can
            # say "every current value delivered" before it delivered them (its marker races
            # the first messages under load), so the watch is read until each key was seen.
            kv: Any = self._state
            info = await self._js.stream_info(kv._stream, subjects_filter=kv._pre + pattern)
            expected = {subject[len(kv._pre) :] for subject in (info.state.subjects or {})}
            if not expected:
                return {}, 0
            watcher = await self._state.watch(pattern)
            found: dict[bytes, bytes | None] = {}
            seen: set[str] = set()
            removed: set[str] = set()  # keys whose last word is a delete or purge marker
            used = 0
            marked = False  # the watcher's own end marker: needed too, but not enough
            try:
                # Read until every key was seen, or the bounds are reached (what is left is
                # never held here: the watch stops).
                while not (marked and expected <= seen) and len(found) < most:
                    entry = await watcher.updates(timeout=self._timeout)
                    if entry is None:
                        marked = True
                        continue
                    seen.add(entry.key)
                    if entry.value is None or entry.operation is not None:
                        removed.add(entry.key)
                    else:
                        removed.discard(entry.key)
                    name = dec(entry.key.rpartition(".")[2])
                    if name is None or len(name) > CONTROL_KEY_MAX:
                        continue
                    value = entry.value
                    if value is not None and entry.operation is None:
                        fits = used + len(value) <= max_bytes
                        used += len(value) if fits else 0
                        found[name] = value if fits else None
                    else:  # deleted or purged since
                        found.pop(name, None)
            finally:
                await watcher.stop()
            # The stream keeps a subject for each removed key (its marker): not a record.
            return found, len(expected - removed)

        found, total = self._run(work)
        return control_records(found.items(), group, most=most, max_bytes=max_bytes, total=total)

    def control(self, group: str, key: str) -> str | None:
        async def work() -> bytes | None:
            from nats.js.errors import KeyNotFoundError

            try:
                entry = await self._state.get(f"ctl.{enc(group)}.{enc(key)}")
            except KeyNotFoundError:
                return None
            return None if entry.value is None else entry.value

        raw = self._run(work)
        if raw is None:
            return None
        found = inbound.text(raw, f"controls:{group}", key)
        return UNREADABLE if found is None else found
