"""The pending sends one replica holds: claims it made pending their send (``Store.claim_many``)
or took over (``beat.takeover``), from when it dispatches them until it settles them.

While it holds them, a thread of its own renews the lease of each held ``RENEW_AFTER`` since
its last (a send that blocks, a retry's backoff, a pool busy with other runs: slow is not
dead; a burst sent within that costs no renewal at all), and learns
which another replica took over all the same (its lease ran out while this process was
frozen or the store was out of reach): those are the other's to send, and are not sent or
run here. A settle the store did not answer is asked again by the same thread until it does
(and a takeover by this replica leaves those to it): a send made here is not sent again by
another replica only because the store blinked.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from cron_bridge.beat.planning import Planned
from cron_bridge.beat.store_health import StoreHealth
from cron_bridge.errors import StoreUnavailable
from cron_bridge.plumbing.outbound import logged_traceback
from cron_bridge.stores.base import PENDING_LEASE, Store

__all__ = ["RENEW_EVERY", "PendingSends"]

log = logging.getLogger(__name__)

RENEW_EVERY = 0.5  # seconds between two looks at what is held
RENEW_AFTER = 1.5  # seconds a lease is left unrenewed (of its 4: a slow renewal still lands)


class PendingSends:
    """The pending sends of one replica, renewed while it holds them."""

    def __init__(self, store: Store, replica: str, *, health: StoreHealth) -> None:
        self._store = store
        self._replica = replica
        self._health = health
        self._lock = threading.Lock()
        self._held: dict[str, tuple[Planned, float]] = {}  # id: item, when last leased
        self._taken: set[str] = set()  # held, and found taken over by another replica
        self._unsettled: dict[str, Planned] = {}  # sent here; the settle not answered yet
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, items: Sequence[Planned]) -> list[str]:
        """Hold the pending ones of ``items`` until ``done``; their ids."""
        now = time.monotonic()  # leased just before: claimed, or taken over
        held = {item.occurrence.id: (item, now) for item in items if item.pending}
        if not held:
            return []
        with self._lock:
            self._held.update(held)
            self._start()
        return list(held)

    def _start(self) -> None:
        """Start the renewing thread, once (called holding the lock)."""
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(
                target=self._renew, name="cron-bridge-renew", daemon=True
            )
            self._thread.start()

    def done(self, ids: Sequence[str]) -> None:
        """No longer held: sent and settled, run, or given up."""
        with self._lock:
            for occurrence_id in ids:
                self._held.pop(occurrence_id, None)
                self._taken.discard(occurrence_id)

    def holds(self, occurrence_id: str) -> bool:
        """Whether this replica holds the pending send of ``occurrence_id`` (not to take
        over from itself: slow, not dead)."""
        with self._lock:
            return occurrence_id in self._held

    def reclaim(self, occurrence_id: str) -> bool:
        """A takeover by this replica leased ``occurrence_id`` to it again: whether it still
        holds it (then it is its own again, and what holds it sends it)."""
        with self._lock:
            if occurrence_id in self._unsettled:
                return True  # sent here: its settle is asked again
            if occurrence_id not in self._held:
                return False
            item, _ = self._held[occurrence_id]
            self._held[occurrence_id] = (item, time.monotonic())
            self._taken.discard(occurrence_id)
            return True

    def taken(self, item: Planned) -> bool:
        """Whether a renewal found ``item`` taken over by another replica (its to send)."""
        with self._lock:
            return item.occurrence.id in self._taken

    def settle(self, items: Sequence[Planned]) -> None:
        """Settle the pending sends of ``items``, sent (or given up) here. When the store does
        not answer they stay pending, and the replica that takes them over after their lease
        sends them again: a copy the worker refuses."""
        items = [item for item in items if item.pending]
        if not items:
            return
        try:
            self._store.settle_many([item.occurrence for item in items], self._replica)
        except StoreUnavailable as exc:
            self._health.failed(exc)
            with self._lock:
                self._unsettled.update((item.occurrence.id, item) for item in items)
                self._start()
            log.warning(
                "could not settle %d sent occurrence(s), from %s; asking again until the "
                "store answers (should this replica stop first, another may send them "
                "again): %s",
                len(items),
                items[0].occurrence.id,
                exc,
            )

    def settle_one(self, item: Planned) -> bool:
        """Settle the pending send of an inline run about to start: whether it is still this
        replica's to run (False: another took it over).

        Raises:
            StoreUnavailable: it could not be asked (nothing starts: at most once).
        """
        mine = self._store.settle_many([item.occurrence], self._replica)[0]
        if mine:  # settled: nothing left to renew while it runs
            self.done([item.occurrence.id])
        return mine

    def stop(self) -> None:
        self._stop.set()

    def _settle_again(self) -> None:
        """Ask again to settle what was sent here and not settled (the store did not answer)."""
        with self._lock:
            items = list(self._unsettled.values())
        if not items:
            return
        try:
            self._store.settle_many([item.occurrence for item in items], self._replica)
        except StoreUnavailable as exc:
            self._health.failed(exc)
            return
        except Exception as exc:  # noqa: BLE001 - a store's own bug: said, asked again
            log.error(
                "settling %d sent occurrence(s) failed:\n%s", len(items), logged_traceback(exc)
            )
            return
        with self._lock:
            for item in items:
                self._unsettled.pop(item.occurrence.id, None)
        log.info("settled %d sent occurrence(s) once the store answered", len(items))

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_EVERY):
            self._settle_again()
            due = time.monotonic() - RENEW_AFTER
            with self._lock:
                held = [
                    item
                    for key, (item, leased) in self._held.items()
                    if leased <= due and key not in self._taken
                ]
            if not held:
                continue
            asked = time.monotonic()
            try:
                mine = self._store.settle_many(
                    [item.occurrence for item in held], self._replica, keep=PENDING_LEASE
                )
            except StoreUnavailable as exc:
                self._health.failed(exc)  # nobody takes them over while it does not answer
                continue
            except Exception as exc:  # noqa: BLE001 - a store's own bug: said, renewals go on
                log.error(
                    "renewing %d pending send(s) failed:\n%s", len(held), logged_traceback(exc)
                )
                continue
            lost = [item for item, kept in zip(held, mine, strict=True) if not kept]
            with self._lock:
                self._taken.update(item.occurrence.id for item in lost)
                for item in held:  # the lease counts from before the request
                    key = item.occurrence.id
                    if key in self._held and key not in self._taken:
                        self._held[key] = (item, asked)
            if lost:
                log.warning(
                    "%d occurrence(s) this replica had not sent yet were taken over by another "
                    "replica (their lease ran out: this one was frozen or cut off), from %s: "
                    "left to it",
                    len(lost),
                    lost[0].occurrence.id,
                )
