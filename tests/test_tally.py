"""The overview's counts, made from the run summaries, the pauses and every job's lock in a few
reads, say of each job what its row says from its own records: failing, late, running and
paused alike, on generated histories; and a Tally shares one count among many pages."""

from __future__ import annotations

import re
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cron_bridge.beat.replica import Beat
from cron_bridge.control import pause as control
from cron_bridge.http.overview import PER_PAGE, _JobState, overview_page
from cron_bridge.http.tally import Tally, count
from cron_bridge.http.views import View, last_run, marks_of, marks_of_many
from cron_bridge.jobs import Job, Occurrence, declare
from cron_bridge.plumbing.keys import lock_key
from cron_bridge.stores import RunRecord, Store, run_summary, store_from_url
from cron_bridge.stores.memory import MemoryStore
from tests.waiting import wait_for

pytestmark = pytest.mark.unit

NOW = datetime.now(UTC).replace(second=30, microsecond=0)

# One job's history, as replicas and workers write it: for each of its last few minutes,
# nothing, a skip, or an enqueued send followed by its attempts (failures, then maybe a
# completion or an abort), the records in any order; maybe a lock on one of the minutes.
_ATTEMPTS = st.integers(0, 2).flatmap(
    lambda failures: st.sampled_from([None, "completed", "aborted"]).map(
        lambda last: (
            [(n + 1, "failed") for n in range(failures)] + ([(failures + 1, last)] if last else [])
        )
    )
)
minute = st.one_of(
    st.just([]),
    st.sampled_from([[(1, "missed")], [(1, "skipped-overlap")]]),
    _ATTEMPTS.map(lambda attempts: [(1, "enqueued"), *attempts]),
)
history = st.fixed_dictionaries(
    {
        "minutes": st.lists(minute, min_size=0, max_size=5),
        "running": st.one_of(st.none(), st.integers(0, 5)),
        "paused": st.booleans(),
        "grace": st.sampled_from(["10s", "5m"]),
    }
)


def _job(n: int, grace: str) -> Job:
    return declare(
        f"tenant-{n}.sync", every="1m", misfire_grace=grace, adapter="test", task="t", queue="q"
    )


def _write(store: Store, job: Job, drawn: dict[str, Any]) -> None:
    minutes = drawn["minutes"]
    records = []
    for i, recorded in enumerate(minutes):  # the last one is this minute's
        at = NOW.replace(second=0) - timedelta(minutes=len(minutes) - 1 - i)
        for attempt, outcome in recorded:
            records.append(
                RunRecord(
                    job=job.name,
                    occurrence_id=Occurrence(job=job.name, scheduled_at=at).id,
                    outcome=outcome,
                    trigger="schedule",
                    replica="beat-1",
                    started_at=at + timedelta(seconds=attempt),
                    attempt=attempt,
                )
            )
    store.record_many(records[::-1] if len(records) % 2 else records)  # any order
    running = drawn["running"]
    # A run holds the lock of an occurrence that has not ended, or of one due now that no
    # record names yet (a lock on an ended one is a stale one, or a retry: the row draws those
    # from records a summary does not keep).
    if running is not None and running < len(minutes):
        ends = {outcome for _, outcome in minutes[len(minutes) - 1 - running]}
        assume(not ends & {"completed", "failed", "aborted"})
    if running is not None:
        at = NOW.replace(second=0) - timedelta(minutes=running)
        occurrence = Occurrence(job=job.name, scheduled_at=at)
        store.acquire(lock_key(job.name), f"worker-1|{occurrence.id}|1", timedelta(minutes=5))
    if drawn["paused"]:
        control.pause(store, job.name, by="test")


