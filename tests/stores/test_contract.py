"""The store contract, run against every store: memory, sqlite, redis, redis-cluster, postgres."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cron_bridge.errors import StoreUnavailable
from cron_bridge.jobs import Occurrence
from cron_bridge.plumbing.keys import began_key, lock_key
from cron_bridge.stores import RunRecord, Store, records, run_summary, store_from_url
from cron_bridge.stores.base import Admission, done_key
from tests.conftest import StoreKit, store_kinds
from tests.waiting import wait_for

T0 = datetime(2026, 1, 1, 2, 0, tzinfo=UTC)
_examples = itertools.count()
T = TypeVar("T")


def occ(job: str = "billing.close-day", at: datetime = T0) -> Occurrence:
    return Occurrence(job=job, scheduled_at=at)


def run(job: str, n: int, outcome: Any = "completed") -> RunRecord:
    scheduled = T0 + timedelta(minutes=n)
    return RunRecord(
        job=job,
        occurrence_id=occ(job, scheduled).id,
        outcome=outcome,
        trigger="schedule",
        replica=f"replica-{n}",
        started_at=scheduled,
        duration_ms=1.5,
    )


def test_sixteen_threads_race_for_one_occurrence_and_exactly_one_wins(kit: StoreKit) -> None:
    """Of 16 threads claiming one occurrence at once, exactly one is told it won."""
    results = race(kit, lambda store, owner: store.claim(occ(), owner))
    assert len(results) == 16
    assert results.count(True) == 1


def race(kit: StoreKit, call: Callable[[Store, str], T]) -> list[T]:
    """What 16 threads got from ``call(store, owner)`` let go at once, each with a store of
    its own (the memory store: one shared) and the owner ``thread-<n>``."""
    stores = [kit.open() for _ in range(16)] if kit.kind != "memory" else [kit.open()] * 16
    barrier = threading.Barrier(16)
    results: list[T] = []
    lock = threading.Lock()

    def contend(index: int) -> None:
        barrier.wait()
        got = call(stores[index], f"thread-{index}")
        with lock:
            results.append(got)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def _claim_in_child(url: str, owner: str, start: Any, answers: Any) -> None:
    store = store_from_url(url)
    try:
        store.ping()
        start.wait(30)
        answers.put((owner, store.claim(occ(), owner)))
    except Exception as exc:
        answers.put((owner, repr(exc)))
    finally:
        store.close()


@pytest.mark.slow  # four processes
def test_four_processes_race_for_one_occurrence_and_exactly_one_wins(shared_kit: StoreKit) -> None:
    """Four processes opening the store from its URL: exactly one wins the claim."""
    shared_kit.open().ping()  # create tables before the race, as a running cluster has them
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    answers = context.Queue()
    children = [
        context.Process(target=_claim_in_child, args=(shared_kit.url, f"proc-{i}", start, answers))
        for i in range(4)
    ]
    for child in children:
        child.start()
    time.sleep(0.5)
    start.set()
    results = dict(answers.get(timeout=60) for _ in children)
    for child in children:
        child.join(30)
    assert all(isinstance(value, bool) for value in results.values()), results
    assert list(results.values()).count(True) == 1, results


def test_claiming_ten_thousand_occurrences_in_one_call_takes_a_few_round_trips(
    store: Store,
) -> None:
    """A batch of 10,000 claims gets the right winners back in at most 5 round trips."""
    batch = [occ(f"job-{i:05d}") for i in range(10_000)]
    taken = batch[::100]  # another replica got these 100 first
    assert all(store.claim_many(taken, "other"))
    before = store.stats.round_trips
    won = store.claim_many(batch, "me")
    trips = store.stats.round_trips - before
    assert trips <= 5, trips
    assert won == [i % 100 != 0 for i in range(10_000)]
    assert not any(store.claim_many(batch[:50], "late"))


def test_the_claim_holder_can_be_read_back(store: Store) -> None:
    """``claimed_by`` names the winner of a claim, and nobody for an unclaimed occurrence."""
    assert store.claimed_by(occ()) is None
    assert store.claim(occ(), "beat-1")
    assert not store.claim(occ(), "beat-2")
    assert store.claimed_by(occ()) == "beat-1"


def test_many_claim_holders_are_read_back_in_a_few_round_trips(store: Store) -> None:
    """``claimed_by_many`` answers ``claimed_by`` for each of 1,200 occurrences (more than one
    SQLite statement holds) in order, None where nobody claimed it or the claim expired, in
    one round trip (one per node of the 3-node Redis Cluster)."""
    batch = [occ(f"job-{i % 7}", T0 + timedelta(minutes=i)) for i in range(1200)]
    assert all(store.claim_many(batch[0:400:2], "beat-a"))
    assert all(store.claim_many(batch[801::3], "beat-b"))
    assert store.claim(batch[1], "gone", ttl=timedelta(milliseconds=100))
    time.sleep(0.3)
    before = store.stats.round_trips
    owners = store.claimed_by_many(batch)
    assert store.stats.round_trips - before <= 3
    expected = [
        "beat-a" if i < 400 and i % 2 == 0 else "beat-b" if i > 800 and (i - 801) % 3 == 0 else None
        for i in range(1200)
    ]
    assert owners == expected
    assert [store.claimed_by(batch[i]) for i in (0, 1, 2, 801, 802)] == [
        "beat-a",
        None,
        "beat-a",
        "beat-b",
        None,
    ]
    assert store.claimed_by_many([]) == []


def test_a_claim_advances_the_last_claimed_occurrence_and_never_moves_it_back(
    store: Store,
) -> None:
    """Every claim attempt moves the job's last claimed occurrence forward only."""
    assert store.last_claimed(["a", "b"]) == {}
    store.claim_many([occ("a", T0), occ("a", T0 + timedelta(minutes=5)), occ("b", T0)], "r1")
    store.claim(occ("a", T0 + timedelta(minutes=1)), "r2")  # older than the last: no move
    assert store.last_claimed(["a", "b", "c"]) == {"a": T0 + timedelta(minutes=5), "b": T0}
    store.claim(occ("b", T0 + timedelta(hours=1)), "r2")  # lost or won, it moves forward
    assert store.last_claimed(["b"]) == {"b": T0 + timedelta(hours=1)}


