"""Run records that reach the store even when it was down as they were written.

A record the store cannot take (it is restarting, failing over, unreachable for a few
seconds) is kept in memory and written with the next records, or by ``flush()`` once the
store answers again, so the history and the audit still say what happened to every
occurrence instead of "claimed, recorded nothing". At most ``LIMIT`` records are kept; past
that the oldest are dropped, and how many is logged.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence

from cron_bridge.errors import StoreUnavailable
from cron_bridge.stores.base import Store
from cron_bridge.stores.records import RunRecord

__all__ = ["LOGGED_EACH", "Recorder", "log_records"]

log = logging.getLogger(__name__)

LIMIT = 10_000  # records kept while the store is down (a few MB)
LOGGED_EACH = 20  # a batch of records up to this size is logged a line per record
FLUSH_RETRY_FIRST = 0.25  # seconds before flush_within asks the store again; doubled up to
FLUSH_RETRY_MAX = 1.0


class Recorder:
    """Writes run records to ``store``, keeping those it could not write for later."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._pending: deque[RunRecord] = deque()
        self.dropped = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    def write(self, records: Sequence[RunRecord]) -> None:
        """Write ``records`` after any kept from before.

        Raises:
            StoreUnavailable: the store did not take them; they are kept for later.
        """
        with self._lock:
            batch = [*self._pending, *records]
            self._pending.clear()
        if not batch:
            return
        try:
            self.store.record_many(batch)
        except StoreUnavailable:
            self._keep(batch)
            raise
        if len(batch) > len(records):
            log.info(
                "wrote %d run record(s) kept while the store was down", len(batch) - len(records)
            )

    def flush(self) -> None:
        """Write what was kept, if anything; quietly keep it if the store is still down."""
        if self._pending:
            with contextlib.suppress(StoreUnavailable):
                self.write([])

    def flush_within(self, seconds: float) -> bool:
        """Write what was kept, asking the store again with backoff until it takes them or
        ``seconds`` have passed (plus at most one request's own timeout: the tries run on the
        caller's thread, since an exit hook may not start one). Returns whether nothing is
        left; what is left is said in one line."""
        give_up_at = time.monotonic() + seconds
        wait = FLUSH_RETRY_FIRST
        while self._pending:
            try:
                self.write([])
            except StoreUnavailable as exc:
                left = give_up_at - time.monotonic()
                if left <= 0:
                    log.warning(
                        "%d run record(s) not written: the store did not take them within %gs: %s",
                        self.pending,
                        seconds,
                        exc,
                    )
                    return False
                time.sleep(min(wait, left))
                wait = min(wait * 2, FLUSH_RETRY_MAX)
        return True

    def _keep(self, batch: list[RunRecord]) -> None:
        with self._lock:
            # Newer records may have been kept meanwhile by another thread: ours go first.
            self._pending.extendleft(reversed(batch))
            over = len(self._pending) - LIMIT
            for _ in range(max(0, over)):
                self._pending.popleft()
            if over > 0:
                self.dropped += over
                log.warning(
                    "dropped %d run record(s): the store has been down too long to keep "
                    "them all (%d kept)",
                    over,
                    LIMIT,
                )


def log_records(records: Sequence[RunRecord]) -> None:
    """A line per record; for a larger batch (a burst), a line per outcome and replica, and
    the records one by one at debug level (a line costs more than the record's own write)."""
    if len(records) <= LOGGED_EACH:
        for record in records:
            log.info("%s %s on %s", record.outcome, record.occurrence_id, record.replica)
        return
    groups: dict[tuple[str, str], list[RunRecord]] = {}
    for record in records:
        groups.setdefault((record.outcome, record.replica), []).append(record)
    for (outcome, replica), group in groups.items():
        log.info(
            "%s %d occurrence(s) on %s, from %s to %s",
            outcome,
            len(group),
            replica,
            group[0].occurrence_id,
            group[-1].occurrence_id,
        )
    if log.isEnabledFor(logging.DEBUG):
        for record in records:
            log.debug("%s %s on %s", record.outcome, record.occurrence_id, record.replica)
