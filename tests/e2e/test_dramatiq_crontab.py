"""Twin test: stock ``manage.py crontab`` (dramatiq-crontab, one process) and three
``cron-bridge dramatiq-crontab`` replicas on the same Django project (tests/apps/crontabproj),
side by side, each sending into its own broker namespace; the messages that reach Redis are
compared field by field and counted per actor over the same window."""

from __future__ import annotations

import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.e2e.processes import Command, cli, command_env
from tests.e2e.test_periodiq import messages  # what reached a Dramatiq Redis broker
from tests.e2e.twins import logs_say, side_by_side
from tests.servers import RedisServer

pytestmark = pytest.mark.slow

SETTINGS = "tests.apps.crontabproj.settings"
WINDOW = 66.0  # seconds: covers a minute boundary 3 s inside it
VOLATILE = {"message_id", "message_timestamp"}
VOLATILE_OPTIONS = {"redis_message_id"}


def shape(message: dict[str, Any]) -> str:
    kept = {k: v for k, v in message.items() if k not in VOLATILE}
    kept["options"] = {k: v for k, v in message["options"].items() if k not in VOLATILE_OPTIONS}
    return repr(sorted(kept.items()))


def test_manage_py_crontab_and_three_cron_bridge_replicas_send_the_same_messages(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """The same actors with the same queue, args, kwargs and options from both; the crontab
    ones in the same minutes, the interval one as often (±1); each of ours once."""
    name = uuid.uuid4().hex[:8]
    server = redis_server.url.rsplit("/", 1)[0]
    broker = f"{server}/6"
    stock_env = command_env(CB_TEST_BROKER=broker, CB_TEST_NAMESPACE=f"stock-{name}")
    stock = Command(
        "stock",
        tmp_path,
        stock_env,
        sys.executable,
        "-m",
        "django",
        "crontab",
        f"--settings={SETTINGS}",
    )
    ours_env = command_env(CB_TEST_BROKER=broker, CB_TEST_NAMESPACE=f"ours-{name}")
    store_url = f"{server}/7?prefix=dc{name}:"
    argv = [
        sys.executable,
        "-m",
        "cron_bridge",
        "dramatiq-crontab",
        "--settings",
        SETTINGS,
        "--store",
        store_url,
    ]
    ours = [
        Command(f"replica{i}", tmp_path, ours_env, *argv, "--replica-id", f"replica{i}")
        for i in range(3)
    ]
    client = redis.Redis.from_url(broker)
    ready = logs_say("Starting scheduler", "started with 5 jobs")
    with side_by_side(stock, ours, ready=ready, what="manage.py crontab and replicas") as twins:
        window = twins.watch(WINDOW)

    def sent(namespace: str) -> list[dict[str, Any]]:
        """The messages sent in the window; a crontab actor's only for the minute boundaries
        3 s inside it, where both sides sent theirs (a send comes a few ms after it)."""
        found = []
        for m in messages(client, namespace):
            at = m["message_timestamp"] / 1000
            boundary = at - at % 60
            if m["actor_name"] == "pulse":
                keep = at in window
            else:
                keep = window.began + 3 <= boundary <= window.ended - 3 and at - boundary < 30
            if keep:
                found.append(m)
        return found

    stock_sent, our_sent = sent(f"stock-{name}"), sent(f"ours-{name}")
    assert stock_sent, stock.output()[-3000:]

    def timeline(side: str) -> list[tuple[str, float]]:
        """Every message of a side, kept or not: its actor and when it was made, in seconds
        from the window's start (for a failure to say what was sent when)."""
        return sorted(
            (m["actor_name"], round(m["message_timestamp"] / 1000 - window.began, 3))
            for m in messages(client, f"{side}-{name}")
        )

    # Field by field: the same kinds of message from both.
    assert {shape(m) for m in our_sent} == {shape(m) for m in stock_sent}, (
        f"window {window.began:.3f}..{window.ended:.3f}",
        timeline("stock"),
        timeline("ours"),
        twins.logs(),
    )

    def per_minute(found: list[dict[str, Any]]) -> Counter[tuple[str, int]]:
        return Counter(
            (m["actor_name"], int(m["message_timestamp"] / 60_000))
            for m in found
            if m["actor_name"] != "pulse"
        )

    assert per_minute(our_sent) == per_minute(stock_sent)
    assert {actor for actor, _ in per_minute(stock_sent)} == {
        "every_minute",
        "weekdays_and_weekends",
        "heartbeat",
    }
    pulses = Counter(m["actor_name"] for m in stock_sent)["pulse"]
    assert pulses >= 11 and abs(Counter(m["actor_name"] for m in our_sent)["pulse"] - pulses) <= 1

    # Each occurrence once: one message per occurrence the store says was enqueued.
    history = cli(
        "history",
        "every_minute",
        "--json",
        "-n",
        "50",
        "--store",
        store_url,
        env=ours_env,
        cwd=tmp_path,
    )
    assert history.returncode == 0, history.stderr
    assert history.stdout.count('"enqueued"') == len(
        [m for m in messages(client, f"ours-{name}") if m["actor_name"] == "every_minute"]
    )