@settings(
    max_examples=150,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@given(drawn=st.lists(history, min_size=1, max_size=4))
def test_the_counts_say_of_each_job_what_its_row_says(drawn: list[dict[str, Any]]) -> None:
    store = MemoryStore()
    jobs = {}
    for n, one in enumerate(drawn):
        job = _job(n, one["grace"])
        jobs[job.name] = job
        _write(store, job, one)
    names = sorted(jobs)
    counted = count(store, names, jobs.get, NOW)
    paused = control.paused(store)
    for name in names:
        records, marks = marks_of(store, name, jobs[name], NOW, after_newest=True)
        row = _JobState(None, jobs[name], marks, last_run(records), name in paused)  # type: ignore[arg-type]
        said = {
            "failing": row.failing,
            "late": row.late(NOW),
            "running": row.running,
            "paused": row.paused,
        }
        assert {state: name in counted.of(state) for state in said} == said, (name, marks)
    assert counted.jobs == len(names)
    # A page draws its jobs in a few reads, each job as it would be drawn alone.
    page = marks_of_many(store, [(name, jobs[name]) for name in names], NOW, after_newest=True)
    assert page == {
        name: marks_of(store, name, jobs[name], NOW, after_newest=True) for name in names
    }


def test_a_count_reads_the_same_few_times_whatever_the_number_of_jobs(tmp_path: Any) -> None:
    store = store_from_url(f"sqlite:///{tmp_path}/store.db")
    trips = []
    for size in (10, 1000):
        jobs = {job.name: job for job in (_job(n, "10s") for n in range(size))}
        before = store.stats.round_trips
        count(store, sorted(jobs), jobs.get, NOW)
        trips.append(store.stats.round_trips - before)
    assert trips[0] == trips[1] <= 5, trips


def test_pages_asking_at_once_share_one_count_and_a_stale_one_is_made_again_behind() -> None:
    store = MemoryStore()
    jobs = {job.name: job for job in (_job(n, "10s") for n in range(20))}
    store.record_many(
        [
            RunRecord(
                job="tenant-3.sync",
                occurrence_id=Occurrence(job="tenant-3.sync", scheduled_at=NOW).id,
                outcome="failed",
                trigger="schedule",
                replica="beat-1",
                started_at=NOW,
            )
        ]
    )
    counts = []
    names_read = []

    def names() -> list[str]:
        names_read.append(1)
        return sorted(jobs)

    tally = Tally(every=3600, first_wait=60)
    pages = [
        threading.Thread(target=lambda: counts.append(tally.counted(None, store, names, jobs.get)))
        for _ in range(8)
    ]
    for thread in pages:
        thread.start()
    for thread in pages:
        thread.join(30)
    assert len(counts) == 8 and all(c is counts[0] for c in counts), counts
    assert counts[0] is not None and counts[0].failing == {"tenant-3.sync"}
    assert len(names_read) == 1  # one count for the eight pages
    stale = Tally(every=0, first_wait=60)
    first = stale.counted(None, store, names, jobs.get)
    again = stale.counted(None, store, names, jobs.get)  # the old one, a new one begun
    assert again is first
    wait_for(
        lambda: stale.counted(None, store, names, jobs.get) is not first, 10, "a count made again"
    )


def _overview(beat: Beat, tally: Tally, **query: Any) -> str:
    return str(overview_page(View(beat, {}), "/_s", "token", tally=tally, **query))


def _rows(text: str) -> list[str]:
    return re.findall(r'<tr><td><a href="/_s/jobs/([^"]+)"', text)


def test_the_overview_pages_searches_and_filters_a_thousand_jobs_reading_one_page() -> None:
    store = MemoryStore()
    jobs = [_job(n, "10s") for n in range(1000)]
    beat = Beat(store, jobs)
    failing = ["tenant-7.sync", "tenant-70.sync", "tenant-700.sync"]
    store.record_many(
        [
            RunRecord(
                job=name,
                occurrence_id=Occurrence(job=name, scheduled_at=NOW).id,
                outcome="failed",
                trigger="schedule",
                replica="beat-1",
                started_at=NOW,
            )
            for name in failing
        ]
    )
    tally = Tally(every=3600, first_wait=60)
    names = sorted(job.name for job in jobs)
    first = _overview(beat, tally)
    assert _rows(first) == names[:PER_PAGE]
    assert "jobs 1 to 50 of 1000, page 1 of 20" in first and "rel=next" in first
    assert '<b class="failed">3</b> failing' in first and "<b>1000</b> jobs" in first
    last = _overview(beat, tally, number=20)
    assert _rows(last) == names[950:] and "rel=prev" in last
    assert _rows(_overview(beat, tally, number=99)) == names[950:]  # past the end: the last
    assert _rows(_overview(beat, tally, q="TENANT-70")) == sorted(
        n for n in names if "tenant-70" in n
    )
    assert _rows(_overview(beat, tally, state="failing")) == sorted(failing)
    assert _rows(_overview(beat, tally, state="failing", q="-70")) == [
        "tenant-70.sync",
        "tenant-700.sync",
    ]
    # What a page reads does not grow with the jobs: a page of 50 of 1000 as of 50 of 100.
    trips = []
    for size in (100, 1000):
        small = Beat(store, jobs[:size])
        before = store.stats.round_trips
        _overview(small, tally)
        trips.append(store.stats.round_trips - before)
    assert trips[0] == trips[1] <= 4 * PER_PAGE, trips


def _record(job: str, at: datetime, outcome: str, attempt: int = 1) -> RunRecord:
    return RunRecord(
        job=job,
        occurrence_id=Occurrence(job=job, scheduled_at=at).id,
        outcome=outcome,  # type: ignore[arg-type]
        trigger="schedule",
        replica="beat-1",
        started_at=at,
        attempt=attempt,
    )


def test_records_written_without_summaries_are_counted_from_the_histories() -> None:
    """Records of an earlier version keep no summary (a job that failed before the upgrade),
    and an older worker's end does not raise the beat's ``enqueued`` (a rolling upgrade): the
    count reads what the summaries cannot say from the histories, and mends them."""
    store = MemoryStore()
    jobs = {job.name: job for job in (_job(n, "10s") for n in range(3))}
    due = NOW.replace(second=0)  # 30 s ago: the newest occurrence, its grace past
    store.record_many([_record("tenant-0.sync", due, "failed")])
    store.record_many([_record("tenant-1.sync", due, "enqueued")])
    store.record_many([_record("tenant-2.sync", due, "enqueued")])
    summaries = {
        group: store.controls_of(group, ["tenant-1.sync", "tenant-2.sync"])
        for group in run_summary.GROUPS
    }
    store.record_many([_record("tenant-1.sync", due, "completed")])  # by an older worker:
    store.record_many([_record("tenant-2.sync", due, "failed")])
    cleared = {group: dict.fromkeys(["tenant-0.sync"], None) for group in run_summary.GROUPS}
    for group, held in summaries.items():  # ... its records raised no summary
        cleared[group].update({k: held.get(k) for k in ("tenant-1.sync", "tenant-2.sync")})
    store.write_controls(cleared)
    counted = count(store, sorted(jobs), jobs.get, NOW)
    assert counted.failing == {"tenant-0.sync", "tenant-2.sync"}
    assert counted.late == set()
    assert run_summary.parse(store.control(run_summary.ENDED, "tenant-0.sync") or "") is not None
    assert counted == replace(count(store, sorted(jobs), jobs.get, NOW), at=counted.at)


def test_a_forged_summary_leaves_out_its_job_and_counts_the_others() -> None:
    store = MemoryStore()
    jobs = {job.name: job for job in (_job(n, "10s") for n in range(3))}
    due = NOW.replace(second=0) - timedelta(minutes=1)
    store.record_many([_record(name, due, "failed") for name in jobs])
    store.put_controls(run_summary.LATEST, {"tenant-1.sync": "999999999999999 1 00001 enqueued"})
    store.put_controls(run_summary.ENDED, {"tenant-2.sync": "999999999999999 3 00001 failed"})
    counted = count(store, sorted(jobs), jobs.get, NOW)
    assert {"tenant-0.sync", "tenant-1.sync"} <= counted.failing
    tally = Tally(every=3600, first_wait=60)
    assert tally.counted(None, store, lambda: sorted(jobs), jobs.get) is not None
    assert tally.failure(None) is None


def test_a_count_that_keeps_failing_is_said_once_until_one_works(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(MemoryStore):
        broken = True

        def holders(self, keys: Any) -> list[str | None]:
            if self.broken:
                raise RuntimeError("an answer nobody expected")
            return super().holders(keys)

    store = Broken()
    jobs = {job.name: job for job in (_job(n, "10s") for n in range(3))}
    tally = Tally(every=0, first_wait=60)
    for _ in range(3):
        assert tally.counted(None, store, lambda: sorted(jobs), jobs.get) is None
        assert tally.failure(None) == "the count failed (see the log)"
    said = [r for r in caplog.records if "could not count" in r.getMessage()]
    assert len(said) == 1 and said[0].exc_info
    store.broken = False
    assert tally.counted(None, store, lambda: sorted(jobs), jobs.get) is not None
    assert tally.failure(None) is None


def test_a_page_is_not_held_for_a_slow_first_count() -> None:
    """The first page of a namespace waits for its count only ``first_wait``: a count still
    going (100,000 jobs) leaves the counts ``?`` and says they come with a reload, and the
    next page has them."""

    class Slow(MemoryStore):
        going = threading.Event()

        def holders(self, keys: Any) -> list[str | None]:
            self.going.wait(30)
            return super().holders(keys)

    store = Slow()
    jobs = [_job(n, "10s") for n in range(3)]
    beat = Beat(store, jobs)
    tally = Tally(every=3600, first_wait=0.05)
    first = _overview(beat, tally)
    assert "<b>?</b> failing" in first and "counting the jobs" in first
    assert _rows(first) == sorted(job.name for job in jobs)  # the page itself, not held
    store.going.set()
    wait_for(lambda: "<b>0</b> failing" in _overview(beat, tally), 10, "the counts shown")
