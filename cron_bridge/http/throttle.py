"""Slowing down secret guessing: failed authentications are limited per client.

Each client (its address) has a bucket of ``burst`` failures that refills at ``rate`` per
second. A client whose bucket is empty gets 429 with ``Retry-After`` for every authentication
it tries, right or wrong, until a failure refills: checking the secret anyway would let it go
on guessing at full speed. Other clients are never affected, so the right secret always works
from a client that is not guessing.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["AuthThrottle"]


class AuthThrottle:
    """Failed authentications per client, as token buckets.

    Args:
        burst: failures a client may have in a row before it waits.
        rate: failures per second it earns back.
        max_clients: clients remembered at once (the least recently seen are forgotten).
        clock: seconds, monotonic (a fake one in tests).
    """

    def __init__(
        self,
        *,
        burst: int = 10,
        rate: float = 0.5,
        max_clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst = burst
        self.rate = rate
        self.max_clients = max_clients
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, at

    def retry_after(self, client: str) -> int | None:
        """Seconds the client must wait before it may authenticate again, or None."""
        with self._lock:
            tokens = self._tokens(client)
        if tokens >= 1:
            return None
        return max(1, math.ceil((1 - tokens) / self.rate))

    def failed(self, client: str) -> None:
        """Count one failed authentication of ``client``."""
        with self._lock:
            tokens = self._tokens(client)
            self._buckets[client] = (max(0.0, tokens - 1), self._clock())
            self._buckets.move_to_end(client)
            while len(self._buckets) > self.max_clients:
                self._buckets.popitem(last=False)

    def _tokens(self, client: str) -> float:
        tokens, at = self._buckets.get(client, (float(self.burst), self._clock()))
        return min(float(self.burst), tokens + (self._clock() - at) * self.rate)
