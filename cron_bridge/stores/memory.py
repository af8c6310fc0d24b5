"""``MemoryStore``: one process only, for tests, notebooks and single-process setups."""

from __future__ import annotations

import logging
import os
import threading
from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from cron_bridge.clock import Clock, SystemClock
from cron_bridge.errors import ConfigError
from cron_bridge.jobs import CLAIM_TTL, Occurrence
from cron_bridge.schedules import EPOCH
from cron_bridge.stores import run_summary
from cron_bridge.stores.base import PENDING_LEASE, TAKE_OVER_MOST, Store
from cron_bridge.stores.records import (
    CONTROLS_BYTES,
    CONTROLS_MAX,
    ReplicaInfo,
    RunRecord,
    control_records,
)

__all__ = ["MemoryStore"]

log = logging.getLogger(__name__)


class MemoryStore(Store):
    """All state in this process's memory: replicas in other processes see none of it.

    Args:
        clock: where expiry reads the time (a fake clock in tests).
        history_limit: run records kept per job.
        allow_local_cluster: let cluster jobs start on it when ``CRON_BRIDGE_ENV=production``.
    """

    distributed = False
    atomic_batches = True

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        history_limit: int = 1000,
        allow_local_cluster: bool = False,
    ) -> None:
        super().__init__()
        self._clock = clock or SystemClock()
        self.history_limit = history_limit
        self._allow_local_cluster = allow_local_cluster
        self._lock = threading.Lock()
        self._keys: dict[str, tuple[str, datetime]] = {}
        self._last: dict[str, datetime] = {}
        self._runs: defaultdict[str, deque[RunRecord]] = defaultdict(
            lambda: deque(maxlen=self.history_limit)
        )
        self._replicas: dict[str, datetime] = {}
        self._controls: defaultdict[str, dict[str, str]] = defaultdict(dict)
        self._fences: defaultdict[str, int] = defaultdict(int)
        self._pending: dict[str, tuple[str, datetime]] = {}  # claim key: owner, lease's end
        # Claim key: who settled it, until when the marker is kept; oldest first.
        self._settled: dict[str, tuple[str, datetime]] = {}
        log.warning(
            "the memory store keeps claims in this process only: replicas in other processes "
            "will run the same occurrences; use sqlite://, redis:// or postgresql:// for a cluster"
        )

    @property
    def url(self) -> str:
        return "memory://"

    def ping(self) -> None:
        self.stats.add()

    def ensure_cluster_capable(self) -> None:
        if os.environ.get("CRON_BRIDGE_ENV") == "production" and not self._allow_local_cluster:
            raise ConfigError(
                "cluster jobs refuse to start on the one-process memory store when "
                "CRON_BRIDGE_ENV=production; use a shared store, or pass allow_local_cluster=True",
                option="store",
                value=self.url,
            )

    def _take(self, key: str, owner: str, ttl: timedelta, now: datetime) -> bool:
        held = self._keys.get(key)
        if held is not None and held[1] > now:
            return False
        self._keys[key] = (owner, now + ttl)
        return True

    def claim_many(
        self,
        occurrences: Sequence[Occurrence],
        owner: str,
        *,
        ttl: timedelta = CLAIM_TTL,
        pending: Sequence[bool] | None = None,
        lease: timedelta = PENDING_LEASE,
    ) -> list[bool]:
        flags = pending or [False] * len(occurrences)
        with self._lock:
            self.stats.add()
            now = self._clock.now()
            won = [self._take(o.claim_key, owner, ttl, now) for o in occurrences]
            for occurrence, mine, flag in zip(occurrences, won, flags, strict=True):
                last = self._last.get(occurrence.job, EPOCH)
                self._last[occurrence.job] = max(last, occurrence.scheduled_at)
                if mine and flag:
                    self._pending[occurrence.claim_key] = (owner, now + lease)
            return won

    def settle_many(
        self, occurrences: Sequence[Occurrence], owner: str, *, keep: timedelta | None = None
    ) -> list[bool]:
        with self._lock:
            self.stats.add()
            now = self._clock.now()
            others = set()
            for key in {occurrence.claim_key for occurrence in occurrences}:
                held = self._pending.get(key) or self._settled.get(key)
                if held is None:
                    continue  # never pending (or its marker outlived): the caller's
                if held[0] != owner:
                    others.add(key)
                elif key in self._pending:
                    if keep is None:
                        del self._pending[key]
                        self._settled[key] = (owner, now + CLAIM_TTL)
                    else:
                        self._pending[key] = (owner, now + keep)
            return self._first_of(occurrences, others, held=False)

    def take_over(
        self, owner: str, *, lease: timedelta = PENDING_LEASE, most: int = TAKE_OVER_MOST
    ) -> list[tuple[str, str]]:
        with self._lock:
            self.stats.add()
            now = self._clock.now()
            while self._settled:  # the markers as old as their claims, oldest first
                oldest = next(iter(self._settled))
                if self._settled[oldest][1] > now:
                    break
                del self._settled[oldest]
            ran_out = sorted(
                (until, key, held) for key, (held, until) in self._pending.items() if until <= now
            )[:most]
            for _, key, _ in ran_out:
                self._pending[key] = (owner, now + lease)
            return [(key, held) for _, key, held in ran_out]

    def put_control(self, group: str, key: str, value: str | None) -> None:
        with self._lock:
            self.stats.add()
            if value is None:
                self._controls[group].pop(key, None)
            else:
                self._controls[group][key] = value

    def add_control(self, group: str, key: str, value: str) -> bool:
        with self._lock:
            self.stats.add()
            records = self._controls[group]
            if key in records:
                return False
            records[key] = value
            return True

    def write_controls(self, writes: Mapping[str, Mapping[str, str | None]]) -> None:
        with self._lock:
            self.stats.add()
            for group, values in writes.items():
                records = self._controls[group]
                for key, value in values.items():
                    if value is None:
                        records.pop(key, None)
                    else:
                        records[key] = value

    def add_controls(self, group: str, values: Mapping[str, str]) -> list[str]:
        with self._lock:
            self.stats.add()
            records = self._controls[group]
            taken = sorted(key for key in values if key in records)
            if not taken:
                records.update(values)
            return taken

    def replace_controls(self, group: str, values: Mapping[str, str]) -> list[str]:
        with self._lock:
            self.stats.add()
            records = self._controls[group]
            missing = sorted(key for key in values if key not in records)
            if not missing:
                records.update(values)
            return missing

    def controls(
        self, group: str, *, most: int = CONTROLS_MAX, max_bytes: int = CONTROLS_BYTES
    ) -> dict[str, str]:
        with self._lock:
            self.stats.add()
            found = list(self._controls.get(group, {}).items())
        # Bounded as every store bounds a group (the records come from this process, but from
        # whoever holds its Python API: a dashboard's or a test's writes).
        return control_records(found, group, most=most, max_bytes=max_bytes)

    def control(self, group: str, key: str) -> str | None:
        with self._lock:
            self.stats.add()
            return self._controls.get(group, {}).get(key)

    def holder(self, key: str) -> str | None:
        with self._lock:
            self.stats.add()
            held = self._keys.get(key)
            return held[0] if held is not None and held[1] > self._clock.now() else None

    def holders(self, keys: Sequence[str]) -> list[str | None]:
        with self._lock:
            self.stats.add()
            now = self._clock.now()
            held = [self._keys.get(key) for key in keys]
            return [h[0] if h is not None and h[1] > now else None for h in held]

    def last_claimed(self, jobs: Sequence[str]) -> dict[str, datetime]:
        with self._lock:
            self.stats.add()
            return {job: self._last[job] for job in jobs if job in self._last}

    def acquire(self, key: str, owner: str, ttl: timedelta) -> bool:
        with self._lock:
            self.stats.add()
            return self._take(key, owner, ttl, self._clock.now())

    def acquire_fenced(self, key: str, owner: str, ttl: timedelta) -> int | None:
        with self._lock:
            self.stats.add()
            if not self._take(key, owner, ttl, self._clock.now()):
                return None
            self._fences[key] += 1
            return self._fences[key]

    def extend(self, key: str, owner: str, ttl: timedelta) -> bool:
        with self._lock:
            self.stats.add()
            now = self._clock.now()
            held = self._keys.get(key)
            if held is None or held[0] != owner or held[1] <= now:
                return False
            self._keys[key] = (owner, now + ttl)
            return True

    def release(self, key: str, owner: str) -> bool:
        with self._lock:
            self.stats.add()
            held = self._keys.get(key)
            if held is None or held[0] != owner:
                return False
            del self._keys[key]
            return held[1] > self._clock.now()

    def record_many(self, records: Sequence[RunRecord]) -> None:
        found = run_summary.summaries(records)
        with self._lock:
            self.stats.add()
            for record in records:
                self._runs[record.job].appendleft(record)
            ceiling_ms = run_summary.ceiling(self._clock.now())
            for group, entries in found.items():
                self._raise(group, entries, ceiling_ms)

    def raise_controls(self, group: str, values: Mapping[str, str], *, ceiling_ms: int) -> None:
        with self._lock:
            self.stats.add()
            self._raise(group, values, ceiling_ms)

    def _raise(self, group: str, values: Mapping[str, str], ceiling_ms: int) -> None:
        records = self._controls[group]
        records.update(run_summary.keep_greatest(values, records, ceiling_ms))

    def history(self, job: str, n: int = 20) -> list[RunRecord]:
        with self._lock:
            self.stats.add()
            return list(self._runs.get(job, ()))[:n]

    def heartbeat(
        self, replica: str, ttl: timedelta, *, clock_offset_ms: float | None = None
    ) -> datetime | None:
        with self._lock:
            self.stats.add()
            self._replicas[replica] = self._clock.now() + ttl
        return None  # in-process: the replica's own clock

    def replicas(self) -> list[ReplicaInfo]:
        with self._lock:
            self.stats.add()
            now = self._clock.now()
            return [
                ReplicaInfo(id=replica, expires_at=expires)
                for replica, expires in sorted(self._replicas.items())
                if expires > now
            ]

    def close(self) -> None:
        """Nothing to close: the state goes with the object."""
