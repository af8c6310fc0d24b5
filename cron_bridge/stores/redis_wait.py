"""Claims that replicas of the Redis primary must acknowledge (``wait_replicas=N``).

Redis replicates asynchronously: a claim the primary acknowledged can be lost in a failover,
and another replica can then claim the same occurrence again. With ``wait_replicas`` a batch
of claims ends with ``WAIT N`` on the same connection; when fewer replicas acknowledge it in
``wait_timeout`` the batch counts as not claimed (``StoreUnavailable``: nothing is enqueued)
and the beat asks again within ``misfire_grace``. Asking again finds this process's own
unconfirmed claims (``SET NX`` then ``GET``), remembered in this process only
(``Unconfirmed``), so a restarted replica with the same name never takes its predecessor's
claims for its own, and waits for them again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.client import NEVER_DECODE

__all__ = ["UNCONFIRMED_KEPT", "UNCONFIRMED_SECONDS", "Unconfirmed", "claim_waiting"]

UNCONFIRMED_SECONDS = 3600.0  # how long an unconfirmed claim of this process is remembered
UNCONFIRMED_KEPT = 100_000


class Unconfirmed:
    """The claims of this process that fewer than ``wait_replicas`` acknowledged: key -> when
    it was made."""

    def __init__(self) -> None:
        self._since: dict[str, float] = {}
        self._lock = threading.Lock()

    def asked_again(self, keys: Sequence[str], expiry_ms: int, now: float) -> set[str]:
        """Which of ``keys`` this process claimed without confirmation before. Asked again
        only within misfire_grace: an hour covers any sane grace, and the claims themselves
        expire; the oldest are forgotten first past ``UNCONFIRMED_KEPT``."""
        with self._lock:
            keep_for = min(expiry_ms / 1000, UNCONFIRMED_SECONDS)
            for key, since in list(self._since.items()):
                if now - since > keep_for or len(self._since) > UNCONFIRMED_KEPT:
                    del self._since[key]
            return {key for key in keys if key in self._since}

    def settle(
        self,
        keys: Sequence[str],
        won: Sequence[bool],
        retried: set[str],
        confirmed: bool,
        now: float,
    ) -> None:
        """After a batch: a confirmed one forgets what it confirmed; an unconfirmed one
        remembers the claims it made and forgets those it did not."""
        with self._lock:
            if confirmed:
                for key in retried:
                    self._since.pop(key, None)
                return
            for key, mine in zip(keys, won, strict=True):
                if mine:
                    self._since.setdefault(key, now)
                else:
                    self._since.pop(key, None)


def claim_waiting(
    client: Any,
    keys: list[str],
    owner: str,
    expiry: int,
    *,
    unconfirmed: Unconfirmed,
    replicas: int,
    timeout: float,
    advance: Callable[[Any], None],
    replies: Callable[[Any, list[str]], list[Any]],
) -> tuple[list[bool], Any]:
    """Claim ``keys`` for ``owner``, then ``WAIT`` for ``replicas`` of them, in one pipeline
    on one connection. Returns which claims were won and the reply of ``advance`` (the
    command it adds to the pipeline, which moves each job's last claimed occurrence).

    Args:
        replies: the pipeline's replies, given the key of each command (one for ``advance``,
            then ``""`` for ``WAIT``): the store's, which reads a key of the wrong type as
            None.

    Raises:
        redis.RedisError: fewer replicas acknowledged the claims in ``timeout`` seconds.
    """
    now = time.monotonic()
    retried = unconfirmed.asked_again(keys, expiry, now)
    pipe = client.pipeline(transaction=False)
    sent = []  # the key of each command, for replies
    for key in keys:
        pipe.set(key, owner, nx=True, px=expiry)
        sent.append(key)
        if key in retried:
            pipe.execute_command("GET", key, **{NEVER_DECODE: True})  # bytes, as set
            sent.append(key)
    advance(pipe)
    pipe.wait(replicas, max(1, round(timeout * 1000)))
    answers = iter(replies(pipe, sent))
    won = []
    for key in keys:
        mine = bool(next(answers))
        if key in retried:  # ours from an earlier, unconfirmed try?
            value = next(answers)
            mine = mine or (value is not None and value == owner.encode())
        won.append(mine)
    advanced = next(answers)
    acknowledged = int(next(answers))
    unconfirmed.settle(keys, won, retried, acknowledged >= replicas, now)
    if acknowledged < replicas:
        raise redis.RedisError(
            f"{acknowledged} of {replicas} replica(s) acknowledged the claims in {timeout:g}s "
            "(wait_replicas): not enqueued, claiming again"
        )
    return won, advanced
