"""The Redis store's locks and the marks of a run: a lock taken with its fencing token, a
run admitted (its lock, its token and its occurrence's marks in one script), a completed
run's mark written with its lock freed, a lock extended or released by its owner."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from cron_bridge.errors import FenceUnreadable, StoreUnavailable
from cron_bridge.jobs import CLAIM_TTL, Occurrence
from cron_bridge.plumbing import inbound
from cron_bridge.stores.base import Admission, done_key, ttl_ms
from cron_bridge.stores.redis_link import Client, RedisLink
from cron_bridge.stores.redis_pending import hash_tag

__all__ = ["RedisLocks", "fence_key"]


class RedisLocks:
    """What ``RedisStore`` does with locks and a run's marks, on its link, under its prefix."""

    def __init__(self, link: RedisLink, prefix: str) -> None:
        self.link = link
        self.prefix = prefix
        # The lock, its counter and the occurrence's marks share a slot: one server, or a
        # cluster under a prefix with a hash tag of its own (a script runs on one slot).
        self.one_slot = not link.cluster or bool(hash_tag(prefix))

    def _key(self, key: str) -> str:
        return self.prefix + key

    def acquire(self, key: str, owner: str, ttl: timedelta) -> bool:
        return bool(
            self.link.call(
                lambda client: client.set(self._key(key), owner, nx=True, px=ttl_ms(ttl))
            )
        )

    def acquire_fenced(self, key: str, owner: str, ttl: timedelta) -> int | None:
        keys, args = [self._key(key), fence_key(self.prefix, key)], [owner, ttl_ms(ttl)]
        token = self.link.call(
            lambda client: self.link.run_script(client, "acquire_fenced", keys, args)
        )
        if token is None:
            return None
        if int(token) < 1:
            raise FenceUnreadable(key, f"a value that is no counter ({keys[1]})")
        return int(token)

    def admit(
        self,
        key: str,
        owner: str,
        ttl: timedelta,
        unless_completed: Occurrence | None,
        began: tuple[str, str] | None,
    ) -> Admission:
        """``Store.admit`` in one script, one round trip (only where ``one_slot``)."""
        lock = self._key(key)
        done = lock if unless_completed is None else self._key(done_key(unless_completed))
        mark, mine = (lock, "") if began is None else (self._key(began[0]), began[1])
        keys = [lock, fence_key(self.prefix, key), done, mark]
        args = [
            owner,
            ttl_ms(ttl),
            "0" if unless_completed is None else "1",
            mine,
            mine.partition("|")[0],
            ttl_ms(CLAIM_TTL),
        ]

        def work(client: Client) -> Any:
            reply = self.link.run_script(client, "admit", keys, args)
            if isinstance(reply, list) and len(reply) == 4:
                # Another program's key of another type: said once, never an outage.
                if reply[0] in (b"held", "held") and reply[2] not in (b"string", "string"):
                    self.link.unusable(client, [lock], "string")
                if reply[0] in (b"began", "began") and reply[2] not in (b"string", "string"):
                    self.link.unusable(client, [mark], "string")
                if reply[3]:  # a completion mark of another type marks nothing
                    self.link.unusable(client, [done], "string")
            return reply

        return self._admitted(key, began, self.link.call(work))

    def _admitted(self, key: str, began: tuple[str, str] | None, reply: Any) -> Admission:
        """The script's reply, checked: anything else is the server's fault, said as such."""
        if reply == -1:
            raise FenceUnreadable(
                key, f"a value that is no counter ({fence_key(self.prefix, key)})"
            )
        if not isinstance(reply, list) or not reply:
            raise StoreUnavailable(f"redis: the admit script answered {str(reply)[:80]!r}")
        outcome = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
        if outcome == "completed":
            return Admission("completed")
        if outcome in ("held", "began") and len(reply) == 4:
            named = key if outcome == "held" else (began or (key, ""))[0]
            value = None if reply[1] is None else inbound.text(reply[1], "claims and locks", named)
            return Admission(outcome, holder=value)  # type: ignore[arg-type]
        if outcome == "taken" and len(reply) == 4 and isinstance(reply[1], int) and reply[1] >= 1:
            return Admission("taken", token=reply[1], marked=reply[2] == 1)
        raise StoreUnavailable(f"redis: the admit script answered {str(reply)[:80]!r}")

    def finish(self, occurrence: Occurrence, lock: tuple[str, str]) -> None:
        """``Store.finish``: the mark, then the lock freed, in one script (only where
        ``one_slot``)."""
        keys = [self._key(done_key(occurrence)), self._key(lock[0])]
        args = [ttl_ms(CLAIM_TTL), lock[1]]
        self.link.call(lambda client: self.link.run_script(client, "finish", keys, args))

    def extend(self, key: str, owner: str, ttl: timedelta) -> bool:
        name, args = self._key(key), [owner, ttl_ms(ttl)]
        return bool(
            self.link.call(
                lambda client: self.link.run_script(client, "extend", [name], args),
                key=name,
                holds="string",
                otherwise=0,
            )
        )

    def release(self, key: str, owner: str) -> bool:
        name = self._key(key)
        return bool(
            self.link.call(
                lambda client: self.link.run_script(client, "release", [name], [owner]),
                key=name,
                holds="string",
                otherwise=0,
            )
        )


def fence_key(prefix: str, key: str) -> str:
    """The fencing counter of the lock ``key``, in the lock's own Redis Cluster slot (a script
    runs on one slot): ``<prefix>fence:{<prefix><key>}``, whose hash tag is the lock's whole
    name, or ``<prefix>fence:<key>`` where the prefix has a hash tag of its own (``{cb}:``),
    which then decides both slots."""
    if hash_tag(prefix):
        return f"{prefix}fence:{key}"
    return f"{prefix}fence:{{{prefix}{key}}}"
