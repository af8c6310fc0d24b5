"""The Redis store's pending sends (``Store.claim_many``'s pending flags, ``settle_many``,
``take_over``): the sorted set of claim keys scored with the end of their lease (or, once
settled, with minus the end of their marker's life) and the hash of their holders, both in
one Cluster slot (``pending_keys``), read and written only by the Lua scripts
``pending_add``, ``claim_many``, ``settle`` and ``take_over``. A key of either of another
type is left as it is, said once: nothing is pending then, and the claims are made as before
(at most once).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from cron_bridge.errors import StoreUnavailable
from cron_bridge.jobs import CLAIM_TTL, Occurrence
from cron_bridge.plumbing import inbound
from cron_bridge.stores.base import ttl_ms
from cron_bridge.stores.redis_link import RedisLink
from cron_bridge.stores.redis_types import warn_wrong_type

__all__ = ["PendingSends", "hash_tag", "pending_keys"]

log = logging.getLogger(__name__)


class PendingSends:
    """The pending sends of one Redis store (its link and key prefix)."""

    def __init__(self, link: RedisLink, prefix: str) -> None:
        self._link = link
        self.keys = list(pending_keys(prefix))

    def pend(self, occurrences: Sequence[Occurrence], owner: str, lease: timedelta) -> None:
        """Leave claims just won pending their send, in a script of their own (a Cluster,
        or claims that wait for replicas); when the store does not answer, they are not (at
        most once, as before pending sends)."""
        if not occurrences:
            return
        args = [owner, ttl_ms(lease), *(o.claim_key for o in occurrences)]
        try:
            kinds = self._link.call(
                lambda client: self._link.run_script(client, "pending_add", self.keys, args)
            )
        except StoreUnavailable as exc:
            log.warning(
                "%d claim(s) won are not pending their send (none takes them over if this "
                "replica dies before it sends them): %s",
                len(occurrences),
                exc,
            )
            return
        self.check(kinds)

    def check(self, kinds: Sequence[Any]) -> None:
        """Warn (once) of a key of pending sends of another type."""
        for name, kind, expected in zip(self.keys, kinds, ("zset", "hash"), strict=False):
            if kind not in (expected.encode(), b"none", b""):
                warn_wrong_type(
                    name,
                    kind,
                    expected,
                    "claims are not left pending their send: none is taken over",
                )

    def held_by_others(self, keys: list[str], owner: str, keep: timedelta | None) -> set[str]:
        """Settle (``keep`` None) or renew the pending sends of ``keys`` that ``owner``
        holds; those another replica holds."""
        kept = 0 if keep is None else max(1, ttl_ms(keep))
        args = [owner, kept, ttl_ms(CLAIM_TTL), *keys]
        flags = self._link.call(
            lambda client: self._link.run_script(client, "settle", self.keys, args)
        )
        # "" when a key is of another type: nothing is pending there.
        return {key for key, flag in zip(keys, bytes(flags), strict=False) if flag == ord("0")}

    def take_over(self, owner: str, lease: timedelta, most: int) -> list[tuple[str, str]]:
        args = [owner, ttl_ms(lease), most]
        flat = self._link.call(
            lambda client: self._link.run_script(client, "take_over", self.keys, args)
        )
        taken = []
        for raw_key, raw_owner in zip(flat[::2], flat[1::2], strict=True):
            key = inbound.text(raw_key, "pending", raw_key)
            held = inbound.text(raw_owner, "pending", raw_key) if raw_owner else None
            if key is not None:  # taken over all the same: the key says what to send
                taken.append((key, held or "an unreadable owner"))
        return taken


def pending_keys(prefix: str) -> tuple[str, str]:
    """The sorted set and the hash of pending sends, in one Cluster slot: named with the
    prefix's own hash tag (``{cb}:pending``), or with ``{pending}`` as theirs
    (``cron-bridge:{pending}``); the hash is the set's name and ``-owners``."""
    name = f"{prefix}pending" if hash_tag(prefix) else f"{prefix}{{pending}}"
    return name, f"{name}-owners"


def hash_tag(name: str) -> bool:
    """Whether Redis Cluster hashes ``name`` by a tag (``{...}``, not empty) in it."""
    start = name.find("{")
    return start != -1 and name.find("}", start + 1) > start + 1
