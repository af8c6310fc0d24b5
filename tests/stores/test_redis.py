"""Redis specifics: keys under the prefix, single-key commands, borrowed clients left open."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from cron_bridge.errors import ConfigError
from cron_bridge.jobs import NAME_PATTERN, Occurrence
from cron_bridge.plumbing.keys import began_key, lock_key
from cron_bridge.stores import Store, records, redis_controls, store_from_url
from cron_bridge.stores.base import done_key
from cron_bridge.stores.redis import RedisStore, fence_key
from cron_bridge.stores.redis_controls import order_key
from tests.servers import RedisServer

pytestmark = pytest.mark.redis


def test_keys_follow_the_documented_formats_under_the_prefix(redis_server: RedisServer) -> None:
    """occ:<job>:<epoch ms> and active:<job>, each under the prefix, with their lifetimes."""
    client = redis.Redis(port=redis_server.port, decode_responses=True)
    store = RedisStore(client, prefix="keys-test:")
    at = datetime(2026, 1, 1, 2, 0, tzinfo=UTC)
    assert store.claim(Occurrence(job="billing.close-day", scheduled_at=at), "beat-1")
    assert store.acquire(lock_key("billing.close-day"), "worker-1", timedelta(seconds=30))
    claim_key = "keys-test:occ:billing.close-day:1767232800000"
    assert client.get(claim_key) == "beat-1"
    assert 47 * 3600 < client.ttl(claim_key) <= 48 * 3600
    assert client.get("keys-test:active:billing.close-day") == "worker-1"
    assert 0 < client.pttl("keys-test:active:billing.close-day") <= 30_000


def test_a_borrowed_client_is_not_closed(redis_server: RedisServer) -> None:
    """A client passed in keeps working after the store closes."""
    client = redis.Redis(port=redis_server.port)
    store = RedisStore(client, prefix="borrowed:")
    store.ping()
    store.heartbeat("beat-1", timedelta(seconds=5))
    assert [r.id for r in store.replicas()] == ["beat-1"]  # bytes answers are decoded too
    store.close()
    assert client.ping()
    client.close()


def test_the_claim_script_reads_each_job_and_time_from_its_key(redis_server: RedisServer) -> None:
    """The batch claim takes each job's last claimed occurrence from the keys themselves: a
    prefix with colons and ``occ:`` in it, several occurrences of one job in a batch, and
    times past 2^31 ms all come back exact, and the hash holds whole milliseconds."""
    client = redis.Redis(port=redis_server.port, decode_responses=True)
    store = RedisStore(client, prefix="a:occ:b:")
    base = datetime(2026, 1, 1, 2, 0, 0, 123000, tzinfo=UTC)
    batch = [
        Occurrence(job="x.y-z", scheduled_at=base + timedelta(minutes=n)) for n in (3, 1, 7, 2)
    ] + [Occurrence(job="occ", scheduled_at=base)]
    assert store.claim_many(batch, "beat-1") == [True] * 5
    assert store.claim_many(batch[:2], "beat-2") == [False, False]
    assert store.last_claimed(["x.y-z", "occ"]) == {
        "x.y-z": base + timedelta(minutes=7),
        "occ": base,
    }
    assert client.hget("a:occ:b:last", "x.y-z") == str(batch[2].epoch_ms)
    older = [Occurrence(job="x.y-z", scheduled_at=base)]
    assert store.claim_many(older, "beat-1") == [True]
    assert store.last_claimed(["x.y-z"]) == {"x.y-z": base + timedelta(minutes=7)}


@given(
    prefix=st.one_of(
        st.text(st.characters(blacklist_characters="{}", codec="utf-8"), max_size=12),
        st.builds(
            lambda a, tag, b: f"{a}{{{tag}}}{b}",
            st.text(st.characters(blacklist_characters="{}", codec="utf-8"), max_size=4),
            st.text(st.characters(blacklist_characters="{}", codec="utf-8"), min_size=1),
            st.text(max_size=6),
        ),
    ),
    job=st.from_regex(NAME_PATTERN, fullmatch=True),
)
def test_a_locks_fencing_counter_is_in_its_cluster_slot_under_the_prefix(
    prefix: str, job: str
) -> None:
    """For every prefix Redis Cluster accepts (no braces, or a hash tag of its own) and every
    job name, the counter hashes to the lock's slot and starts with the prefix."""
    key = lock_key(job)
    fence = fence_key(prefix, key)
    assert key_slot((prefix + key).encode()) == key_slot(fence.encode())
    assert fence.startswith(f"{prefix}fence:")


