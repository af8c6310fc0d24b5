"""Keys of the wrong Redis type: a string, list, set, sorted set, hash or stream where the
Redis store keeps another (another program's key in the namespace, or a hostile one).

Such a key holds no record the store can read or write, and the server that said so is
reachable: it is never ``StoreUnavailable``. A read finds it unreadable (``reads_as``), a write
leaves it as it is and writes every other key of its batch, and each is warned once until its
type changes. Scripts that write check the types of their keys (``TYPE``) before they write
anything, so none stops half way; a script that only reads fails at its first command, before
any write, and ``is_wrong_type`` turns that into the key's unreadable answer.
"""

from __future__ import annotations

import json
import logging
import threading
import zlib
from collections import OrderedDict

from cron_bridge.plumbing import inbound
from cron_bridge.stores.records import CONTROLS_BYTES

__all__ = ["LastReads", "is_wrong_type", "warn_wrong_type"]

log = logging.getLogger(__name__)

try:
    from redis.exceptions import ResponseError
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError('the Redis store needs redis-py: pip install "cron-bridge[redis]"') from exc


def is_wrong_type(error: object) -> bool:
    """Whether ``error`` (an exception, or a reply of a pipeline run without raising) is the
    server's WRONGTYPE, from a command or from a script's call (Redis 6 wraps it in ``ERR
    Error running script``, so it is looked for anywhere in the text)."""
    return isinstance(error, ResponseError) and "WRONGTYPE" in str(error)


def warn_wrong_type(key: str, found: object, holds: str, doing: str) -> None:
    """Say once, until its type changes, that ``key`` is a ``found`` where the store keeps a
    ``holds``, and what was done instead (``doing``)."""
    kind = inbound.text(found, "redis types", key, max_bytes=40) if found else None
    inbound.warn_once(
        log,
        "redis types",
        key,
        kind or "?",
        "the key %.300r holds a Redis type "
        "of %s, not a %s (another program's key, or a hostile one): %s; delete "
        "it to repair",
        key,
        kind or "another kind",
        holds,
        doing,
    )


class LastReads:
    """The last read of each control group, so that one found of the wrong type reads as it did
    (a pause stays: fail closed), or as holding no readable record when this process never read
    it. At most ``max_bytes`` of keys and values are kept; the groups read longest ago go first.
    """

    def __init__(self, max_bytes: int = CONTROLS_BYTES) -> None:
        self._max = max_bytes
        self._used = 0
        self._kept: OrderedDict[str, tuple[dict[str, str], int]] = OrderedDict()
        self._whole: dict[str, bytes] = {}  # compressed: read whole, it is big, and rarely read
        self._lock = threading.Lock()

    def keep(self, group: str, found: dict[str, str], bound: int = CONTROLS_BYTES) -> None:
        """Keep ``found``, the read of ``group`` within ``bound`` bytes of values. A group
        read whole past the shared budget (the pauses, the stored schedules: every record
        must be read) is kept whole, apart from the others."""
        if bound > CONTROLS_BYTES:
            packed = zlib.compress(json.dumps(found).encode(), 1)  # tenants' specs: ~1/10
            with self._lock:
                self._whole[group] = packed
            return
        size = sum(len(key) + len(value) for key, value in found.items())
        with self._lock:
            _, before = self._kept.pop(group, ({}, 0))
            self._used -= before
            if size > self._max:
                return
            self._kept[group] = (dict(found), size)
            self._used += size
            while self._used > self._max:
                _, (_, dropped) = self._kept.popitem(last=False)
                self._used -= dropped

    def value(self, group: str, key: str) -> str | None:
        """One record of ``group`` as it was last read (no copy of the group made)."""
        with self._lock:
            packed = self._whole.get(group)
            found, _ = self._kept.get(group, ({}, 0))
        return _unpacked(packed).get(key) if packed is not None else found.get(key)

    def get(self, group: str) -> dict[str, str]:
        with self._lock:
            packed = self._whole.get(group)
            found, _ = self._kept.get(group, ({}, 0))
        return _unpacked(packed) if packed is not None else dict(found)


def _unpacked(packed: bytes) -> dict[str, str]:
    """A group read whole, as ``LastReads.keep`` packed it."""
    found: dict[str, str] = json.loads(zlib.decompress(packed))
    return found
