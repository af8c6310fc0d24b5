"""The catalog a beat publishes for dashboards of other processes: every job at start, then
only the entries of the jobs that changed, without reading the whole catalog again."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

from cron_bridge import declare
from cron_bridge.control import catalog
from cron_bridge.control.catalog import Publisher
from cron_bridge.errors import StoreUnavailable
from cron_bridge.jobs import Job
from cron_bridge.stores import MemoryStore


class WatchedStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__(allow_local_cluster=True)
        self.groups_read: list[str] = []
        self.written: list[str] = []

    def controls(self, group: str, **bounds: int) -> dict[str, str]:
        self.groups_read.append(group)
        return super().controls(group, **bounds)

    def put_controls(self, group: str, values: dict[str, str]) -> None:  # type: ignore[override]
        self.written.extend(values)
        super().put_controls(group, values)


class DownStore(MemoryStore):
    """Refuses control reads and writes while ``down``."""

    down = False

    def control(self, group: str, key: str) -> str | None:
        if self.down:
            raise StoreUnavailable("down", host="memory")
        return super().control(group, key)

    def put_controls(self, group: str, values: dict[str, str]) -> None:  # type: ignore[override]
        if self.down:
            raise StoreUnavailable("down", host="memory")
        super().put_controls(group, values)


def _job(name: str, every: str = "1h") -> Job:
    return declare(name, every=every, target="inline", handler=lambda ctx: None)


def _published(publisher: Publisher, jobs: list[Job]) -> None:
    publisher.maybe_publish(lambda: jobs)
    thread = publisher._thread
    assert thread is not None
    thread.join(10)


def test_a_change_publishes_its_entry_alone() -> None:
    store = WatchedStore()
    jobs = [_job(f"tenant-{n}") for n in range(500)]
    publisher = Publisher(store)
    _published(publisher, jobs)
    assert len(catalog.read(store)) == 500 and store.groups_read == [catalog.GROUP, catalog.GROUP]
    store.groups_read.clear()
    store.written.clear()
    jobs[7] = _job("tenant-7", every="2h")
    publisher.changed("tenant-7")
    publisher._next = 0.0  # the 30 s between publishes, passed
    _published(publisher, jobs)
    assert store.written == ["tenant-7"] and store.groups_read == []
    assert catalog.read(store)["tenant-7"].schedule == "every 2h"
    before = time.monotonic()
    publisher.maybe_publish(lambda: jobs)  # nothing changed: nothing to do
    assert publisher._next <= before + Publisher.INTERVAL and store.written == ["tenant-7"]


def test_an_on_demand_job_keeps_the_entry_key_every_version_reads() -> None:
    """``on_demand`` is written under the entry's key ``external``, which replicas and
    dashboards of every version read, and an entry written so reads back as on demand."""
    store = MemoryStore()
    job = declare("cache.warm", every="1h", on_demand=True, target="inline", handler=print)
    assert catalog.publish(store, [job]) == 1
    entry = json.loads(store.control(catalog.GROUP, "cache.warm") or "")
    assert entry["external"] is True and "on_demand" not in entry
    assert catalog.read(store)["cache.warm"].on_demand is True


def test_a_job_is_first_declared_when_the_replica_took_it_up_not_when_it_was_written() -> None:
    """The beat claims a job's occurrences from when it takes the job up; its entry is written
    up to 30 s later. The entry's first declaration is the earlier time (an audit leaves out
    what is due before it), and a publish the store refused keeps it for the next one."""
    store = DownStore()
    started = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
    publisher = Publisher(store, started=started)
    _published(publisher, [_job("declared.at.start")])
    assert catalog.first_seen(store, "declared.at.start") == started
    added = datetime(2026, 12, 4, 9, 0, 5, 250000, tzinfo=UTC)
    later = _job("stored.later")
    publisher.changed("stored.later", at=added)
    publisher.changed("stored.later", at=added + timedelta(seconds=9))  # replaced: the first stays
    publisher._next = 0.0  # the 30 s between publishes, passed
    store.down = True
    _published(publisher, [later])
    store.down = False
    assert catalog.first_seen(store, "stored.later") is None
    publisher._next = 0.0
    _published(publisher, [later])
    assert catalog.first_seen(store, "stored.later") == added