def test_a_lock_is_extended_and_released_only_by_its_owner(store: Store) -> None:
    """Non-owners can neither extend nor release a held lock; the owner can do both."""
    key = lock_key("billing.close-day")
    ttl = timedelta(seconds=30)
    assert store.acquire(key, "owner", ttl)
    assert not store.acquire(key, "other", ttl)
    assert not store.acquire(key, "owner", ttl)  # a holder extends, it does not re-acquire
    assert not store.extend(key, "other", ttl)
    assert not store.release(key, "other")
    assert store.extend(key, "owner", ttl)
    assert store.release(key, "owner")
    assert not store.release(key, "owner")
    assert store.acquire(key, "other", ttl)


def test_an_expired_lock_can_be_taken_over_and_its_old_owner_cannot_touch_it(
    store: Store,
) -> None:
    """After its lifetime a lock goes to the next taker; the old owner's extend fails."""
    key = lock_key("nightly")
    assert store.acquire(key, "first", timedelta(milliseconds=200))
    time.sleep(0.5)
    assert not store.extend(key, "first", timedelta(seconds=30))
    assert store.acquire(key, "second", timedelta(seconds=30))
    assert not store.release(key, "first")
    assert store.extend(key, "second", timedelta(seconds=30))


def test_every_taking_of_a_lock_gets_a_greater_fencing_token(store: Store) -> None:
    """A token with each taking, greater than every earlier one's, whoever took it and
    however the lock ended (released, expired); none for a taking refused; another key's
    takings in between change nothing of that."""
    key, other = lock_key("ledger.post"), lock_key("ledger.other")
    tokens = [store.acquire_fenced(key, "first", timedelta(seconds=30))]
    assert store.acquire_fenced(key, "second", timedelta(seconds=30)) is None
    assert store.acquire_fenced(key, "first", timedelta(seconds=30)) is None
    assert store.acquire_fenced(other, "first", timedelta(seconds=30)) is not None
    assert store.release(key, "first")
    tokens.append(store.acquire_fenced(key, "second", timedelta(milliseconds=200)))
    time.sleep(0.5)  # expired, not released
    tokens.append(store.acquire_fenced(key, "third", timedelta(seconds=30)))
    assert store.release(key, "third")
    assert store.acquire(key, "plain", timedelta(seconds=30))  # a plain taking, between
    assert store.release(key, "plain")
    tokens.append(store.acquire_fenced(key, "fourth", timedelta(seconds=30)))
    assert all(isinstance(t, int) and t >= 1 for t in tokens), tokens
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens), tokens
    assert store.holder(key) == "fourth"
    assert not store.extend(key, "third", timedelta(seconds=30))
    assert store.extend(key, "fourth", timedelta(seconds=30))


def test_sixteen_threads_race_for_one_lock_and_one_gets_a_token(kit: StoreKit) -> None:
    """Of 16 threads taking a free lock at once, exactly one gets a token, and the next
    taking after it gets a greater one."""
    key = lock_key("ledger.race")
    results = race(
        kit, lambda store, owner: store.acquire_fenced(key, owner, timedelta(seconds=30))
    )
    won = [t for t in results if t is not None]
    assert len(results) == 16 and len(won) == 1, results
    store = kit.open()
    holder = store.holder(key)
    assert holder is not None and store.release(key, holder)
    later = store.acquire_fenced(key, "later", timedelta(seconds=30))
    assert later is not None and later > won[0]


def test_an_expired_claim_can_be_claimed_again(store: Store) -> None:
    """Claims expire after their lifetime (48 h in production, shorter here)."""
    assert store.claim(occ(), "first", ttl=timedelta(milliseconds=200))
    assert not store.claim(occ(), "second", ttl=timedelta(milliseconds=200))
    time.sleep(0.5)
    assert store.claim(occ(), "second")


@pytest.mark.parametrize(
    "kind", store_kinds(["redis", "redis-cluster", "postgres", "sqlite", "memory", "nats"])
)
def test_two_namespaces_on_one_server_see_nothing_of_each_other(
    kit_factory: Any, kind: str
) -> None:
    """Two prefixes (or schemas, files) on one server: claims, locks and records stay apart."""
    one, two = kit_factory(kind).open(), kit_factory(kind).open()
    assert one.claim(occ(), "a")
    assert two.claim(occ(), "b")
    assert one.acquire(lock_key("x"), "a", timedelta(seconds=30))
    assert two.acquire(lock_key("x"), "b", timedelta(seconds=30))
    one.record(run("x", 1))
    assert two.history("x") == []
    assert two.last_claimed([occ().job]) == {occ().job: T0}
    one.heartbeat("replica-a", timedelta(seconds=30))
    assert [r.id for r in two.replicas()] == []


def test_history_is_newest_first_and_capped(kit: StoreKit) -> None:
    """Run records come back newest first, at most n, and each job keeps its newest 5."""
    store = kit.open(history_limit=5)
    store.record_many([run("a", i) for i in range(4)])
    store.record_many([run("a", i) for i in range(4, 8)] + [run("b", 0, "failed")])
    history = store.history("a", 100)
    assert [r.replica for r in history] == [f"replica-{i}" for i in (7, 6, 5, 4, 3)]
    assert history[0] == run("a", 7)
    assert [r.replica for r in store.history("a", 2)] == ["replica-7", "replica-6"]
    assert [r.outcome for r in store.history("b")] == ["failed"]
    assert store.history("nobody") == []


