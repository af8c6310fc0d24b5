"""Change feeds: numbered entries that name what changed in a group of control records, so that
replicas follow the group by change instead of reading it whole.

A feed is a control group of its own (``schedule-feed`` for the stored schedules,
``pause-feed`` for the pauses): entries ``seq:<n>`` (``{"name": ..., "at": ...}``) and a
``head`` hint with the last number; an entry of a batch names several (``{"names": [...]}``).
A writer changes the records first, then appends entries naming them; a follower asks for the
entry after the last it saw with the head hint (one small read while nothing changes) and
reads again each record the entries name. Two writers never share a number: each takes the
next free ones (``add_controls``, all or none), at the top of the feed. The last ``kept``
entries are kept; a follower that fell further behind, or finds the head behind what it saw
(a store restored or failed over), is told to read the whole group again (``Followed``).

Entries are read as hostile: one that does not name a record (or that the store could not
hand over) is warned about once and skipped.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from cron_bridge.errors import StoreUnavailable
from cron_bridge.jobs import NAME_PATTERN
from cron_bridge.plumbing import inbound
from cron_bridge.stores.base import Store

__all__ = ["ENTRY_MAX", "Feed", "Followed"]

log = logging.getLogger(__name__)

ENTRY_MAX = 4096  # bytes of one entry read
HEAD_DIGITS = 19  # a head of more digits is no number a writer made
_TAKE_TRIES = 8  # numbers tried past the head hint before the top is looked for
_BATCH = 200  # entries asked for in one round trip


@dataclass(frozen=True, slots=True)
class Followed:
    """What a follower found after the last entry it saw.

    Attributes:
        seen: the last entry read (the one to follow from next time).
        names: the records the entries name, oldest first, each once.
        gap: entries after ``seen`` are missing (pruned while the follower was behind, or
            deleted), or more than ``most`` were pending: read the whole group again.
        back: the head hint is behind ``seen``: a store restored or failed over took the
            feed back, and new entries take numbers already seen (read the whole group
            again), or a writer has not yet moved the head past its entry (nothing lost).
    """

    seen: int
    names: list[str]
    gap: bool = False
    back: bool = False


@dataclass(frozen=True, slots=True)
class Feed:
    """The feed of changes in one control group."""

    group: str
    kept: int = 10_000  # entries: hours of changes at one a second

    def announce(self, store: Store, name: str) -> int:
        """Append an entry naming ``name``; the number it got. Replicas that listen to the
        store (``Store.notify``) look at once.

        Raises:
            StoreUnavailable: the store could not be reached (the record itself is written:
                followers see it at their next full read).
        """
        return self._append(store, [json.dumps({"name": name, "at": time.time()})])

    def announce_many(self, store: Store, names: Sequence[str]) -> int:
        """Append entries naming ``names``, as many to an entry as ``ENTRY_MAX`` holds, all
        in one write (their numbers taken at once); the last number. One notice.

        Raises:
            StoreUnavailable: the store could not be reached (the records themselves are
                written: followers see them at their next full read).
        """
        entries = _packed(names)
        return self._append(store, entries) if entries else self.head(store)

    def _append(self, store: Store, entries: list[str]) -> int:
        """Write ``entries`` under the next free numbers at the top of the feed, move the
        head hint there, prune what falls out of ``kept``, notify; the last number."""
        number = self._take(store, entries)
        top = number + len(entries) - 1
        pruned = range(max(1, number - self.kept), top - self.kept + 1)
        store.write_controls({self.group: {"head": str(top), **{f"seq:{n}": None for n in pruned}}})
        store.notify(self.group)
        return top

    def _take(self, store: Store, entries: list[str]) -> int:
        """The first of the numbers ``entries`` were written under, at the top of the feed.

        A writer starts at the head hint and goes past numbers others took. Numbers are
        taken in order, so one taken above a number nobody holds is in a hole: pruned while
        this writer was behind (it read the head, then stalled while ``kept`` more were
        written). Followers are past it, so the entries are written again at the top (those
        in the hole name the same records: harmless). A number deleted in the middle, or a
        head hint that went back to 0, can still be taken: the head then goes back, and
        followers read every record again within ``BACK_EVERY`` of their syncs.
        """
        number = self.head(store) + 1
        for tries in range(_TAKE_TRIES + 64):
            block = {f"seq:{number + i}": entry for i, entry in enumerate(entries)}
            taken = store.add_controls(self.group, block)
            if taken:  # another writer took some: past them
                highest = max(int(key[4:]) for key in taken if key[4:].isdigit())
                near = tries < _TAKE_TRIES and len(entries) == 1
                number = highest + 1 if near else self._past_top(store, highest)
                continue
            if number == 1 or store.control(self.group, f"seq:{number - 1}") is not None:
                return number
            number = self._top(store) + 1
        raise StoreUnavailable(f"the feed {self.group} has no free numbers near {number}")

    def _top(self, store: Store) -> int:
        """The highest number taken, from the feed's keys (one read of up to ``kept`` and a
        few more keys: only when the head hint cannot be trusted)."""
        numbers = [
            int(key[4:])
            for key in store.control_keys(self.group, most=2 * self.kept + 1_000)
            if key.startswith("seq:") and key[4:].isdigit() and len(key) <= 4 + HEAD_DIGITS
        ]
        return max(numbers, default=0)

    def _past_top(self, store: Store, taken: int) -> int:
        """The first free number above the run of taken ones from ``taken``: doubling the
        step until a free one, then halving back (round trips: twice the log of the gap)."""
        step, low = 1, taken
        while store.control(self.group, f"seq:{low + step}") is not None:
            low += step
            step *= 2
        high = low + step  # free; low is taken
        while high - low > 1:
            middle = (low + high) // 2
            if store.control(self.group, f"seq:{middle}") is None:
                high = middle
            else:
                low = middle
        return high

    def head(self, store: Store) -> int:
        """The feed's last number, as its ``head`` hint says (0 for none or a bad one).

        Raises:
            StoreUnavailable: the store could not be reached.
        """
        return _number(store.control(self.group, "head"))

    def follow(self, store: Store, seen: int, most: int) -> Followed:
        """The entries after ``seen``, at most ``most`` of them: the next one and the head
        hint in one round trip (all a look costs while nothing changed), then more a round
        trip, up to ``_BATCH``, while they keep coming.

        Raises:
            StoreUnavailable: the store could not be reached (nothing after ``seen`` is
                counted as read).
        """
        names: dict[str, None] = {}
        start, batch = seen, 1
        while seen - start < most:
            wanted = [f"seq:{n}" for n in range(seen + 1, seen + 1 + batch)]
            batch = min(batch * 8, _BATCH)
            # The head first: a store that reads them one by one can then only see an entry
            # newer than the head (``back``: nothing lost), never the head past an entry it
            # found missing (a ``gap`` that is none).
            found = store.controls_of(self.group, ["head", *wanted])
            for key in wanted:
                raw = found.get(key)
                if raw is None:
                    # The end: the head hint says whether entries after it are missing.
                    head = _number(found.get("head"))
                    return Followed(seen, list(names), gap=head > seen, back=head < seen)
                seen += 1
                names.update(dict.fromkeys(self._names(seen, raw)))
        return Followed(seen, list(names), gap=True)

    def _names(self, number: int, raw: str) -> list[str]:
        """The records an entry names (``name``, or ``names`` for a batch); none, warned
        once, for an entry no replica wrote (or one the store could not hand over:
        ``UNREADABLE``)."""
        try:
            data = inbound.loads(raw, max_bytes=ENTRY_MAX)
            if not isinstance(data, dict):
                raise ValueError("not an object")
            names = [data["name"]] if "name" in data else data.get("names")
            if not isinstance(names, list) or not names or len(names) > ENTRY_MAX:
                raise ValueError("no name")
            for name in names:
                if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
                    raise ValueError("no name")
        except ValueError as exc:
            inbound.warn_once(
                log,
                self.group,
                f"seq:{number}",
                raw,
                "skipping the entry %d of %s %.100r: %s",
                number,
                self.group,
                raw,
                exc,
            )
            return []
        return names


def _packed(names: Sequence[str]) -> list[str]:
    """``names`` as entries of at most ``ENTRY_MAX`` bytes: ``{"names": [...], "at": ...}``."""
    at = time.time()
    entries: list[str] = []
    batch: list[str] = []
    size = 0
    for name in dict.fromkeys(names):
        if batch and size + len(name) + 4 > ENTRY_MAX - 64:
            entries.append(json.dumps({"names": batch, "at": at}))
            batch, size = [], 0
        batch.append(name)
        size += len(name) + 4
    if batch:
        entries.append(json.dumps({"names": batch, "at": at}))
    return entries


def _number(raw: str | None) -> int:
    """A head hint as a number; 0 for none or a bad one."""
    ok = raw is not None and raw.isascii() and raw.isdigit() and len(raw) <= HEAD_DIGITS
    return int(raw) if ok else 0  # type: ignore[arg-type]
