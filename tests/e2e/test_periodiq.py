"""Twin test: stock ``periodiq`` (one process) and three ``cron-bridge periodiq`` replicas on
the same actors (tests/apps/periodiq_app.py), side by side, each sending into its own broker
namespace; the messages that reach Redis are compared field by field, minute by minute."""

from __future__ import annotations

import sys
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dramatiq
import pendulum
import pytest
import redis
from periodiq import cron

from adapters.dramatiq.tests.differential.test_periodiq import as_periodiq_means
from cron_bridge.jobs import Occurrence
from cron_bridge.stores import store_from_url
from tests.e2e.processes import Command, command_env
from tests.e2e.twins import logs_say, side_by_side
from tests.servers import RedisServer
from tests.waiting import waited

pytestmark = pytest.mark.slow

APP = "tests.apps.periodiq_app"
# Its actors' specs, as stock periodiq lists them at start (the test checks its log says so).
SPECS = {
    "every_minute": "* * * * *",
    "report": "* * * * sun-sat",
    "even_minutes": "0-59/2 * * * *",
    "hourly": "@hourly",
}
WINDOW = 66.0  # seconds: covers a minute boundary, 5 s before the stop
# Differ between any two sends, whoever sends them.
VOLATILE = {"message_id", "message_timestamp"}
VOLATILE_OPTIONS = {"redis_message_id"}


def messages(client: redis.Redis, namespace: str) -> list[dict[str, Any]]:
    """Every message waiting in the namespace's queues, decoded as a worker would."""
    found = []
    for key in client.scan_iter(f"{namespace}:*.msgs"):
        for raw in client.hvals(key):
            found.append(dramatiq.Message.decode(raw).asdict())
    return found


def shape(message: dict[str, Any]) -> dict[str, Any]:
    """The message as compared: ``scheduled_at`` to the minute. periodiq writes the second it
    woke at (``now + 0.5 s``, rounded), which a loaded machine makes :01 or later; cron-bridge
    writes the occurrence's own minute (an intended difference, in docs/migrating.md), so the
    seconds are checked apart."""
    kept = {k: v for k, v in message.items() if k not in VOLATILE}
    options = {k: v for k, v in message["options"].items() if k not in VOLATILE_OPTIONS}
    options["scheduled_at"] = _minute(options["scheduled_at"])
    kept["options"] = options
    return kept


def _minute(text: str) -> str:
    return datetime.fromisoformat(text).replace(second=0).isoformat(" ")


def _due(message: dict[str, Any]) -> float:
    """The minute a message was sent for, as a timestamp."""
    at = datetime.fromisoformat(message["options"]["scheduled_at"])
    return at.replace(second=0).timestamp()


def periodiq_omits(message: dict[str, Any]) -> bool:
    """Whether stock periodiq never sends this message of ours: a Sunday written as 0 or
    ``sun`` (``report``'s ``sun-sat``), which periodiq's day check misses (the named
    difference ``periodiq.sunday``, docs/migrating.md, walked by the differential test)."""
    spec = cron(SPECS[message["actor_name"]])
    at = pendulum.from_timestamp(_due(message), tz=pendulum.local_timezone())
    return not spec.validate(at) and as_periodiq_means(spec).validate(at)


def _second(message: dict[str, Any]) -> int:
    return datetime.fromisoformat(message["options"]["scheduled_at"]).second


def test_stock_periodiq_and_three_cron_bridge_replicas_send_the_same_messages(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """Each minute the same actors with the same queue, args, kwargs and options (its
    ``scheduled_at`` to the second) reach the broker from both, and each of ours once."""
    name = uuid.uuid4().hex[:8]
    server = redis_server.url.rsplit("/", 1)[0]
    broker = f"{server}/4"
    stock = Command(
        "stock",
        tmp_path,
        command_env(CB_TEST_BROKER=broker, CB_TEST_NAMESPACE=f"stock-{name}"),
        str(Path(sys.executable).parent / "periodiq"),
        APP,
    )
    ours_env = command_env(CB_TEST_BROKER=broker, CB_TEST_NAMESPACE=f"ours-{name}")
    store_url = f"{server}/5?prefix=pq{name}:"
    argv = [sys.executable, "-m", "cron_bridge", "periodiq", APP, "--store", store_url]
    ours = [
        Command(f"replica{i}", tmp_path, ours_env, *argv, "--replica-id", f"replica{i}")
        for i in range(3)
    ]
    client = redis.Redis.from_url(broker)

    def in_window(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # By the minute it was for (the same on both sides), due well before the stop.
        return [m for m in found if window.began <= _due(m) <= window.ended - 5]

    def due(side: str) -> set[tuple[str, float]]:
        found = in_window(messages(client, f"{side}-{name}"))
        return {(m["actor_name"], _due(m)) for m in found if not periodiq_omits(m)}

    ready = logs_say("Starting Periodiq", "started with 4 jobs")
    with side_by_side(stock, ours, ready=ready, what="periodiq and three replicas") as twins:
        window = twins.watch(WINDOW)
        # Each side sends a minute's messages as it wakes for it, and on a loaded machine one
        # side can be seconds behind the other: wait (a deadline sized for that, not a guess
        # at how far behind) until both have sent the same occurrences, before they stop.
        waited(lambda: due("stock") == due("ours"), 30)
        behind = {
            side: sorted(due(other) - due(side))
            for side, other in (("stock", "ours"), ("ours", "stock"))
        }
    # What the store says of an occurrence ours did not send: claimed and never sent would be
    # a loss; claimed by nobody, a minute none of the replicas took up.
    store = store_from_url(store_url)
    try:
        claims = {
            f"{actor}@{at:.0f}": store.claimed_by(
                Occurrence(job=actor, scheduled_at=datetime.fromtimestamp(at, UTC))
            )
            for actor, at in behind["ours"]
        }
    finally:
        store.close()

    stock_sent = in_window(messages(client, f"stock-{name}"))
    our_sent = in_window(messages(client, f"ours-{name}"))
    assert stock_sent, stock.output()[-3000:]
    for actor, spec in SPECS.items():
        assert any(spec in line and f":{actor}@" in line for line in stock.output().splitlines())
    # Sent by ours and never by periodiq, by the named difference: compared apart.
    sundays = [m for m in our_sent if periodiq_omits(m)]
    assert all(datetime.fromtimestamp(_due(m)).isoweekday() == 7 for m in sundays)
    assert not any(periodiq_omits(m) for m in stock_sent)
    our_sent = [m for m in our_sent if m not in sundays]

    def by_send(found: list[dict[str, Any]]) -> Counter[str]:
        return Counter(repr(sorted(shape(m).items())) for m in found)

    ours_counted = by_send(our_sent)
    assert max(ours_counted.values()) == 1, ours_counted.most_common(2)  # each occurrence once
    assert ours_counted == by_send(stock_sent), (behind, claims, twins.logs())
    assert {_second(m) for m in our_sent} == {0}  # the occurrence's own time
    assert all(_second(m) <= 10 for m in stock_sent)  # periodiq's wake-up, a little late
    actors = {m["actor_name"] for m in stock_sent + sundays}
    assert {"every_minute", "report"} <= actors and "not_periodic" not in actors
    reports = [m for m in stock_sent + sundays if m["actor_name"] == "report"]
    assert {m["queue_name"] for m in reports} == {"reports"}