def test_a_failed_runs_traceback_is_kept_redacted_and_bounded(kit: StoreKit) -> None:
    """The traceback of a failed run comes back as written, with a URL's password and a
    ``password=`` value masked; a huge one keeps its first line and its innermost frames."""
    store = kit.open()
    shown = (
        'Traceback (most recent call last):\n  File "/app/billing.py", line 9, in settle\n'
        "    pay(dsn)\nConnectionError: redis://:hunter2@cache:6379/0 refused (password=s3cret)\n"
    )
    failed = RunRecord(
        **{
            **run("a", 1, "failed").to_json(),
            "started_at": T0,
            "error": "ConnectionError: amqp://app:hunter2@mq//",
            "traceback": shown,
        }
    )
    frames = "".join(f'  File "/app/deep.py", line {i}, in f{i}\n' for i in range(2000))
    deep = f"Traceback (most recent call last):\n{frames}ValueError: x"
    huge = RunRecord(**{**run("a", 2, "failed").to_json(), "started_at": T0, "traceback": deep})
    store.record_many([failed, huge, run("a", 3)])
    newest, big, kept = store.history("a", 3)
    assert newest.traceback is None and "traceback" not in newest.to_json()
    assert kept.error == "ConnectionError: amqp://app:***@mq//"
    assert kept.traceback == shown.replace(":hunter2@", ":***@").replace("s3cret", "***")
    assert big.traceback is not None and len(big.traceback) <= 8000
    assert big.traceback.startswith("Traceback (most recent call last):\n…\n")
    assert big.traceback.endswith("in f1999\nValueError: x")


def test_heartbeats_list_live_replicas_until_they_expire(store: Store) -> None:
    """A replica is listed while its heartbeat lasts and not after."""
    store.heartbeat("beat-1", timedelta(seconds=30))
    store.heartbeat("beat-2", timedelta(milliseconds=200))
    assert [r.id for r in store.replicas()] == ["beat-1", "beat-2"]
    time.sleep(0.5)
    live = store.replicas()
    assert [r.id for r in live] == ["beat-1"]
    assert live[0].expires_at > datetime.now(UTC)


def test_a_finished_occurrence_is_marked_before_its_lock_is_freed(store: Store) -> None:
    """``finish`` marks the occurrence completed and releases the lock; other occurrences and
    other owners' locks are untouched."""
    done, other = occ(), occ(at=T0 + timedelta(minutes=1))
    assert store.acquire(lock_key("billing.close-day"), "w1", timedelta(seconds=30))
    store.finish(done, (lock_key("billing.close-day"), "w1"))
    assert store.finished(done) and not store.finished(other)
    assert store.holder(lock_key("billing.close-day")) is None
    store.finish(done)  # a second mark is harmless
    assert store.finished(done)


def test_a_run_is_admitted_unless_its_occurrence_completed_or_another_copy_began(
    store: Store,
) -> None:
    """``admit`` takes the lock with a token and marks the copy that began; it refuses,
    taking nothing, behind a held lock (naming its holder), after a completion, and for a
    second copy (naming the first's mark); an earlier try of the same copy is admitted
    without writing the mark again."""
    key, done, later = (
        lock_key("ledger.post"),
        occ("ledger.post"),
        occ("ledger.post", T0 + timedelta(minutes=1)),
    )
    ttl = timedelta(seconds=30)
    mark = began_key(done.job, done.epoch_ms)
    first = store.admit(key, "w1", ttl, unless_completed=done, began=(mark, "copy-a|00000001"))
    assert (first.outcome, first.marked) == ("taken", True) and first.token >= 0, first
    assert store.holder(mark) == "copy-a|00000001"
    held = store.admit(key, "w2", ttl, unless_completed=done, began=(mark, "copy-b|00000001"))
    assert held == Admission("held", holder="w1"), held
    assert store.release(key, "w1")
    other = store.admit(key, "w2", ttl, unless_completed=done, began=(mark, "copy-b|00000002"))
    assert other == Admission("began", holder="copy-a|00000001"), other
    assert store.holder(key) is None and store.holder(mark) == "copy-a|00000001"
    again = store.admit(key, "w3", ttl, unless_completed=done, began=(mark, "copy-a|00000002"))
    assert (again.outcome, again.marked) == ("taken", False), again
    assert again.token > first.token or again.token == first.token == 0, (first, again)
    store.finish(done, (key, "w3"))
    assert store.holder(key) is None and store.finished(done)
    for began in (None, (mark, "copy-a|00000003"), (mark, "copy-c|00000001")):
        assert store.admit(key, "w4", ttl, unless_completed=done, began=began) == Admission(
            "completed"
        )
    assert store.holder(key) is None
    # Another occurrence of the job, and a run that asks for no mark: the lock alone.
    plain = store.admit(key, "w5", ttl, unless_completed=later)
    assert (plain.outcome, plain.marked) == ("taken", False) and store.holder(key) == "w5"
    assert store.admit(key, "w6", ttl) == Admission("held", holder="w5")


def test_only_the_stores_own_marks_refuse_a_run(store: Store) -> None:
    """A completion mark counts only as ``completed`` and a began mark is a copy's own only
    as ``<copy>|`` and 8 lowercase hex digits: what another program left there (any other
    text) refuses a copy as another copy's mark would, and marks nothing completed."""
    key, done = lock_key("ledger.post"), occ("ledger.post")
    mark, ttl = began_key(done.job, done.epoch_ms), timedelta(seconds=30)
    assert store.acquire(done_key(done), "x", ttl)
    assert not store.finished(done)
    for left in ("copy-a|0123ABCD", "copy-a|0123abcd!", "copy-a", "copy-a|", "x"):
        assert store.acquire(mark, left, ttl)
        refused = store.admit(key, "w1", ttl, unless_completed=done, began=(mark, "copy-a|1"))
        assert refused == Admission("began", holder=left), (left, refused)
        assert store.holder(key) is None and store.release(mark, left)
    assert store.acquire(mark, "copy-a|0123abcd", ttl)
    own = store.admit(key, "w1", ttl, unless_completed=done, began=(mark, "copy-a|89abcdef"))
    assert (own.outcome, own.marked) == ("taken", False), own


