"""Twin test: stock ``periodiq`` (one process) and three ``cron-bridge periodiq`` replicas on
the same actors (tests/apps/periodiq_app.py), side by side, each sending into its own broker
namespace; the messages that reach Redis are compared field by field, minute by minute."""

from __future__ import annotations

import sys
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import dramatiq
import pytest
import redis

from tests.e2e.processes import Command, command_env
from tests.e2e.twins import logs_say, side_by_side
from tests.servers import RedisServer

pytestmark = pytest.mark.slow

APP = "tests.apps.periodiq_app"
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
    argv = [
        sys.executable,
        "-m",
        "cron_bridge",
        "periodiq",
        APP,
        "--store",
        f"{server}/5?prefix=pq{name}:",
    ]
    ours = [
        Command(f"replica{i}", tmp_path, ours_env, *argv, "--replica-id", f"replica{i}")
        for i in range(3)
    ]
    client = redis.Redis.from_url(broker)
    ready = logs_say("Starting Periodiq", "started with 4 jobs")
    with side_by_side(stock, ours, ready=ready, what="periodiq and three replicas") as twins:
        window = twins.watch(WINDOW)

    def in_window(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            m
            for m in found
            # By the minute it was for (the same on both sides), sent well before the stop.
            if window.began <= _due(m) <= window.ended - 5
        ]

    stock_sent = in_window(messages(client, f"stock-{name}"))
    our_sent = in_window(messages(client, f"ours-{name}"))
    assert stock_sent, stock.output()[-3000:]

    def by_send(found: list[dict[str, Any]]) -> Counter[str]:
        return Counter(repr(sorted(shape(m).items())) for m in found)

    ours_counted = by_send(our_sent)
    assert max(ours_counted.values()) == 1, ours_counted.most_common(2)  # each occurrence once
    assert ours_counted == by_send(stock_sent)
    assert {_second(m) for m in our_sent} == {0}  # the occurrence's own time
    assert all(_second(m) <= 10 for m in stock_sent)  # periodiq's wake-up, a little late
    actors = {m["actor_name"] for m in stock_sent}
    assert {"every_minute", "report"} <= actors and "not_periodic" not in actors
    assert {m["queue_name"] for m in stock_sent if m["actor_name"] == "report"} == {"reports"}
