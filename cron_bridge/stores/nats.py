"""``NatsStore``: claims, locks and records on NATS JetStream (``nats://``), through nats-py.

Keys live in JetStream key-value buckets, one set per ``prefix`` (the namespace):

- ``<prefix>-keys``: claims, locks and completion marks. A claim is a create-only write (the
  server refuses it when the key exists: exactly one writer wins); extend and release are
  revision-checked updates and deletes, so only the owner's write lands. Each value carries
  its expiry, read on the server's clock (measured from the timestamps JetStream gives every
  message); an expired key is taken over with a revision-checked update, so two takers never
  both win. The server also drops each key on its own after its lifetime (per-key TTL,
  rounded up to a second), so nothing piles up.
- ``<prefix>-state``: the last claimed occurrence per job, the live replicas, control records
  (``nats_controls``).
- the stream ``<prefix>-runs``: run records, the newest ``history_limit`` per job.

nats-py is asyncio: the store's ``NatsLink`` (``nats_link``) runs one event loop in a thread
of its own, and every method waits for its answer there, bounded by ``connect_timeout``.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from cron_bridge.errors import ConfigError
from cron_bridge.jobs import CLAIM_TTL, Occurrence
from cron_bridge.plumbing import inbound
from cron_bridge.schedules import EPOCH
from cron_bridge.stores.base import PENDING_LEASE, TAKE_OVER_MOST, Store, ttl_ms
from cron_bridge.stores.nats_controls import NatsControls
from cron_bridge.stores.nats_link import NatsLink, bounded, dec, enc, expires
from cron_bridge.stores.nats_pending import PendingSends
from cron_bridge.stores.records import (
    ReplicaInfo,
    RunRecord,
    last_claimed_times,
    live_replica,
    readable,
)

__all__ = ["NatsStore"]

T = TypeVar("T")
log = logging.getLogger(__name__)
_ONE_MS = timedelta(milliseconds=1)
_CLOCK_EVERY = 10.0  # seconds between measurements of the server's clock


class NatsStore(NatsControls, Store):
    """A store on NATS JetStream key-value buckets (nats-server 2.11 or later).

    Args:
        url: ``nats://[user:password@]host:4222[,host:port...]``.
        prefix: names this namespace's buckets and stream (``[A-Za-z0-9_-]``).
        connect_timeout: seconds to connect, and to wait for any answer.
        history_limit: run records kept per job.
    """

    def __init__(
        self,
        url: str = "nats://localhost:4222",
        *,
        prefix: str = "cron-bridge",
        connect_timeout: float = 5.0,
        history_limit: int = 1000,
    ) -> None:
        super().__init__()
        if not prefix or not all(c.isalnum() or c in "_-" for c in prefix) or len(prefix) > 64:
            raise ConfigError(
                "a NATS prefix is [A-Za-z0-9_-], up to 64", option="prefix", value=prefix
            )
        self._url = url
        self.prefix = prefix
        self._timeout = connect_timeout
        self.history_limit = history_limit
        parts = urlsplit(url)
        servers = [
            f"nats://{hostport}"
            for hostport in parts.netloc.rpartition("@")[2].split(",")
            if hostport
        ]
        self._link = NatsLink(
            servers,
            unquote(parts.username) if parts.username else None,
            unquote(parts.password) if parts.password else None,
            prefix=prefix,
            timeout=connect_timeout,
            history_limit=history_limit,
        )
        self._offset_ms = 0.0  # the server's clock minus ours
        self._next_clock = 0.0
        self._sends = PendingSends(self)  # the claims pending their send (nats_pending)

    @property
    def _hosts(self) -> str:
        return self._link.hosts

    @property
    def url(self) -> str:
        return f"nats://{self._hosts}?prefix={self.prefix}"

    # -- the connection (nats_link) ------------------------------------------------------

    def _run(self, make: Callable[[], Awaitable[T]], trips: int = 1, size: int = 1) -> T:
        """Run ``make()`` on the link's loop; a batch of ``size`` writes gets a millisecond
        more per write (they are pipelined, but each is acknowledged)."""
        result = self._link.run(make, self._timeout + size / 1000)
        self.stats.add(trips)
        return result

    @property
    def _nc(self) -> Any:
        return self._link.nc

    @property
    def _js(self) -> Any:
        return self._link.js

    @property
    def _keys(self) -> Any:
        return self._link.keys

    @property
    def _state(self) -> Any:
        return self._link.state

    # -- reading and writing one key ----------------------------------------------------

    async def _read(self, kv: Any, key: str) -> tuple[int, dict[str, Any], datetime] | None:
        """The key's revision, value and server time of writing; None when absent."""
        from nats.js.errors import NotFoundError

        bucket = kv._name
        try:
            msg = await self._js.get_msg(f"KV_{bucket}", subject=f"$KV.{bucket}.{key}")
        except NotFoundError:
            return None
        if msg.headers and msg.headers.get("KV-Operation") in ("DEL", "PURGE"):
            return None
        try:
            value = inbound.loads(msg.data or b"{}")
        except ValueError:
            value = {}
        return int(msg.seq), value if isinstance(value, dict) else {}, msg.time

    async def _replace(self, kv: Any, key: str, value: bytes, last: int, lifetime: int) -> bool:
        """Write ``value`` over revision ``last`` of the key, with its lifetime; False when the
        key has another revision by now (someone else wrote first)."""
        return await self._replace_at(kv, key, value, last, lifetime) is not None

    async def _replace_at(
        self, kv: Any, key: str, value: bytes, last: int, lifetime: int
    ) -> int | None:
        """``_replace``, answering with the revision written (None when not written)."""
        from nats.js.errors import APIError

        bucket = kv._name  # the bucket's subject is its naming rule
        headers = {"Nats-Expected-Last-Subject-Sequence": str(last)}
        try:
            ack = await self._js.publish(
                f"$KV.{bucket}.{key}", value, headers=headers, msg_ttl=lifetime
            )
        except APIError as exc:
            if exc.err_code == 10071:  # wrong last sequence
                return None
            raise
        return int(ack.seq)

    async def _now_ms(self) -> int:
        """The server's clock, measured every few seconds from a write's timestamp."""
        if time.monotonic() >= self._next_clock:
            sent = time.time()
            await self._state.put("clock", b"{}")
            found = await self._read(self._state, "clock")
            if found is not None:
                middle = (sent + time.time()) / 2
                self._offset_ms = (found[2].timestamp() - middle) * 1000
            self._next_clock = time.monotonic() + _CLOCK_EVERY
        return int(time.time() * 1000 + self._offset_ms)

    async def _take(self, key: str, owner: str, ttl: timedelta, now: int) -> bool:
        """Create the key, or take it over once expired; exactly one taker wins."""
        return await self._take_at(key, owner, ttl, now) is not None

    async def _take_at(self, key: str, owner: str, ttl: timedelta, now: int) -> int | None:
        """``_take``, answering with the revision the taking wrote (None when not taken): a
        sequence of the bucket's stream, so a later taking of the key always has a greater
        one (the fencing token)."""
        from nats.js.errors import KeyWrongLastSequenceError

        value = json.dumps({"o": owner, "x": now + ttl_ms(ttl)}).encode()
        lifetime = math.ceil(ttl.total_seconds()) + 1
        try:
            return int(await self._keys.create(key, value, msg_ttl=lifetime))
        except KeyWrongLastSequenceError:
            pass
        found = await self._read(self._keys, key)
        if found is None:  # gone since: ask again, once
            try:
                return int(await self._keys.create(key, value, msg_ttl=lifetime))
            except KeyWrongLastSequenceError:
                return None
        revision, held, _ = found
        if expires(held) > now:
            return None
        return await self._replace_at(self._keys, key, value, revision, lifetime)

    # -- the contract ---------------------------------------------------------------------

    def ping(self) -> None:
        async def work() -> None:
            await self._nc.flush(self._timeout)

        self._run(work)

    def claim_many(
        self,
        occurrences: Sequence[Occurrence],
        owner: str,
        *,
        ttl: timedelta = CLAIM_TTL,
        pending: Sequence[bool] | None = None,
        lease: timedelta = PENDING_LEASE,
    ) -> list[bool]:
        if not occurrences:
            return []
        flags = list(pending or [False] * len(occurrences))

        async def work() -> list[bool]:
            now = await self._now_ms()
            won = await bounded(self._take(enc(o.claim_key), owner, ttl, now) for o in occurrences)
            latest: dict[str, int] = {}
            for occurrence in occurrences:
                latest[occurrence.job] = max(latest.get(occurrence.job, 0), occurrence.epoch_ms)
            value = json.dumps({"o": owner, "x": now + ttl_ms(lease)}).encode()
            pended = {
                o.claim_key
                for o, mine, flag in zip(occurrences, won, flags, strict=True)
                if mine and flag
            }
            await bounded(
                [
                    *(self._advance(job, ms) for job, ms in latest.items()),
                    *(self._sends.pend(key, value) for key in sorted(pended)),
                ]
            )
            return won

        return self._run(work, trips=3, size=2 * len(occurrences) + len(flags))

    def settle_many(
        self, occurrences: Sequence[Occurrence], owner: str, *, keep: timedelta | None = None
    ) -> list[bool]:
        keys = list(dict.fromkeys(o.claim_key for o in occurrences))
        answers = self._run(
            lambda: self._sends.settle_many(keys, owner, keep), trips=3, size=3 * len(keys)
        )
        others = {key for key, mine in zip(keys, answers, strict=True) if not mine}
        return self._first_of(occurrences, others, held=False)

    def take_over(
        self, owner: str, *, lease: timedelta = PENDING_LEASE, most: int = TAKE_OVER_MOST
    ) -> list[tuple[str, str]]:
        taken = []
        for raw_key, held in self._run(
            lambda: self._sends.take_over(owner, lease, most), trips=3, size=most
        ):
            key = None if raw_key is None else inbound.text(raw_key, "pending", raw_key)
            if key is not None:
                taken.append((key, held))
        return taken

    async def _advance(self, job: str, ms: int) -> None:
        """Move the job's last claimed occurrence forward to ``ms``, never back."""
        from nats.js.errors import KeyWrongLastSequenceError

        key = f"last.{enc(job)}"
        for _ in range(10):
            found = await self._read(self._state, key)
            value = json.dumps({"ms": ms}).encode()
            try:
                if found is None:
                    await self._state.create(key, value)
                    return
                held = found[1].get("ms")
                if type(held) is int and held >= ms:  # anything else is overwritten
                    return
                await self._state.update(key, value, last=found[0])
                return
            except KeyWrongLastSequenceError:
                continue  # another replica moved it meanwhile: look again

    def holder(self, key: str) -> str | None:
        async def work() -> str | None:
            found = await self._read(self._keys, enc(key))
            if found is None or expires(found[1]) <= await self._now_ms():
                return None
            owner = found[1].get("o")
            return owner if isinstance(owner, str) else None

        return self._run(work)

    def holders(self, keys: Sequence[str]) -> list[str | None]:
        async def work() -> list[str | None]:
            now = await self._now_ms()
            found = await bounded(self._read(self._keys, enc(key)) for key in keys)
            owners = [
                entry[1].get("o") if entry is not None and expires(entry[1]) > now else None
                for entry in found
            ]
            return [owner if isinstance(owner, str) else None for owner in owners]

        return self._run(work, size=len(keys)) if keys else []

    def last_claimed(self, jobs: Sequence[str]) -> dict[str, datetime]:
        if not jobs:
            return {}

        async def work() -> list[Any]:
            return await bounded(self._read(self._state, f"last.{enc(job)}") for job in jobs)

        found = self._run(work)
        pairs = [
            (job, entry[1].get("ms"))
            for job, entry in zip(jobs, found, strict=True)
            if entry is not None and isinstance(entry[1], dict)
        ]
        return last_claimed_times(pairs, "last claimed")

    def acquire(self, key: str, owner: str, ttl: timedelta) -> bool:
        async def work() -> bool:
            return await self._take(enc(key), owner, ttl, await self._now_ms())

        return self._run(work)

    def acquire_fenced(self, key: str, owner: str, ttl: timedelta) -> int | None:
        async def work() -> int | None:
            return await self._take_at(enc(key), owner, ttl, await self._now_ms())

        return self._run(work)

    def extend(self, key: str, owner: str, ttl: timedelta) -> bool:
        async def work() -> bool:
            now = await self._now_ms()
            found = await self._read(self._keys, enc(key))
            if found is None or found[1].get("o") != owner or expires(found[1]) <= now:
                return False
            value = json.dumps({"o": owner, "x": now + ttl_ms(ttl)}).encode()
            lifetime = math.ceil(ttl.total_seconds()) + 1
            return await self._replace(self._keys, enc(key), value, found[0], lifetime)

        return self._run(work)

    def release(self, key: str, owner: str) -> bool:
        from nats.js.errors import KeyWrongLastSequenceError

        async def work() -> bool:
            found = await self._read(self._keys, enc(key))
            if found is None or found[1].get("o") != owner:
                return False
            alive = expires(found[1]) > await self._now_ms()
            try:
                await self._keys.delete(enc(key), last=found[0])
            except KeyWrongLastSequenceError:
                return False
            return alive

        return self._run(work)

    def record_many(self, records: Sequence[RunRecord]) -> None:
        if not records:
            return

        async def work() -> None:
            await bounded(
                self._js.publish(
                    f"{self.prefix}.runs.{enc(r.job)}", json.dumps(r.to_json()).encode()
                )
                for r in records
            )

        self._run(work, size=len(records))
        self._summarize(records)  # each key read, then written on its revision

    def history(self, job: str, n: int = 20) -> list[RunRecord]:
        if n <= 0:
            return []
        subject = f"{self.prefix}.runs.{enc(job)}"

        async def work() -> list[bytes]:
            from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

            info = await self._js.stream_info(f"{self.prefix}-runs", subjects_filter=subject)
            count = (info.state.subjects or {}).get(subject, 0)
            if not count:
                return []
            want = min(count, n)
            config = ConsumerConfig(
                deliver_policy=DeliverPolicy.ALL,
                ack_policy=AckPolicy.NONE,
                inactive_threshold=30.0,
                mem_storage=True,
            )
            sub = await self._js.pull_subscribe(
                subject, stream=f"{self.prefix}-runs", config=config
            )
            try:
                items: list[bytes] = []
                while len(items) < count:
                    batch = await sub.fetch(batch=count - len(items), timeout=self._timeout)
                    items += [msg.data for msg in batch]
            finally:
                await sub.unsubscribe()
            return items[-want:][::-1]

        items = self._run(work, trips=3)
        return readable(items, lambda raw: RunRecord.from_json(inbound.loads(raw)), subject)

    def heartbeat(
        self, replica: str, ttl: timedelta, *, clock_offset_ms: float | None = None
    ) -> datetime | None:
        async def work() -> datetime:
            self._next_clock = 0.0  # measure the server's clock now
            now = await self._now_ms()
            value = {"x": now + ttl_ms(ttl), "off": clock_offset_ms}
            await self._state.put(f"rep.{enc(replica)}", json.dumps(value).encode())
            return EPOCH + now * _ONE_MS

        return self._run(work, trips=3)

    def replicas(self) -> list[ReplicaInfo]:
        async def work() -> tuple[int, dict[str, Any]]:
            now = await self._now_ms()
            watcher = await self._state.watch("rep.*", ignore_deletes=True)
            found: dict[str, Any] = {}
            try:
                while True:
                    entry = await watcher.updates(timeout=self._timeout)
                    if entry is None:
                        return now, found
                    name = dec(entry.key.partition(".")[2])
                    try:
                        value = inbound.loads(entry.value or b"{}")
                    except ValueError:
                        continue
                    replica = None if name is None else inbound.text(name, "replicas", name)
                    if replica is not None:
                        found[replica] = value
            finally:
                await watcher.stop()

        now, found = self._run(work, trips=2)
        live = []
        for replica, value in sorted(found.items()):
            if not isinstance(value, dict):
                continue
            info = live_replica(replica, value.get("x"), now, value.get("off"))
            if info is not None:
                live.append(info)
        return live

    def close(self) -> None:
        self._link.close()