def test_sixteen_copies_of_one_message_race_and_one_is_admitted(kit: StoreKit) -> None:
    """Of 16 copies of one occurrence's message admitted at once, exactly one takes the
    lock and marks itself; the others are refused, none of them admitted after it either."""
    key, done = lock_key("ledger.race"), occ("ledger.race")
    mark = began_key(done.job, done.epoch_ms)
    results = race(
        kit,
        lambda store, owner: store.admit(
            key,
            owner,
            timedelta(seconds=30),
            unless_completed=done,
            began=(mark, f"{owner}|0000000a"),
        ),
    )
    won = [r for r in results if r.outcome == "taken"]
    assert len(results) == 16 and len(won) == 1 and won[0].marked, results
    assert {r.outcome for r in results} <= {"taken", "held", "began"}, results
    store = kit.open()
    holder = store.holder(key)
    assert holder is not None and store.holder(mark) == f"{holder}|0000000a"
    assert store.release(key, holder)
    late = store.admit(
        key, "late", timedelta(seconds=30), unless_completed=done, began=(mark, "late|0000000a")
    )
    assert late == Admission("began", holder=f"{holder}|0000000a"), late


def test_a_heartbeat_reads_the_stores_clock_and_keeps_the_replicas_offset(kit: StoreKit) -> None:
    """Redis and Postgres answer a heartbeat with their own time and keep the offset the
    replica measured; SQLite and memory have no clock of their own (None)."""
    store = kit.open()
    before = datetime.now(UTC)
    server = store.heartbeat("beat-1", timedelta(seconds=15), clock_offset_ms=-2500.0)
    after = datetime.now(UTC)
    (replica,) = store.replicas()
    if kit.kind in ("sqlite", "memory"):
        assert server is None and replica.clock_offset_ms is None
    else:
        assert server is not None
        assert before - timedelta(seconds=5) < server < after + timedelta(seconds=5)
        assert replica.clock_offset_ms == -2500.0


def test_control_records_are_set_read_by_group_replaced_and_deleted(
    kit: StoreKit, kit_factory: Any
) -> None:
    """What one process sets, another reads, a group at a time; a namespace sees only its
    own."""
    writer, reader = kit.open(), kit.open()
    assert reader.controls("pause") == {}
    writer.put_control("pause", "billing.close-day", '{"reason": "incident 42"}')
    writer.put_control("pause", "mail.digest", '{"reason": ""}')
    writer.put_control("change:mail.digest", "00001:ab", "{}")
    assert reader.controls("pause") == {
        "billing.close-day": '{"reason": "incident 42"}',
        "mail.digest": '{"reason": ""}',
    }
    writer.put_control("pause", "mail.digest", '{"reason": "again"}')
    writer.put_control("pause", "billing.close-day", None)
    writer.put_control("pause", "never-set", None)  # deleting what is not there is no error
    assert reader.controls("pause") == {"mail.digest": '{"reason": "again"}'}
    assert reader.controls("change:mail.digest") == {"00001:ab": "{}"}
    assert reader.control("pause", "mail.digest") == '{"reason": "again"}'
    assert reader.control("pause", "billing.close-day") is None
    assert reader.control("change:mail.digest", "mail.digest") is None  # groups apart
    if kit.kind != "memory":
        assert kit_factory(kit.kind).open().controls("pause") == {}


def test_control_records_are_set_many_at_once(kit: StoreKit) -> None:
    """``put_controls``: thousands of records of a group in one call (a dashboard catalog),
    replacing the ones already there, in one round trip where the store can."""
    writer, reader = kit.open(), kit.open()
    writer.put_control("jobs", "job.00000", "old")
    values = {f"job.{n:05d}": f'{{"n": {n}}}' for n in range(2000)}
    trips = writer.stats.round_trips
    writer.put_controls("jobs", values)
    writer.put_controls("jobs", {})
    assert reader.controls("jobs") == values
    if kit.kind in ("redis", "sqlite", "postgres"):
        assert writer.stats.round_trips - trips <= 2


def test_a_control_record_is_added_once_and_again_after_it_is_deleted(kit: StoreKit) -> None:
    store = kit.open()
    assert store.add_control("schedule", "tenant.7", '{"v": 1}') is True
    assert store.add_control("schedule", "tenant.7", '{"v": 2}') is False
    assert store.control("schedule", "tenant.7") == '{"v": 1}'  # left as it was
    store.put_control("schedule", "tenant.7", None)
    assert store.add_control("schedule", "tenant.7", '{"v": 3}') is True
    assert store.control("schedule", "tenant.7") == '{"v": 3}'