@given(
    prefix=st.one_of(
        st.text(st.characters(blacklist_characters="{}", codec="utf-8"), max_size=12),
        st.builds(
            lambda a, tag, b: f"{a}{{{tag}}}{b}",
            st.text(st.characters(blacklist_characters="{}", codec="utf-8"), max_size=4),
            st.text(st.characters(blacklist_characters="{}", codec="utf-8"), min_size=1),
            st.text(max_size=6),
        ),
    ),
    group=st.sampled_from(sorted(records.ORDERED_GROUPS)),
)
def test_an_ordered_groups_index_is_in_its_cluster_slot_under_the_prefix(
    prefix: str, group: str
) -> None:
    """For every prefix Redis Cluster accepts, the index of an ordered group hashes to the
    group's slot (one script writes both) and starts with the prefix."""
    index = order_key(prefix, group)
    assert key_slot(f"{prefix}controls:{group}".encode()) == key_slot(index.encode())
    assert index.startswith(f"{prefix}controls-order:")


def test_a_listings_index_follows_every_writer_and_is_made_again_when_it_disagrees(
    redis_server: RedisServer,
) -> None:
    """The stored schedules' names are kept in order beside them by every writer (so a page
    reads the index, never the whole group); names written past the store (an older release,
    a hand-made ``HSET``) or an index of another type make the next page build it again from
    the group, and the writers go on."""
    prefix = f"order-{uuid.uuid4().hex[:8]}:"
    client = redis.Redis(port=redis_server.port, decode_responses=True)
    store = RedisStore(client, prefix=prefix)
    group, hash_name = "schedule", f"{prefix}controls:schedule"
    index = order_key(prefix, group)
    store.put_controls(group, {f"t-{n:03d}": "{}" for n in range(300)})
    store.put_control(group, "t-000", None)
    store.add_controls(group, {"a-new": "{}"})
    store.write_controls({group: {"t-001": None, "b-new": "{}"}})
    assert client.zrange(index, 0, -1) == sorted(client.hkeys(hash_name))
    assert store.first_control_keys(group, 3) == (["a-new", "b-new", "t-002"], 300)

    client.hset(hash_name, mapping={"0-by-hand": "{}", "zz-by-hand": "{}"})
    client.hdel(hash_name, "t-002")
    assert store.first_control_keys(group, 2) == (["0-by-hand", "a-new"], 301)
    assert client.zrange(index, 0, -1) == sorted(client.hkeys(hash_name))

    client.delete(index)
    client.set(index, "another program's value")
    store.put_control(group, "c-new", "{}")  # written, the index of another type dropped
    assert store.first_control_keys(group, 4) == (["0-by-hand", "a-new", "b-new", "c-new"], 302)
    assert client.type(index) == "zset"
    assert client.zcard(index) == 302
    client.close()  # a socket left to the collector warns in a later test


def test_a_prefix_that_would_split_a_lock_from_its_counter_is_refused_on_a_cluster(
    redis_cluster: Any,
) -> None:
    """A brace outside a hash tag would leave the counter in another slot: one line naming
    the option and value, before anything is sent."""
    for prefix in ("a}b:", "x{:", "{}:"):
        with pytest.raises(ConfigError) as raised:
            store_from_url(f"{redis_cluster.url}?prefix={quote(prefix)}")
        assert raised.value.option == "prefix" and raised.value.value == prefix
    store_from_url(f"{redis_cluster.url}?prefix={quote('{cb}:')}").close()


@pytest.mark.parametrize("cluster", [False, True])
def test_a_delivery_is_admitted_and_finished_in_one_round_trip_each(
    cluster: bool, redis_server: RedisServer, redis_cluster: Any
) -> None:
    """The lock, its token and both marks in one script, and the completion mark with the
    lock's release in another, where they share a slot: one server, or a cluster under a
    prefix with a hash tag of its own. A cluster without one takes the steps one by one."""
    for url, trips in (
        (
            (f"{redis_cluster.url}?prefix={quote('{cb-one}:')}", 1),
            (f"{redis_cluster.url}?prefix=cb-steps:", None),
        )
        if cluster
        else ((f"{redis_server.url}?prefix=cb-one:", 1),)
    ):
        store: Any = store_from_url(url)
        try:
            done = Occurrence(job="ledger.post", scheduled_at=datetime(2026, 1, 1, tzinfo=UTC))
            key, mark = lock_key(done.job), began_key(done.job, done.epoch_ms)
            before = store.stats.round_trips
            taken = store.admit(
                key, "w1", timedelta(seconds=30), unless_completed=done, began=(mark, "a|1")
            )
            admitted = store.stats.round_trips - before
            assert taken.outcome == "taken" and taken.marked and taken.token >= 1, taken
            before = store.stats.round_trips
            store.finish(done, (key, "w1"))
            finished = store.stats.round_trips - before
            assert store.finished(done) and store.holder(key) is None
            if trips is not None:
                assert (admitted, finished) == (1, 1), (url, admitted, finished)
            else:
                assert admitted > 1 and finished > 1, (url, admitted, finished)
        finally:
            store.close()


