"""Change feeds: numbered entries that name what changed in a group of control records, so that
replicas follow the group by change instead of reading it whole.

A feed is a control group of its own (``schedule-feed`` for the stored schedules,
``pause-feed`` for the pauses): entries ``seq:<n>`` (``{"name": ..., "at": ...}``) and a
``head`` hint with the last number. A writer changes the record first, then appends an entry
naming it; a follower asks for the entry after the last it saw (one small read while nothing
changes) and reads again each record an entry names. Two writers never share a number: each
takes the next free one (``add_control``). The last ``kept`` entries are kept; a follower that
fell further behind, or missed an entry, catches up at its next full read of the group.

Entries are read as hostile: one that does not name a record (or that the store could not
hand over) is warned about once and skipped.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

from cron_bridge.errors import StoreUnavailable
from cron_bridge.jobs import NAME_PATTERN
from cron_bridge.plumbing import inbound
from cron_bridge.stores.base import Store

__all__ = ["ENTRY_MAX", "Feed"]

log = logging.getLogger(__name__)

ENTRY_MAX = 4096  # bytes of one entry read
_TAKE_TRIES = 1_000  # feed numbers tried past the head hint before giving up


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
        number = self.head(store) + 1
        entry = json.dumps({"name": name, "at": time.time()})
        for _ in range(_TAKE_TRIES):
            if store.add_control(self.group, f"seq:{number}", entry):
                break
            number += 1  # another writer took it: the next one
        else:
            raise StoreUnavailable(f"the feed {self.group} has no free number near {number}")
        store.put_control(self.group, "head", str(number))
        store.notify(self.group)
        if number > self.kept:
            store.put_control(self.group, f"seq:{number - self.kept}", None)
        return number

    def head(self, store: Store) -> int:
        """The feed's last number, as its ``head`` hint says (0 for none or a bad one).

        Raises:
            StoreUnavailable: the store could not be reached.
        """
        raw = store.control(self.group, "head")
        ok = raw is not None and raw.isascii() and raw.isdigit() and len(raw) < 16
        return int(raw) if ok else 0  # type: ignore[arg-type]

    def follow(self, store: Store, seen: int, most: int) -> tuple[int, list[str]]:
        """The entries after ``seen``, at most ``most`` of them: the last number read and the
        names they give, oldest first, each once.

        Raises:
            StoreUnavailable: the store could not be reached (nothing after ``seen`` is
                counted as read).
        """
        names: dict[str, None] = {}
        for _ in range(most):
            raw = store.control(self.group, f"seq:{seen + 1}")
            if raw is None:
                break
            seen += 1
            name = self._name(seen, raw)
            if name is not None:
                names[name] = None
        return seen, list(names)

    def _name(self, number: int, raw: str) -> str | None:
        """The record an entry names; None, warned once, for an entry no replica wrote (or
        one the store could not hand over: ``UNREADABLE``)."""
        try:
            data = inbound.loads(raw, max_bytes=ENTRY_MAX)
            name = data.get("name") if isinstance(data, dict) else None
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
            return None
        return name