def test_sixteen_threads_add_one_control_record_and_exactly_one_wins(kit: StoreKit) -> None:
    stores = [kit.open() for _ in range(16)] if kit.kind != "memory" else [kit.open()] * 16
    barrier = threading.Barrier(16)
    results: list[bool] = []

    def add(index: int) -> None:
        barrier.wait()
        results.append(stores[index].add_control("schedule", "same", f'{{"by": {index}}}'))

    threads = [threading.Thread(target=add, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(results) == [False] * 15 + [True]


def test_concurrent_writers_take_consecutive_feed_numbers_and_lose_none(kit: StoreKit) -> None:
    """Eight writers announcing 25 changes each at once: the numbers 1 to 200, each once,
    each naming a change that was made (the feed the replicas follow)."""
    from cron_bridge.control.schedules import FEED_GROUP, announce

    stores = [kit.open() for _ in range(8)] if kit.kind != "memory" else [kit.open()] * 8
    barrier = threading.Barrier(8)
    numbers: list[int] = []

    def write(index: int) -> None:
        barrier.wait()
        for n in range(25):
            numbers.append(announce(stores[index], f"tenant-{index}.s{n}"))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sorted(numbers) == list(range(1, 201))
    feed = stores[0].controls(FEED_GROUP)
    named = {json.loads(feed[f"seq:{n}"])["name"] for n in range(1, 201)}
    assert named == {f"tenant-{i}.s{n}" for i in range(8) for n in range(25)}


PUSHING = ("redis", "valkey", "redis-cluster", "redis-sentinel", "postgres")


def test_a_notification_wakes_the_listeners_of_its_namespace_only(kit: StoreKit) -> None:
    """Redis (pub/sub) and PostgreSQL (LISTEN/NOTIFY) push; the other stores say they cannot,
    and their readers poll. A notification of another namespace wakes nobody here."""
    store = kit.open()
    woken = threading.Event()
    stop = store.listen("schedule-feed", woken.set)
    if kit.kind not in PUSHING:
        assert stop is None
        store.notify("schedule-feed")  # a no-op, never an error
        return
    assert stop is not None
    other_url = kit.url.replace("prefix=", "prefix=other").replace("schema=", "schema=other")
    other = store_from_url(other_url)
    try:
        assert woken.wait(10), "told once when listening starts"
        time.sleep(0.5)
        woken.clear()
        other.notify("schedule-feed")
        assert not woken.wait(1), "woken by another namespace"
        kit.open().notify("schedule-feed")
        assert woken.wait(5), "not woken by its own namespace's notification"
    finally:
        stop()
        other.close()


# Pending sends: a claim its claimer has not sent yet, taken over once its lease runs out.

SHORT = timedelta(milliseconds=200)


def taken_over(store: Store, owner: str, **options: Any) -> list[tuple[str, str]]:
    """What ``owner`` takes over once some lease ran out (waited for, a loaded machine)."""
    found: list[list[tuple[str, str]]] = []
    wait_for(lambda: found.append(store.take_over(owner, **options)) or found[-1], 30, "a takeover")
    return found[-1]


def test_a_claim_pending_its_send_is_taken_over_once_its_lease_ran_out(store: Store) -> None:
    """Only the claims won with the pending flag are pending; none is taken over while its
    lease lasts; once it ran out the first taker gets each, leased to it, and the claimer
    that comes back is told it is another's, before and after the taker settled it; a claim
    never pending is its caller's to send, and a settle asked again is answered the same."""
    batch = [occ(f"job-{i}") for i in range(4)]
    assert store.claim(batch[3], "other")
    won = store.claim_many(batch, "dead", pending=[True, True, False, True], lease=SHORT)
    assert won == [True, True, True, False]
    alive = occ("job-alive")
    assert store.claim_many([alive], "alive", pending=[True], lease=timedelta(seconds=60))
    taken = sorted(taken_over(store, "taker", lease=timedelta(seconds=30)))
    assert taken == sorted((o.claim_key, "dead") for o in batch[:2])  # not the one alive
    assert store.settle_many([alive], "alive") == [True]
    assert store.take_over("third", lease=SHORT) == []  # leased to the taker now
    # Taken over: not its own any more; the last two were never pending: the caller's.
    assert store.settle_many(batch, "dead") == [False, False, True, True]
    assert store.settle_many(batch, "taker") == [True] * 4
    assert store.settle_many(batch, "taker") == [True] * 4  # its answer lost, asked again
    assert store.settle_many(batch, "dead") == [False, False, True, True]  # settled by another
    assert store.settle_many(batch, "dead", keep=SHORT) == [False, False, True, True]


def test_a_settled_claim_is_never_taken_over(store: Store) -> None:
    """Settled in time, or after its lease ran out but before anyone took it: either way it
    is its owner's, and nobody takes it over after."""
    first, second, third = occ("job-a"), occ("job-b"), occ("job-c")
    assert store.claim_many([first, second, third], "me", pending=[True] * 3, lease=SHORT)
    assert store.settle_many([first], "me") == [True]
    time.sleep(SHORT.total_seconds() * 1.5)  # the store's clock passes the lease's end
    assert store.settle_many([second], "me") == [True]  # ran out, nobody took it yet
    assert taken_over(store, "taker") == [(third.claim_key, "me")]
    assert store.take_over("again") == []


def test_a_claimer_still_sending_keeps_its_lease_and_learns_what_was_taken(store: Store) -> None:
    """A claimer whose send is slow renews its lease (``keep``): while renewed, nothing is
    taken over; one it let run out and another took is answered False, and stays the
    taker's; a renewed one is still its own to settle."""
    slow, stopped = occ("job-slow"), occ("job-stopped")
    assert store.claim_many([slow, stopped], "me", pending=[True, True], lease=SHORT)
    assert store.settle_many([slow, slow], "me", keep=timedelta(seconds=60)) == [True, False]
    assert taken_over(store, "taker") == [(stopped.claim_key, "me")]
    assert store.settle_many([slow, stopped], "me", keep=timedelta(seconds=60)) == [True, False]
    assert store.take_over("third") == []
    assert store.settle_many([slow, stopped], "me") == [True, False]
    assert store.settle_many([stopped], "taker") == [True]


def test_a_settled_claim_stays_settled_seconds_later(store: Store) -> None:
    """What a store keeps of a settle outlives whatever it writes to delete the pending send
    (a delete marker with a lifetime of its own must not bring the send back)."""
    first = occ("job-a")
    assert store.claim_many([first], "me", pending=[True], lease=SHORT)
    assert store.settle_many([first], "me") == [True]
    time.sleep(2.5)  # past a one-second marker's lifetime, and the lease's end
    assert store.take_over("taker") == []
    assert store.settle_many([first], "me") == [True]  # settled by this owner before
    assert store.settle_many([first], "another") == [False]  # the marker names who settled it


def test_sixteen_takers_race_for_one_pending_claim_and_one_wins(kit: StoreKit) -> None:
    """Of its claimer settling and fifteen replicas taking over at once a pending claim
    whose lease ran out, exactly one gets it."""
    one = kit.open()
    assert one.claim_many([occ()], "thread-0", pending=[True], lease=timedelta(milliseconds=1))
    time.sleep(0.05)  # the lease of 1 ms has run out: nothing to wait for but that

    def contend(store: Store, owner: str) -> int:
        if owner == "thread-0":
            return sum(store.settle_many([occ()], owner))
        return len(store.take_over(owner))

    results = race(kit, contend)
    assert len(results) == 16
    assert sum(results) == 1, results


def test_ten_thousand_pending_claims_are_claimed_settled_and_taken_in_a_few_round_trips(
    store: Store,
) -> None:
    """Pending costs the claim no round trip; settling 10,000 costs a few, and a takeover
    takes at most ``most`` of them in one (one per node of a cluster), oldest first."""
    batch = [occ(f"job-{i:05d}") for i in range(10_000)]
    before = store.stats.round_trips
    assert all(store.claim_many(batch, "me", pending=[True] * len(batch), lease=SHORT))
    assert store.stats.round_trips - before <= 5
    before = store.stats.round_trips
    assert all(store.settle_many(batch[:5000], "me"))
    assert store.stats.round_trips - before <= 5
    time.sleep(SHORT.total_seconds() * 1.5)  # the store's clock passes the leases' end
    before = store.stats.round_trips
    taken = store.take_over("taker", most=1000)
    assert store.stats.round_trips - before <= 3
    assert len(taken) == 1000
    assert {key for key, _ in taken} <= {o.claim_key for o in batch[5000:]}
    assert len(store.take_over("taker", most=10_000)) == 4000


def test_a_page_is_read_by_keys_alike_on_every_store_and_as_the_steps_read_it(
    kit: StoreKit,
) -> None:
    """``control_keys``, ``controls_of`` and ``latest_runs`` (a page of a listing) answer as
    the base class's steps, ``controls`` and ``control`` and ``history``, do."""
    store = kit.open()
    group = "schedule"
    values = {f"tenant-{n:03d}.report": json.dumps({"n": n, "pad": "x" * n}) for n in range(250)}
    store.put_controls(group, values)
    store.put_control("pause", "tenant-007.report", "{}")  # another group: never listed
    assert store.control_keys(group) == sorted(values)
    assert store.control_keys(group) == Store.control_keys(store, group)
    bounded = store.control_keys(group, most=10)  # which ten: the store's choice
    assert len(bounded) == 10 and bounded == sorted(bounded) and set(bounded) <= set(values)
    assert store.control_keys("nothing-here") == []
    page = ["tenant-249.report", "tenant-003.report", "missing.job", "tenant-003.report"]
    expected = {key: values[key] for key in ("tenant-249.report", "tenant-003.report")}
    assert store.controls_of(group, page) == expected
    assert store.controls_of(group, page) == Store.controls_of(store, group, page)
    assert store.controls_of(group, []) == {}
    store.record_many([run("a.job", n) for n in range(5)] + [run("b.job", 9)])
    latest = store.latest_runs(["b.job", "a.job", "never.ran", "a.job"])
    assert latest == Store.latest_runs(store, ["b.job", "a.job", "never.ran"])
    assert {job: r.occurrence_id for job, r in latest.items()} == {
        "a.job": run("a.job", 4).occurrence_id,
        "b.job": run("b.job", 9).occurrence_id,
    }
    assert store.latest_runs([]) == {}


def test_a_pages_histories_are_read_at_once_as_one_by_one(kit: StoreKit) -> None:
    """``histories`` (a dashboard page's jobs) answers as ``history`` does for each job, a
    job named twice once, in one round trip where the store can."""
    store = kit.open()
    store.record_many([run("a.job", n) for n in range(30)] + [run("b.job", 9)])
    jobs = ["b.job", "a.job", "never.ran", "a.job"]
    before = store.stats.round_trips
    found = store.histories(jobs, 20)
    if kit.kind in ("redis", "valkey", "postgres"):
        assert store.stats.round_trips - before == 1
    assert list(found) == ["b.job", "a.job", "never.ran"]
    assert found == {job: store.history(job, 20) for job in ("b.job", "a.job", "never.ran")}
    assert [r.occurrence_id for r in found["a.job"]] == [
        run("a.job", n).occurrence_id for n in range(29, 9, -1)
    ]
    assert store.histories(jobs, 0) == {"b.job": [], "a.job": [], "never.ran": []}
    assert store.histories([], 20) == {}


def test_records_are_replaced_all_or_none(kit: StoreKit) -> None:
    """``replace_controls``: every record when all of their keys exist; none, and the keys
    that do not, when some do not; in an ordered group (the stored schedules) and another."""
    store = kit.open()
    for group in ("schedule", "other-group"):
        store.put_controls(group, {"a": "1", "b": "2"})
        assert store.replace_controls(group, {"a": "10", "b": "20"}) == []
        assert store.controls(group) == {"a": "10", "b": "20"}
        assert store.replace_controls(group, {"a": "x", "zz": "y", "c": "z"}) == ["c", "zz"]
        assert store.controls(group) == {"a": "10", "b": "20"}
        store.put_control(group, "b", None)
        assert store.replace_controls(group, {"b": "back"}) == ["b"]
        assert store.controls(group) == {"a": "10"}
        assert store.replace_controls(group, {}) == []
    assert store.first_control_keys("schedule", 5) == (["a"], 1)


def test_a_removed_record_is_not_said_left_out_of_a_listing(
    kit: StoreKit, caplog: pytest.LogCaptureFixture
) -> None:
    """A listing within its bounds warns of nothing, whatever was removed before it (NATS
    keeps a delete or purge marker of each removed key in its stream: not a record)."""
    store = kit.open()
    store.put_controls("schedule", {"a": "1", "b": "2", "c": "3"})
    store.put_control("schedule", "b", None)
    store.write_controls({"schedule": {"c": None}})
    with caplog.at_level("WARNING"):
        assert store.controls("schedule") == {"a": "1"}
    assert not [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]


def test_a_batch_of_new_records_is_written_whole_or_not_at_all(kit: StoreKit) -> None:
    """``add_controls``: every record when none of their keys exists; none, and the keys that
    exist, when some do; and of batches racing over shared keys, each is written whole or
    not at all."""
    store = kit.open()
    first = {f"tenant-{n}.report": f'{{"n": {n}}}' for n in range(3_000)}
    assert store.add_controls("schedule", first) == []
    assert store.controls("schedule") == first
    again = {"tenant-2999.report": "{}", "tenant-7.report": "{}", "tenant-new.report": "{}"}
    assert store.add_controls("schedule", again) == ["tenant-2999.report", "tenant-7.report"]
    assert store.control("schedule", "tenant-new.report") is None
    assert store.control("schedule", "tenant-7.report") == '{"n": 7}'
    assert store.add_controls("schedule", {}) == []
    # Sixteen batches of 50 keys, each overlapping the next by 25: of each pair of
    # neighbours at most one is written, and every key holds the value of the one batch
    # that wrote it.
    batches = [{f"race-{k}": f"batch-{i}" for k in range(i * 25, i * 25 + 50)} for i in range(16)]
    results = race(kit, lambda store, owner: store.add_controls("race", batches[int(owner[7:])]))
    written = store.controls("race")
    won = [i for i in range(16) if all(written.get(k) == f"batch-{i}" for k in batches[i])]
    assert won, results
    assert results.count([]) == len(won)  # the batches told they were written
    for key, value in written.items():
        assert int(value.removeprefix("batch-")) in won, (key, value)
    for i in won[:-1]:
        assert i + 1 not in won


def test_records_of_many_groups_are_set_and_deleted_in_one_write(kit: StoreKit) -> None:
    store = kit.open()
    store.put_control("change:a", "old", "1")
    writes: dict[str, dict[str, str | None]] = {
        f"change:tenant-{n}": {"k1": f"v{n}", "k2": "w"} for n in range(300)
    }
    writes["change:a"] = {"old": None, "new": "2"}
    store.write_controls(writes)
    assert store.controls("change:tenant-299") == {"k1": "v299", "k2": "w"}
    assert store.controls("change:a") == {"new": "2"}
    store.write_controls({"change:tenant-0": {"k1": "again", "k2": None}})
    assert store.controls("change:tenant-0") == {"k1": "again"}
    store.write_controls({})


# Records as a beat and a worker write them: enqueued, then an attempt or two, each with an
# outcome; any order, any batching; and skipped-claimed, which a summary leaves out.
_summary_records = st.lists(
    st.tuples(
        st.sampled_from(["a.job", "b.job"]),
        st.integers(0, 4),  # minutes after T0
        st.integers(1, 3),  # attempt
        st.sampled_from(
            ["enqueued", "completed", "failed", "aborted", "missed", "skipped-claimed"]
        ),
        st.booleans(),  # a new batch begins here
    ),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=15,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@given(written=_summary_records)
def test_each_jobs_newest_run_and_newest_end_are_kept_whatever_the_order(
    kit: StoreKit, written: list[tuple[str, int, int, str, bool]]
) -> None:
    """``record_many`` raises ``latest-run`` and ``latest-end`` (``run_summary``) as the
    records one after another would, on every store, in its own round trip where it can; a
    hostile entry (another shape, or a day ahead) is replaced, never kept."""
    store = kit.open()
    prefix = f"n{next(_examples)}."
    left = {  # what another program left: the place of an entry, then a huge outcome
        f"{prefix}a.job": "000000000000001 4 00001 " + "x" * 100_000,
        f"{prefix}b.job": run_summary.value(4 * 10**12, 1, "failed"),  # in 2096
    }
    for group in run_summary.GROUPS:
        store.put_controls(group, left)
    ceiling_ms = run_summary.ceiling(datetime.now(UTC))
    batches: list[list[RunRecord]] = [[]]
    expected = {group: dict(left) for group in run_summary.GROUPS}
    for job, minute, attempt, outcome, new_batch in written:
        if new_batch and batches[-1]:
            batches.append([])
        record = replace(run(prefix + job, minute, outcome), attempt=attempt)
        batches[-1].append(record)
        for group, entries in run_summary.summaries([record]).items():
            if run_summary.raised(expected[group][record.job], entries[record.job], ceiling_ms):
                expected[group][record.job] = entries[record.job]
    for batch in batches:
        before = store.stats.round_trips
        store.record_many(batch)
        if kit.kind in ("memory", "sqlite", "redis", "valkey", "postgres"):
            assert store.stats.round_trips - before <= 1 + (kit.kind == "postgres")
    for group in run_summary.GROUPS:
        found = store.controls_of(group, [f"{prefix}a.job", f"{prefix}b.job"])
        assert found == expected[group], group


def test_a_raise_writes_only_what_is_newer_alike_on_every_store(kit: StoreKit) -> None:
    """``raise_controls`` against the base class's read-then-write, on entries before, after
    and beside what is held, and on what is no entry at all."""
    store = kit.open()
    at = run_summary.value
    held = {
        "older": at(1000, 1, "completed"),
        "newer": at(3000, 1, "enqueued"),
        "same-place": at(2000, 2, "failed"),
        "ahead": at(10**14, 1, "completed"),
        "garbage": "not an entry at all",
        "near-miss": "00000000000200x 4 00001 completed",
        "no-outcome": "000000000002000 4 00009 finished",
    }
    offered = {key: at(2000, 2, "aborted" if key == "same-place" else "failed") for key in held}
    offered["absent"] = at(2000, 1, "enqueued")
    expected = {
        **held,
        "older": offered["older"],
        "ahead": offered["ahead"],
        "garbage": offered["garbage"],
        "near-miss": offered["near-miss"],
        "no-outcome": offered["no-outcome"],
        "absent": offered["absent"],
    }
    for group, raise_ in (("here", store.raise_controls), ("steps", None)):
        store.put_controls(group, held)
        if raise_ is not None:
            raise_(group, offered, ceiling_ms=10**13)
        else:
            Store.raise_controls(store, group, offered, ceiling_ms=10**13)
        assert store.controls(group) == expected, group
    store.raise_controls("here", {}, ceiling_ms=0)


def test_a_summary_that_could_not_be_raised_never_fails_the_records_it_follows(
    kit: StoreKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the summaries are raised after the records (NATS, a Redis Cluster), a failure
    to raise them is logged, not raised: the writer would write the records again."""
    store = kit.open()

    def down(group: str, values: Any, *, ceiling_ms: int) -> None:
        raise StoreUnavailable("the summary's node is down")

    monkeypatch.setattr(store, "raise_controls", down)
    for n in range(3):
        store.record_many([run("blip.job", n)])
    assert [r.occurrence_id for r in store.history("blip.job", 10)] == [
        run("blip.job", n).occurrence_id for n in (2, 1, 0)
    ]


# Names as tenants write them, with letters past ASCII (two, three and four bytes in UTF-8),
# whose order as text and as bytes agree only when the store compares bytes as UTF-8 does.
_listed_names = st.text(alphabet="aZ09._-:/éß€日🙂", min_size=1, max_size=6)
_listing_writes = st.lists(
    st.tuples(
        st.sampled_from(["put", "delete", "add", "put_many", "add_many", "write"]),
        st.lists(_listed_names, min_size=1, max_size=5, unique=True),
    ),
    min_size=1,
    max_size=8,
)


@settings(
    max_examples=20,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@given(writes=_listing_writes)
def test_a_listings_first_keys_are_read_in_order_after_any_writes(
    kit: StoreKit, writes: list[tuple[str, list[str]]]
) -> None:
    """``first_control_keys`` of an ordered group (the stored schedules) gives the first keys
    in Python's order and how many there are, after any mix of every writer (created,
    replaced, deleted, one at a time or in batches), as the base class's steps read them, and
    in one round trip where the store can read in order."""
    store = kit.open()
    group = "schedule"
    assert group in records.ORDERED_GROUPS
    store.write_controls({group: dict.fromkeys(store.control_keys(group, most=10_000))})
    model: dict[str, str] = {}
    for kind, names in writes:
        value = json.dumps({"by": kind})
        if kind == "put":
            store.put_control(group, names[0], value)
            model[names[0]] = value
        elif kind == "delete":
            store.put_control(group, names[0], None)
            model.pop(names[0], None)
        elif kind == "add":
            if store.add_control(group, names[0], value):
                model[names[0]] = value
        elif kind == "put_many":
            store.put_controls(group, dict.fromkeys(names, value))
            model.update(dict.fromkeys(names, value))
        elif kind == "add_many":
            if not store.add_controls(group, dict.fromkeys(names, value)):
                model.update(dict.fromkeys(names, value))
        else:  # the first set, the rest deleted, in one write
            store.write_controls({group: {names[0]: value, **dict.fromkeys(names[1:])}})
            model[names[0]] = value
            for name in names[1:]:
                model.pop(name, None)
    ordered = sorted(model)
    for count in (0, 1, 3, len(ordered), len(ordered) + 5):
        before = store.stats.round_trips
        found = store.first_control_keys(group, count)
        if kit.kind in ("memory", "sqlite", "redis", "valkey", "postgres", "redis-cluster"):
            assert store.stats.round_trips - before == 1
        assert found == (ordered[:count], len(ordered)), (count, writes)
        assert found == Store.first_control_keys(store, group, count)
    assert store.controls(group) == model


def test_a_listings_first_keys_outside_an_ordered_group_are_read_whole(kit: StoreKit) -> None:
    """Another group is listed in order too: read whole (no index is kept for it)."""
    store = kit.open()
    store.put_controls("pause", dict.fromkeys(("c.job", "a.job", "b.job"), "{}"))
    assert store.first_control_keys("pause", 2) == (["a.job", "b.job"], 3)
    assert store.first_control_keys("nothing-here", 5) == ([], 0)


def test_a_listings_first_keys_past_every_stores_integers_are_the_whole_group(
    kit: StoreKit,
) -> None:
    """Asked for more keys than SQL's 64 bits or a Redis script's numbers hold (a listing's
    ``--offset`` a user typed), a store gives the whole group, never an error."""
    store = kit.open()
    store.put_controls("schedule", dict.fromkeys(("c.job", "a.job", "b.job"), "{}"))
    for count in (2**53, 10**17, 2**63, 10**30):
        assert store.first_control_keys("schedule", count) == (["a.job", "b.job", "c.job"], 3)
