"""``RedisStore``: Redis, Valkey, Redis Cluster, and a primary that Redis Sentinel names.

A claim is one ``SET NX PX``; extending and releasing are owner-checked Lua scripts shipped
beside this module. Every command and script touches a single key, so Redis Cluster works
without hash tags, but for taking an overlap lock with its fencing token: the token's counter
is named with the lock's key as its hash tag (``fence_key``), so both are in one slot. Batches
go in one pipeline (one round trip per cluster node).

Redis replicates asynchronously: with ``wait_replicas=N`` a batch of claims ends with ``WAIT
N`` and counts as claimed only once that many replicas acknowledged it (``redis_wait``).

A key of the wrong Redis type is unreadable, never an outage (``redis_types``): a read gives
what an absent key gives (a control group: what this process last read of it), a write leaves
it and writes the rest of its batch, each warned once.

Every call goes through the store's ``RedisLink`` (``redis_link``): one connection, its round
trips counted, redis-py's errors made ``StoreUnavailable``. Replies that carry what the store
holds are read undecoded (redis-py's ``NEVER_DECODE``, also on a borrowed client that
decodes), and turned into text by ``inbound.text``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from cron_bridge.errors import ConfigError
from cron_bridge.jobs import CLAIM_TTL, Occurrence
from cron_bridge.plumbing import inbound
from cron_bridge.schedules import EPOCH
from cron_bridge.stores import run_summary
from cron_bridge.stores.base import (
    PENDING_LEASE,
    TAKE_OVER_MOST,
    Admission,
    Store,
    ttl_ms,
)
from cron_bridge.stores.records import (
    ORDERED_GROUPS,
    REPLICA_ID_MAX,
    REPLICA_TTL_MAX,
    ReplicaInfo,
    RunRecord,
    last_claimed_times,
    live_replica,
    readable,
)
from cron_bridge.stores.redis_pending import PendingSends, hash_tag

try:
    from cron_bridge.stores.redis_controls import RedisControls
    from cron_bridge.stores.redis_link import Client, RedisLink, lua_source, raw
    from cron_bridge.stores.redis_locks import RedisLocks, fence_key
    from cron_bridge.stores.redis_types import LastReads, warn_wrong_type
    from cron_bridge.stores.redis_wait import Unconfirmed, claim_waiting
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError('the Redis store needs redis-py: pip install "cron-bridge[redis]"') from exc

__all__ = ["RedisStore", "fence_key"]

log = logging.getLogger(__name__)

_OUTCOMES = json.dumps(run_summary.OUTCOMES)  # what a run summary's entry may name
_ONE_MS = timedelta(milliseconds=1)


class RedisStore(RedisControls, Store):
    """A store in Redis, Valkey or Redis Cluster.

    Args:
        client_or_url: a ``redis://``, ``rediss://``, ``redis+cluster://`` or
            ``redis+sentinel://`` URL, or a ``redis.Redis`` / ``redis.cluster.RedisCluster``
            client, which stays open on ``close()``.
        prefix: put before every key, so services, environments or tenants share a server.
        connect_timeout: seconds to connect, and to wait for any answer.
        history_limit: run records kept per job.
        wait_replicas: replicas that must acknowledge a batch of claims before its
            occurrences are enqueued (``WAIT``); 0 trusts the primary alone.
        wait_timeout: seconds ``WAIT`` waits for them.
        sentinel_password: for Sentinels that require a password (``redis+sentinel://``).

    Raises:
        ConfigError: ``wait_replicas`` on Redis Cluster (``WAIT`` covers one connection's
            writes, and a cluster pipeline spreads them over many), or a bad Sentinel URL.
    """

    atomic_batches = True  # one script on one hash

    def __init__(
        self,
        client_or_url: str | Client = "redis://localhost:6379/0",
        *,
        prefix: str = "cron_bridge:",
        connect_timeout: float = 5.0,
        history_limit: int = 1000,
        wait_replicas: int = 0,
        wait_timeout: float = 1.0,
        sentinel_password: str | None = None,
    ) -> None:
        super().__init__()
        self.prefix = prefix
        self.history_limit = history_limit
        self.wait_replicas = wait_replicas
        self.wait_timeout = wait_timeout
        self._unconfirmed = Unconfirmed()  # claims fewer than wait_replicas acknowledged
        self._last_reads = LastReads()
        self._link = RedisLink(
            client_or_url,
            timeout=connect_timeout,
            sentinel_password=sentinel_password,
            stats=self.stats,
        )
        self._cluster = self._link.cluster
        self._host = self._link.host
        self._sends = PendingSends(self._link, self.prefix)  # claims pending their send
        self._locks = RedisLocks(self._link, self.prefix)  # locks and the marks of a run
        if (
            self._cluster
            and ("{" in self.prefix or "}" in self.prefix)
            and not hash_tag(self.prefix)
        ):
            raise ConfigError(
                "a brace outside a hash tag leaves a lock and its fencing counter in different "
                "Redis Cluster slots; use a tag such as {cron-bridge}: or no braces",
                option="prefix",
                value=self.prefix,
            )
        if wait_replicas and self._cluster:
            raise ConfigError(
                "not supported on Redis Cluster; use a primary with replicas "
                "(redis:// or redis+sentinel://)",
                option="wait_replicas",
                value=str(wait_replicas),
            )

    @property
    def url(self) -> str:
        return self._link.url

    def _key(self, key: str) -> str:
        return self.prefix + key

    def ping(self) -> None:
        self._link.call(lambda client: client.ping())

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
        if self._cluster or self.wait_replicas:
            # The claims go to several nodes, or wait for replicas: the pending sends follow
            # in a script of their own, once the claims won are known.
            won = self._claim_only(occurrences, owner, ttl)
            self._sends.pend(
                [o for o, mine, flag in zip(occurrences, won, flags, strict=True) if mine and flag],
                owner,
                lease,
            )
            return won
        keys = [self._key(occurrence.claim_key) for occurrence in occurrences]

        # One script for the batch; it reads each job's last claimed occurrence from the keys.
        def script(client: Client) -> list[bool]:
            flags_text = "".join("1" if flag else "0" for flag in flags) if any(flags) else ""
            flagged, kind, *pending_kinds = self._link.run_script(
                client,
                "claim_many",
                [*keys, self._key("last"), *self._sends.keys],
                [owner, ttl_ms(ttl), len(self.prefix), flags_text, ttl_ms(lease)],
            )
            self._check_last(kind)
            self._sends.check(pending_kinds)
            return [flag == ord("1") for flag in bytes(flagged)]

        return self._link.call(script)

    def settle_many(
        self, occurrences: Sequence[Occurrence], owner: str, *, keep: timedelta | None = None
    ) -> list[bool]:
        if not occurrences:
            return []
        keys = list(dict.fromkeys(o.claim_key for o in occurrences))
        others = self._sends.held_by_others(keys, owner, keep)
        return self._first_of(occurrences, others, held=False)

    def take_over(
        self, owner: str, *, lease: timedelta = PENDING_LEASE, most: int = TAKE_OVER_MOST
    ) -> list[tuple[str, str]]:
        return self._sends.take_over(owner, lease, most)

    def _claim_only(
        self, occurrences: Sequence[Occurrence], owner: str, ttl: timedelta
    ) -> list[bool]:
        expiry = ttl_ms(ttl)
        keys = [self._key(occurrence.claim_key) for occurrence in occurrences]
        if self.wait_replicas:
            advance, last = _advance(occurrences), self._key("last")

            def waiting(client: Client) -> list[bool]:
                won, kind = claim_waiting(
                    client,
                    keys,
                    owner,
                    expiry,
                    unconfirmed=self._unconfirmed,
                    replicas=self.wait_replicas,
                    timeout=self.wait_timeout,
                    advance=lambda pipe: pipe.eval(lua_source("advance_last"), 1, last, *advance),
                    replies=lambda pipe, sent: self._link.replies(
                        client, pipe, [*sent, last, ""], "string"
                    ),
                )
                self._check_last(kind)
                return won

            return self._link.call(waiting, pipelines=1)

        advance = _advance(occurrences)

        def work(client: Client) -> list[bool]:
            pipe = client.pipeline(transaction=False)
            for key in keys:
                pipe.set(key, owner, nx=True, px=expiry)
            won = [bool(answer) for answer in pipe.execute()]
            self._check_last(
                self._link.run_script(client, "advance_last", [self._key("last")], advance)
            )
            return won

        return self._link.call(work, pipelines=1, commands=1)

    def _check_last(self, kind: Any) -> None:
        """Warn once when a claim found ``last`` of another type than a hash (``kind``, as the
        script read it: its claims are made, each job's last claimed occurrence is not)."""
        if not isinstance(kind, int) and kind not in (b"hash", b"none"):
            warn_wrong_type(
                self._key("last"),
                kind,
                "hash",
                "the claims are made, the last claimed occurrences not kept",
            )

    def holder(self, key: str) -> str | None:
        name = self._key(key)
        owner = self._link.call(lambda client: raw(client, "GET", name), key=name, holds="string")
        return None if owner is None else inbound.text(owner, "claims and locks", key)

    def holders(self, keys: Sequence[str]) -> list[str | None]:
        if not keys:
            return []
        keys = [self._key(key) for key in keys]
        if not self._cluster:
            values = self._link.call(lambda client: raw(client, "MGET", *keys))
        else:  # the keys live on several nodes: one pipeline, split by node

            def work(client: Client) -> list[Any]:
                pipe = client.pipeline(transaction=False)
                for key in keys:
                    raw(pipe, "GET", key)
                return self._link.replies(client, pipe, keys, "string")

            values = self._link.call(work, pipelines=1, commands=0)
        return [
            None if value is None else inbound.text(value, "claims and locks", key)
            for key, value in zip(keys, values, strict=True)
        ]

    # pause must not say it was made when nothing was written (the reads go on as they were).
    def put_control(self, group: str, key: str, value: str | None) -> None:
        if group in ORDERED_GROUPS:  # with its index, in one script
            if value is None:
                self._write_group(group, {}, [key])
            else:
                self._write_group(group, {key: value}, [])
            return
        name = self._key(f"controls:{group}")  # one hash per group
        if value is None:
            done = self._link.call(
                lambda client: client.hdel(name, key) >= 0, key=name, holds="hash", otherwise=False
            )
        else:
            done = self._link.call(
                lambda client: client.hset(name, key, value) >= 0,
                key=name,
                holds="hash",
                otherwise=False,
            )
        if not done:
            raise self._refused_write(name)

    def notify(self, channel: str) -> None:
        name = self._key(f"notify:{channel}")
        self._link.call(lambda client: client.publish(name, "1"))

    def listen(self, channel: str, wake: Callable[[], None]) -> Callable[[], None] | None:
        name = self._key(f"notify:{channel}")
        stop = threading.Event()

        def run() -> None:
            wait = 1.0
            while not stop.is_set():
                pubsub: Any = None
                try:
                    client: Any = self._link.client()
                    pubsub = client.pubsub(ignore_subscribe_messages=True)
                    pubsub.subscribe(name)
                    wait = 1.0
                    wake()  # what changed while nobody listened is found by the next look
                    while not stop.is_set():
                        if pubsub.get_message(timeout=1.0) is not None:
                            wake()
                except Exception as exc:  # noqa: BLE001 - listening is best effort: polling covers it
                    log.debug("listening on %s stopped (%s); again in %.0fs", name, exc, wait)
                    stop.wait(wait)
                    wait = min(wait * 2, 30.0)
                finally:
                    if pubsub is not None:
                        with contextlib.suppress(Exception):
                            pubsub.close()

        threading.Thread(target=run, name="cron-bridge-listen", daemon=True).start()
        return stop.set

    def latest_runs(self, jobs: Sequence[str]) -> dict[str, RunRecord]:
        wanted = list(dict.fromkeys(jobs))
        if not wanted:
            return {}
        names = [self._key(f"runs:{job}") for job in wanted]

        def work(client: Client) -> list[Any]:
            pipe = client.pipeline(transaction=False)
            for name in names:
                raw(pipe, "LINDEX", name, 0)
            return self._link.replies(client, pipe, names, "list")

        items = self._link.call(work, pipelines=1, commands=0)
        found = {}
        for job, name, item in zip(wanted, names, items, strict=True):
            if item is not None:
                read = readable([item], _record_from_json, name)
                if read:
                    found[job] = read[0]
        return found

    def last_claimed(self, jobs: Sequence[str]) -> dict[str, datetime]:
        if not jobs:
            return {}
        name = self._key("last")
        values = self._link.call(
            lambda client: raw(client, "HMGET", name, *jobs),
            key=name,
            holds="hash",
            otherwise=[None] * len(jobs),
        )
        pairs = [(job, ms) for job, ms in zip(jobs, values, strict=True) if ms is not None]
        return last_claimed_times(pairs, "last claimed")

    def acquire(self, key: str, owner: str, ttl: timedelta) -> bool:
        return self._locks.acquire(key, owner, ttl)

    def acquire_fenced(self, key: str, owner: str, ttl: timedelta) -> int | None:
        return self._locks.acquire_fenced(key, owner, ttl)

    def admit(
        self,
        key: str,
        owner: str,
        ttl: timedelta,
        *,
        unless_completed: Occurrence | None = None,
        began: tuple[str, str] | None = None,
    ) -> Admission:
        """One script, one round trip, where the lock and the occurrence's marks share a
        slot (one server, or a prefix with a hash tag of its own); else the steps of
        ``Store.admit``."""
        if not self._locks.one_slot:
            return super().admit(key, owner, ttl, unless_completed=unless_completed, began=began)
        return self._locks.admit(key, owner, ttl, unless_completed, began)

    def finish(self, occurrence: Occurrence, lock: tuple[str, str] | None = None) -> None:
        """The mark, and the lock freed after it, in one script where they share a slot."""
        if lock is None or not self._locks.one_slot:
            super().finish(occurrence, lock)
        else:
            self._locks.finish(occurrence, lock)

    def extend(self, key: str, owner: str, ttl: timedelta) -> bool:
        return self._locks.extend(key, owner, ttl)

    def release(self, key: str, owner: str) -> bool:
        return self._locks.release(key, owner)

    def record_many(self, records: Sequence[RunRecord]) -> None:
        if not records:
            return

        keys = [self._key(f"runs:{record.job}") for record in records]
        values = [json.dumps(record.to_json()) for record in records]
        if not self._cluster:  # one script for the batch, the run summaries with it
            found = run_summary.summaries(records)
            hashes = [self._key(f"controls:{group}") for group in run_summary.GROUPS]
            entries: list[Any] = []
            for group in run_summary.GROUPS:
                raised = found.get(group, {})
                entries += [len(raised), *(x for pair in raised.items() for x in pair)]
            ceiling_ms = run_summary.ceiling(datetime.now(UTC))

            def script(client: Client) -> None:
                skipped = self._link.run_script(
                    client,
                    "record_many",
                    [*keys, *hashes],
                    [
                        self.history_limit,
                        len(keys),
                        *values,
                        ceiling_ms,
                        _OUTCOMES,
                        run_summary.VALUE_MAX,
                        *entries,
                    ],
                )
                for key, kind in zip(skipped[::2], skipped[1::2], strict=True):
                    name = bytes(key).decode(errors="replace")
                    warn_wrong_type(
                        name,
                        kind,
                        "hash" if name in hashes else "list",
                        "its records are not written, the others are",
                    )

            self._link.call(script)
            return

        def work(client: Client) -> None:
            pipe = client.pipeline(transaction=False)
            for key, value in zip(keys, values, strict=True):
                pipe.lpush(key, value)
            trimmed = sorted(set(keys))
            for key in trimmed:
                pipe.ltrim(key, 0, self.history_limit - 1)
            self._link.replies(client, pipe, [*keys, *trimmed], "list")

        self._link.call(work, pipelines=1, commands=0)
        self._summarize(records)  # the hashes live on other nodes: read, then raised

    def history(self, job: str, n: int = 20) -> list[RunRecord]:
        if n <= 0:
            return []
        name = self._key(f"runs:{job}")
        items = self._link.call(
            lambda client: raw(client, "LRANGE", name, 0, n - 1),
            key=name,
            holds="list",
            otherwise=[],
        )
        return readable(items, _record_from_json, self._key(f"runs:{job}"))

    def histories(self, jobs: Sequence[str], n: int = 20) -> dict[str, list[RunRecord]]:
        wanted = list(dict.fromkeys(jobs))
        if not wanted or n <= 0:
            return {job: [] for job in wanted}
        names = [self._key(f"runs:{job}") for job in wanted]

        def work(client: Client) -> list[Any]:
            pipe = client.pipeline(transaction=False)
            for name in names:
                raw(pipe, "LRANGE", name, 0, n - 1)
            return self._link.replies(client, pipe, names, "list")

        replies = self._link.call(work, pipelines=1, commands=0)
        return {
            job: readable(items or [], _record_from_json, name)
            for job, name, items in zip(wanted, names, replies, strict=True)
        }

    def heartbeat(
        self, replica: str, ttl: timedelta, *, clock_offset_ms: float | None = None
    ) -> datetime | None:
        name = self._key("replicas")

        def work(client: Client) -> Any:
            if clock_offset_ms is not None:  # one key per replica, gone with it (SET: any type)
                client.set(
                    self._key(f"clock:{replica}"), repr(float(clock_offset_ms)), px=ttl_ms(ttl)
                )
            return self._link.run_script(
                client, "heartbeat", [name], [replica, ttl_ms(ttl), ttl_ms(REPLICA_TTL_MAX)]
            )

        # Of the wrong type: not listed, and no clock of the server's to measure against.
        expires_ms = self._link.call(work, key=name, holds="sorted set")
        if expires_ms is None:
            return None
        return EPOCH + (int(expires_ms) - ttl_ms(ttl)) * _ONE_MS  # the server's TIME

    def replicas(self) -> list[ReplicaInfo]:
        limit, name = [ttl_ms(REPLICA_TTL_MAX)], self._key("replicas")
        flat = self._link.call(
            lambda client: self._link.run_script(client, "replicas", [name], limit),
            key=name,
            holds="sorted set",
            otherwise=[0],
        )
        now_ms = float(flat[0])
        named = (
            (inbound.text(replica, "replicas", replica, max_bytes=REPLICA_ID_MAX), ms)
            for replica, ms in zip(flat[1::2], flat[2::2], strict=True)
        )
        pairs = sorted((replica, ms) for replica, ms in named if replica is not None)

        def offsets_of(client: Client) -> list[Any]:
            pipe = client.pipeline(transaction=False)
            clocks = [self._key(f"clock:{replica}") for replica, _ in pairs]
            for clock in clocks:
                raw(pipe, "GET", clock)
            return self._link.replies(client, pipe, clocks, "string")

        offsets = self._link.call(offsets_of, pipelines=1, commands=0) if pairs else []
        found = [
            live_replica(replica, ms, now_ms, _offset(offset))
            for (replica, ms), offset in zip(pairs, offsets or [None] * len(pairs), strict=True)
        ]
        return [info for info in found if info is not None]

    def close(self) -> None:
        self._link.close()


def _advance(occurrences: Sequence[Occurrence]) -> list[Any]:
    """``job, epoch ms, ...``: each job's latest occurrence of a batch, for ``advance_last``."""
    latest: dict[str, int] = {}
    for occurrence in occurrences:
        latest[occurrence.job] = max(latest.get(occurrence.job, 0), occurrence.epoch_ms)
    return [value for item in sorted(latest.items()) for value in item]


def _record_from_json(item: bytes | str) -> RunRecord:
    return RunRecord.from_json(inbound.loads(item))


def _offset(raw: bytes | None) -> float | None:
    """A clock offset as a heartbeat wrote it (``repr`` of a float), else None."""
    try:
        return None if raw is None or len(raw) > 40 else float(raw)
    except ValueError:
        return None