# The script against the steps one after another (``Store.admit``/``Store.finish``, what a
# cluster without a hash-tagged prefix takes), on the same calls and the same contents.
OCC = Occurrence(job="ledger.post", scheduled_at=datetime(2026, 1, 1, tzinfo=UTC))
KEY, MARK = lock_key(OCC.job), began_key(OCC.job, OCC.epoch_ms)
TTL = timedelta(seconds=30)

calls = st.one_of(
    st.tuples(
        st.just("admit"),
        st.sampled_from(["w0", "w1", "w2"]),
        st.booleans(),  # unless_completed
        st.one_of(st.none(), st.tuples(st.sampled_from(["ca", "cb", "cc"]), st.integers(0, 3))),
    ),
    st.tuples(st.just("finish"), st.sampled_from(["w0", "w1", "w2"])),
    st.tuples(st.just("release"), st.sampled_from(["w0", "w1", "w2"])),
    st.tuples(st.just("unmark"), st.sampled_from(["ca", "cb", "cc"]), st.integers(0, 3)),
)


def _apply(store: Any, steps: list[Any], composed: bool) -> list[Any]:
    """What each call answered and what the keys held after it; the tokens taken grow."""
    seen: list[Any] = []
    tokens: list[int] = []
    admit = Store.admit if composed else type(store).admit
    finish = Store.finish if composed else type(store).finish
    for step in steps:
        if step[0] == "admit":
            _, owner, unless, began = step
            mark = None if began is None else (MARK, f"{began[0]}|{began[1]:08x}")
            got = admit(
                store, KEY, owner, TTL, unless_completed=OCC if unless else None, began=mark
            )
            tokens += [got.token] if got.outcome == "taken" else []
            seen.append((got.outcome, got.holder, got.marked))
        elif step[0] == "finish":
            seen.append(finish(store, OCC, (KEY, step[1])))
        elif step[0] == "release":
            seen.append(store.release(KEY, step[1]))
        else:
            seen.append(store.release(MARK, f"{step[1]}|{step[2]:08x}"))
        seen.append((store.holder(KEY), store.holder(MARK), store.finished(OCC)))
    assert tokens == sorted(set(tokens)), tokens
    return seen


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(steps=st.lists(calls, min_size=1, max_size=12))
def test_the_admit_script_answers_as_the_steps_one_after_another(
    steps: list[Any], redis_server: RedisServer
) -> None:
    """Generated sequences of admits (with and without marks, of three copies), finishes,
    releases and takebacks: the one-script Redis store, the same store taking the steps one
    after another and the memory store answer alike at every step, and the tokens grow."""
    answers = {"memory": _apply(store_from_url("memory://"), steps, composed=False)}
    for name, composed in (("script", False), ("steps", True)):
        store = store_from_url(f"{redis_server.url}?prefix=ad{uuid.uuid4().hex[:10]}:")
        try:
            answers[name] = _apply(store, steps, composed)
        finally:
            store.close()
    assert answers["script"] == answers["memory"] == answers["steps"], (steps, answers)


HOSTILE = [
    ("string", b"ca|\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8"),  # the copy's, not UTF-8 after it
    ("string", b"ca|0123abcd!"),  # the copy's, and more
    ("string", b"ca|0123ABCD"),
    ("string", b"ca"),
    ("string", b"\xff\xfe"),
    ("string", b"ca|" + b"0" * (1 << 20)),  # past what a reader takes
    ("string", b""),
    ("string", b"completed"),
    ("string", b"x"),
    ("hash", b"x"),
    ("list", b"x"),
]


