"""The NATS store's pending sends (``Store.claim_many``'s pending flags, ``settle_many``,
``take_over``): keys ``pend.<claim key>`` of the namespace's keys bucket, each naming its
holder and the end of its lease (``{"o": owner, "x": epoch ms}``), written and taken over
with revision-checked writes like a lock; and ``setl.<claim key>``, who settled it, kept as
long as the claim and out of the takeover's scan.

A settle writes its marker first, then removes ``pend.<claim key>`` at the revision it read,
so that a takeover between the two is seen, and its marker taken back; a marker naming
another replica while ``pend.<claim key>`` names this owner is an earlier holder's that never
got to the removal, and is written over. A removal is a delete marker that lives
``SETTLED_KEPT``: JetStream writes a removal to disk only at its next sync (every two minutes
by default), so a server killed within that time would bring back what was removed since.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from typing import Any, Protocol

from cron_bridge.errors import StoreUnavailable
from cron_bridge.jobs import CLAIM_TTL
from cron_bridge.plumbing import inbound
from cron_bridge.stores.base import ttl_ms
from cron_bridge.stores.nats_link import bounded, dec, enc, expires

__all__ = ["MISSING_WAIT", "SETTLED_KEPT", "PendingSends"]

# How long a takeover's scan waits, after the watch's initial values, for a pending send
# the stream listed and the watch did not deliver (it expired meanwhile).
MISSING_WAIT = 0.5
SETTLED_KEPT = 300  # seconds a settled send's removal is kept (past JetStream's sync)
SETTLE_TRIES = 5  # reads and writes of one settle that lost a race, before it gives up


class Backing(Protocol):
    """What the pending sends use of their store (``NatsStore``): its keys bucket and
    JetStream context, its reads, revision-checked writes and clock."""

    _timeout: float

    @property
    def _keys(self) -> Any: ...

    @property
    def _js(self) -> Any: ...

    async def _read(self, kv: Any, key: str) -> tuple[int, dict[str, Any], datetime] | None: ...

    async def _replace(self, kv: Any, key: str, value: bytes, last: int, lifetime: int) -> bool: ...

    async def _now_ms(self) -> int: ...


class PendingSends:
    """The pending sends of one NATS store; every call runs on its link's loop."""

    def __init__(self, store: Backing) -> None:
        self._store = store

    async def pend(self, key: str, value: bytes) -> None:
        """Leave the claim ``key`` pending, with ``value`` (its holder and lease's end)."""
        lifetime = math.ceil(CLAIM_TTL.total_seconds())
        bucket = self._store._keys._name
        await self._store._js.publish(f"$KV.{bucket}.pend.{enc(key)}", value, msg_ttl=lifetime)

    async def settle_many(self, keys: list[str], owner: str, keep: timedelta | None) -> list[bool]:
        return await bounded(self.settle(key, owner, keep) for key in keys)

    async def settle(self, key: str, owner: str, keep: timedelta | None) -> bool:
        """Settle (``keep`` None) or renew one pending send; False when another replica
        holds it."""
        from nats.js.errors import KeyWrongLastSequenceError

        store, kv = self._store, self._store._keys
        name, mark = f"pend.{enc(key)}", f"setl.{enc(key)}"
        lifetime = math.ceil(CLAIM_TTL.total_seconds())
        marker = json.dumps({"o": owner}).encode()
        for _ in range(SETTLE_TRIES):  # a write that lost a race reads again
            found = await store._read(kv, name)
            if found is None:  # settled (by whom the marker says), or never pending
                settled = await store._read(kv, mark)
                return settled is None or settled[1].get("o") == owner
            if found[1].get("o") != owner:
                return False
            if keep is not None:
                # Its lease's end counted from this write, not from the batch's start: a
                # renewal of thousands takes seconds.
                until = await store._now_ms() + ttl_ms(keep)
                leased = json.dumps({"o": owner, "x": until}).encode()
                if await store._replace(kv, name, leased, found[0], lifetime):
                    return True
                continue
            try:
                await kv.create(mark, marker, msg_ttl=lifetime)
            except KeyWrongLastSequenceError:
                held = await store._read(kv, mark)
                # An earlier holder's marker: the send is this owner's now, and so is that.
                if (
                    held is not None
                    and held[1].get("o") != owner
                    and not await store._replace(kv, mark, marker, held[0], lifetime)
                ):
                    continue
            if await self.drop(name, found[0]):
                return True
            held = await store._read(kv, mark)  # taken over meanwhile: not ours
            if held is not None and held[1].get("o") == owner:
                await self.drop(mark, held[0])
        raise StoreUnavailable(f"NATS: the pending send {key} changed five times meanwhile")

    async def drop(self, name: str, last: int) -> bool:
        """Delete the key at revision ``last`` only (False: written since), with a delete
        marker that lives ``SETTLED_KEPT``."""
        from nats.js.errors import APIError

        bucket = self._store._keys._name
        headers = {"KV-Operation": "DEL", "Nats-Expected-Last-Subject-Sequence": str(last)}
        try:
            await self._store._js.publish(
                f"$KV.{bucket}.{name}", b"", headers=headers, msg_ttl=SETTLED_KEPT
            )
        except APIError as exc:
            if exc.err_code == 10071:  # wrong last sequence
                return False
            raise
        return True

    async def take_over(
        self, owner: str, lease: timedelta, most: int
    ) -> list[tuple[bytes | None, str]]:
        """Take over up to ``most`` pending sends whose lease ran out, oldest first: each
        raw claim key (to decode) and its previous holder."""
        store = self._store
        kv: Any = store._keys
        info = await store._js.stream_info(kv._stream, subjects_filter=kv._pre + "pend.*")
        expected = {subject[len(kv._pre) :] for subject in (info.state.subjects or {})}
        if not expected:
            return []
        now = await store._now_ms()
        latest = await self._scan(kv, expected, store._timeout)
        ran_out = sorted(
            (expires(value), name, revision, _owner(value))
            for name, (revision, value) in latest.items()
            if expires(value) <= now
        )[:most]
        value = json.dumps({"o": owner, "x": now + ttl_ms(lease)}).encode()
        lifetime = math.ceil(CLAIM_TTL.total_seconds())
        won = await bounded(
            store._replace(kv, name, value, revision, lifetime) for _, name, revision, _ in ran_out
        )
        return [
            (dec(name.removeprefix("pend.")), held)
            for (_, name, _, held), mine in zip(ran_out, won, strict=True)
            if mine
        ]

    @staticmethod
    async def _scan(
        kv: Any, expected: set[str], timeout: float
    ) -> dict[str, tuple[int, dict[str, Any]]]:
        """Every pending send in one watch (as the store reads a control group), not one
        request each: a burst leaves thousands. By key: its revision and value."""
        from nats.errors import TimeoutError as NatsTimeoutError

        watcher = await kv.watch("pend.*")
        latest: dict[str, tuple[int, dict[str, Any]]] = {}
        seen: set[str] = set()
        marked = False
        try:
            while not (marked and expected <= seen):
                try:
                    entry = await watcher.updates(timeout=MISSING_WAIT if marked else timeout)
                except NatsTimeoutError:
                    if marked:  # what is still missing expired since: nothing to take
                        break
                    raise
                if entry is None:
                    marked = True
                    continue
                seen.add(entry.key)
                if entry.operation is None and entry.value is not None:
                    try:
                        value = inbound.loads(entry.value)
                    except ValueError:
                        value = {}
                    latest[entry.key] = (entry.revision, value if isinstance(value, dict) else {})
                else:
                    latest.pop(entry.key, None)
        finally:
            await watcher.stop()
        return latest


def _owner(value: dict[str, Any]) -> str:
    """Who a pending send names; one that names none readable is still taken over (its key
    says what to send)."""
    owner = value.get("o")
    return owner if isinstance(owner, str) else "an unreadable owner"
