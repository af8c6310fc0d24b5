"""Reading what comes from outside (store records, request bodies, CLI values): JSON of
bounded size and depth, and a warning logged once per bad record instead of once per look.

Every record in the store is hostile input, whoever wrote it: a stored schedule nested
100,000 deep must not raise ``RecursionError`` through the beat loop, and a pause record
that cannot be read must not write a warning every time a replica claims a batch.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import threading
from collections import OrderedDict
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = [
    "EARLIEST",
    "INT_MAX",
    "LATEST",
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_EPOCH_MS",
    "instant",
    "loads",
    "moment",
    "text",
    "warn_once",
]

MAX_DEPTH = 32  # nesting of arrays and objects; what cron-bridge writes stays under 6
MAX_BYTES = 1 << 20

# A string (its escapes included) or a bracket: the brackets outside strings give the depth.
# A string (to its end when it is never closed), or a bracket. Possessive throughout, and a
# string that does not close matches the rest: no text makes it backtrack (an unclosed string
# made it try again from every quote: a 128 KiB line took a minute).
_TOKENS = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\Z)|[\[\]{}]', re.S)


def loads(
    text: str | bytes | bytearray, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH
) -> Any:
    """``json.loads`` for text nobody vouches for.

    Raises:
        ValueError: not JSON, longer than ``max_bytes``, nested deeper than ``max_depth``,
            or holding ``NaN``, ``Infinity``, a number too large for a float or an integer
            outside a signed 64-bit one (which every reader can take: ``float()``,
            ``math.isfinite`` and ``timedelta`` raise ``OverflowError`` past them).
    """
    if isinstance(text, bytes | bytearray):
        if len(text) > max_bytes:
            raise ValueError(f"JSON of {len(text)} bytes, more than {max_bytes}")
        text = bytes(text).decode("utf-8")  # UnicodeDecodeError is a ValueError
    elif len(text) > max_bytes:  # characters: at least as many bytes
        raise ValueError(f"JSON of {len(text)} characters, more than {max_bytes}")
    _check_depth(text, max_depth)
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite, parse_int=_int64)
    except RecursionError:  # cannot happen past the depth check; kept as a last line
        raise ValueError("JSON nested too deep") from None


def _check_depth(text: str, limit: int) -> None:
    depth = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > limit:
                raise ValueError(f"JSON nested deeper than {limit}")
        elif token in "]}":
            depth -= 1


def _no_constant(name: str) -> Any:
    raise ValueError(f"JSON with {name}")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"JSON number out of range: {text[:40]}")
    return value


INT_MAX = 2**63 - 1


def _int64(text: str) -> int:
    # Digits first: int() of 4,300 digits and more raises ValueError itself, and costs
    # quadratic time below that.
    if len(text) > 20:
        raise ValueError(f"JSON integer out of range: {text[:40]}")
    value = int(text)
    if not -INT_MAX - 1 <= value <= INT_MAX:
        raise ValueError(f"JSON integer out of range: {text[:40]}")
    return value


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
EARLIEST = _EPOCH  # nothing cron-bridge writes is older: occurrences are epoch milliseconds
# Two days short of the last instant a datetime holds, so that a time read from a store can be
# shown in any zone and a day added to it without OverflowError.
LATEST = datetime(9999, 12, 29, 23, 59, 59, 999_000, tzinfo=UTC)
MAX_EPOCH_MS = (LATEST - _EPOCH) // timedelta(milliseconds=1)


def instant(ms: object) -> datetime | None:
    """The aware UTC time of ``ms`` (epoch milliseconds: a whole number, or its text), or None
    when it is none or outside 1970 to 9999 (a float, ``9e18``, ``NaN``)."""
    if isinstance(ms, bytes):
        ms = ms.decode(errors="replace")
    if isinstance(ms, str) and ms.isascii() and ms.isdigit() and len(ms) <= 16:
        ms = int(ms)
    if type(ms) is not int or not 0 <= ms <= MAX_EPOCH_MS:
        return None
    return _EPOCH + timedelta(milliseconds=ms)


def moment(value: object) -> datetime | None:
    """The aware UTC time of ``value`` (a datetime, or ISO-8601 text) read from a store, or
    None when it has no zone, does not parse, or lies outside ``EARLIEST`` to ``LATEST``."""
    if isinstance(value, str) and len(value) <= 64:
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if not isinstance(value, datetime) or value.utcoffset() is None:
        return None
    try:
        at = value.astimezone(UTC)
    except OverflowError:  # past the end of the calendar in UTC
        return None
    return at if EARLIEST <= at <= LATEST else None


def text(raw: object, where: str, key: object, *, max_bytes: int = MAX_BYTES) -> str | None:
    """The text a store holds, from the bytes its server sent (or text a client already
    decoded): strict UTF-8 of at most ``max_bytes``. None, warned once, for anything else
    (bytes that are not UTF-8, a number or blob where text belongs, a value too large).

    Args:
        where: the record's place, for the warning (``controls:pause``, ``runs of job``).
        key: the record's key there, as read (bytes or text).
    """
    if isinstance(raw, str):
        try:
            size = len(raw.encode())
        except UnicodeEncodeError:  # a lone surrogate (a client decoding with surrogateescape)
            why = "text that is not UTF-8"
        else:
            if size <= max_bytes:
                return raw
            why = f"{size} bytes, more than {max_bytes}"
    elif isinstance(raw, bytes | bytearray | memoryview):
        raw = bytes(raw)
        if len(raw) > max_bytes:
            why = f"{len(raw)} bytes, more than {max_bytes}"
        else:
            try:
                return raw.decode()
            except UnicodeDecodeError:
                why = "bytes that are not UTF-8"
    else:
        why = f"a {type(raw).__name__} where text belongs"
    shown = key if isinstance(key, str) else repr(key)
    warn_once(_log, where, shown, raw, "skipping a value in %s at %.200r: %s", where, shown, why)
    return None


_log = logging.getLogger(__name__)
_SEEN_MAX = 10_000
_seen: OrderedDict[tuple[str, str, str], None] = OrderedDict()
_lock = threading.Lock()


def warn_once(
    logger: logging.Logger, where: str, key: str, raw: object, message: str, *args: object
) -> None:
    """Log ``message`` at WARNING the first time this record (``where``, ``key`` and its
    content ``raw``) is found bad; a record changed since is logged again. Remembers the last
    ``_SEEN_MAX`` records."""
    if isinstance(raw, bytes | bytearray):
        content = bytes(raw)
    elif isinstance(raw, str):
        content = raw.encode(errors="surrogatepass")
    else:
        content = repr(raw).encode(errors="surrogatepass")
    digest = hashlib.sha1(content, usedforsecurity=False).hexdigest()
    seen = (where, key[:300], digest)
    with _lock:
        if seen in _seen:
            _seen.move_to_end(seen)
            return
        _seen[seen] = None
        if len(_seen) > _SEEN_MAX:
            _seen.popitem(last=False)
    logger.warning(message, *args)