@pytest.mark.parametrize("where", ["done", "began", "lock", "counter"])
@pytest.mark.parametrize(("kind", "value"), HOSTILE)
def test_another_programs_values_are_judged_alike_by_the_script_and_the_steps(
    where: str, kind: str, value: bytes, redis_server: RedisServer
) -> None:
    """Whatever another program left in the completion mark, the began mark, the lock or its
    counter (any bytes, any type), the script and the steps one after another answer alike:
    a completion mark counts only as ``completed``, a began mark is this copy's only as
    ``<copy>|`` and 8 lowercase hex digits, and a counter no token can follow fails the run
    before the mark is read."""
    answers = {}
    for name, composed in (("script", False), ("steps", True)):
        store: Any = store_from_url(f"{redis_server.url}?prefix=ah{uuid.uuid4().hex[:10]}:")
        target = {
            "done": done_key(OCC),
            "began": MARK,
            "lock": KEY,
            "counter": fence_key(store.prefix, KEY)[len(store.prefix) :],
        }[where]
        client = redis.Redis.from_url(redis_server.url)
        name_of = (store.prefix + target).encode()
        if kind == "string":
            client.set(name_of, value)
        elif kind == "hash":
            client.hset(name_of, "x", value)
        else:
            client.rpush(name_of, value)
        if where == "counter":
            client.set(store.prefix + MARK, b"cb|00000000")  # another copy's, too
        client.close()
        admit = Store.admit if composed else type(store).admit
        try:
            got = admit(store, KEY, "w9", TTL, unless_completed=OCC, began=(MARK, "ca|0000ffff"))
            answers[name] = (got.outcome, (got.holder or "")[:20], got.marked)
        except Exception as exc:
            answers[name] = ("raised", type(exc).__name__)
        finally:
            store.close()
    assert answers["script"] == answers["steps"], (where, kind, value[:12], answers)


def test_a_listings_index_that_names_a_key_the_group_lacks_is_made_again(
    redis_server: RedisServer,
) -> None:
    """An older release's writer (or a hand-made change) that removes one schedule and adds
    another leaves the index of the same size as the group, naming the removed one and not
    the added one; an index whose scores are not all 0 gives ZRANGEBYLEX no order. A page
    that meets either is read from the index made again, not shown wrong for good."""
    prefix = f"drift-{uuid.uuid4().hex[:8]}:"
    client = redis.Redis(port=redis_server.port, decode_responses=True)
    store = RedisStore(client, prefix=prefix)
    group, hash_name = "schedule", f"{prefix}controls:schedule"
    index = order_key(prefix, group)
    store.put_controls(group, {"a": "{}", "b": "{}", "m": "{}"})
    client.hdel(hash_name, "b")  # an older release: one removed, one added, past the index
    client.hset(hash_name, "c", "{}")
    assert store.first_control_keys(group, 2) == (["a", "c"], 3)
    store.put_control(group, "d", "{}")  # and the writers go on with the index made again
    assert store.first_control_keys(group, 5) == (["a", "c", "d", "m"], 4)
    assert client.zrange(index, 0, -1) == sorted(client.hkeys(hash_name))

    client.zadd(index, {"m": 7, "a": 5})  # scores by hand: ZRANGEBYLEX has no order then
    assert store.first_control_keys(group, 5) == (["a", "c", "d", "m"], 4)
    assert client.zscore(index, "m") == 0
    client.close()  # a socket left to the collector warns in a later test


def test_a_group_too_large_to_index_at_once_is_read_whole_not_indexed(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Making an index again is one script, during which Redis answers no beat: past
    ``INDEX_MADE_MOST`` names (a million took 4 to 5 s, and every claim was answered BUSY)
    a page reads the group whole, as before the index, and leaves the index to its writers."""
    monkeypatch.setattr(redis_controls, "INDEX_MADE_MOST", 50)
    prefix = f"large-{uuid.uuid4().hex[:8]}:"
    client = redis.Redis(port=redis_server.port, decode_responses=True)
    store = RedisStore(client, prefix=prefix)
    names = {f"t-{n:03d}": "{}" for n in range(60)}
    client.hset(f"{prefix}controls:schedule", mapping=names)  # written by an older release
    assert store.first_control_keys("schedule", 3) == (["t-000", "t-001", "t-002"], 60)
    assert not client.exists(order_key(prefix, "schedule"))
    client.delete(f"{prefix}controls:schedule")
    store.put_controls("schedule", names)  # written with its index from the first name on
    assert store.first_control_keys("schedule", 3) == (["t-000", "t-001", "t-002"], 60)
    assert client.zcard(order_key(prefix, "schedule")) == 60
    client.close()  # a socket left to the collector warns in a later test
