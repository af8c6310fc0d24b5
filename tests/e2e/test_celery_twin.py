"""Twin test: stock ``celery beat`` and three ``celery beat -S cron_bridge`` replicas on the same
``beat_schedule`` (tests/apps/celery_corpus.py), side by side, each publishing to its own
broker database; what reaches the broker is compared field by field, entry by entry.

Run with the Celery this environment has and with the lowest Celery the adapter declares
(``.venv-celery-floor``, made by ``make test``), there with kombu 5.3: the adapter's path
without kombu's publish batch (5.7) sends each message on its own.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.conftest import importable, unavailable
from tests.e2e.processes import REPO, Service, command_env
from tests.e2e.twins import side_by_side
from tests.servers import RedisServer, ServerUnavailable

pytestmark = pytest.mark.slow

APP = "tests.apps.celery_corpus"
FLOOR = REPO / ".venv-celery-floor" / "bin" / "python"
WINDOW = 62.0  # seconds: covers at least one minute boundary for the crontab entries
# Differ between any two sends, whoever sends them; the relative times are compared apart.
VOLATILE_HEADERS = {"id", "root_id", "parent_id", "origin", "eta", "expires", "cron_bridge"}
VOLATILE_PROPERTIES = {"correlation_id", "reply_to", "delivery_tag", "delivery_info"}


@dataclass
class Sent:
    """One message as it reached the broker."""

    at: float
    key: tuple[str, str, str]
    shape: dict[str, Any]
    expires_in: float | None
    eta_in: float | None
    occurrence: str | None
    replica: str | None


@dataclass
class Sniffer:
    """Takes every message off one broker database as it arrives, with its arrival time."""

    url: str
    sent: list[Sent] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        client = redis.Redis.from_url(self.url)
        while not self.stop.is_set():
            for key in client.scan_iter(_type="list"):
                for raw in client.lpop(key, 1000) or []:
                    self.sent.append(parse(key.decode(errors="replace"), raw, time.time()))
            time.sleep(0.02)
        client.close()


def _relative(stamp: str | None, at: float) -> float | None:
    if not stamp:
        return None
    return datetime.fromisoformat(stamp).timestamp() - at


def parse(queue_key: str, raw: bytes, at: float) -> Sent:
    message = json.loads(raw)
    headers, properties = message["headers"], message["properties"]
    body = message["body"]
    if properties.get("body_encoding") == "base64":
        body = base64.b64decode(body)
    args, kwargs, embed = json.loads(body)
    delivery = properties.get("delivery_info") or {}
    meta = headers.get("cron_bridge") or {}
    shape = {
        "task": headers["task"],
        "args": args,
        "kwargs": kwargs,
        "queue (broker list)": queue_key,
        "exchange": delivery.get("exchange"),
        "routing_key": delivery.get("routing_key"),
        "priority": properties.get("priority"),
        "headers": {k: v for k, v in headers.items() if k not in VOLATILE_HEADERS},
        "properties": {k: v for k, v in properties.items() if k not in VOLATILE_PROPERTIES},
        "content-type": message.get("content-type"),
        "content-encoding": message.get("content-encoding"),
        "embed": {k: v for k, v in embed.items() if k not in ("callbacks", "errbacks", "chain")},
        "has expires": bool(headers.get("expires")),
        "has eta": bool(headers.get("eta")),
    }
    key = (headers["task"], json.dumps(args), json.dumps(kwargs, sort_keys=True))
    return Sent(
        at=at,
        key=key,
        shape=shape,
        expires_in=_relative(headers.get("expires"), at),
        eta_in=_relative(headers.get("eta"), at),
        occurrence=meta.get("occurrence_id"),
        replica=meta.get("replica"),
    )


class CeleryBeat(Service):
    def __init__(self, name: str, folder: Path, env: dict[str, str], python: str, *args: str):
        super().__init__(name, folder, env)
        self.python = python
        self.args = list(args)

    def argv(self) -> list[str]:
        return [self.python, "-m", "celery", "-A", APP, "beat", "-l", "INFO", *self.args]


def noon_longitude(target: datetime) -> float:
    """The longitude on the equator where the sun crosses the meridian at ``target``."""
    ephem = importable("ephem")
    observer, sun, lon = ephem.Observer(), ephem.Sun(), 0.0
    observer.lat, observer.pressure = "0", 0
    for _ in range(6):
        observer.lon = str(lon)
        start = ephem.Date((target - timedelta(hours=12)).replace(tzinfo=None))
        noon = observer.next_transit(sun, start=start).datetime().replace(tzinfo=UTC)
        lon = (lon + (noon - target).total_seconds() / 240.0 + 180.0) % 360.0 - 180.0
    return round(lon, 4)


@pytest.fixture(params=["installed", "floor"])
def celery_python(request: pytest.FixtureRequest) -> str:
    """The interpreter the beats run under: this environment's Celery, or the lowest one the
    adapter declares."""
    if request.param == "installed":
        return sys.executable
    if not FLOOR.exists():
        unavailable(
            "the lowest Celery the adapter declares",
            FileNotFoundError(f"{FLOOR} is missing: `make test` creates it"),
        )
    batches = "import kombu; print(hasattr(kombu.Producer, 'batch'))"
    done = subprocess.run(
        [str(FLOOR), "-c", batches], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "False", "the floor's kombu should predate the publish batch"
    return str(FLOOR)


def version_of(python: str) -> str:
    done = subprocess.run(
        [python, "-c", "import celery; print(celery.__version__)"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.strip()


def test_stock_celery_beat_and_three_cron_bridge_replicas_send_the_same_messages(
    tmp_path: Path, celery_python: str
) -> None:
    """Every entry of a 31-entry schedule reaches the broker with the same task, args, kwargs,
    queue, exchange, routing key, priority, headers, properties, expires and eta from both, as
    often (±1 at the window's edges), and each of our occurrences is sent once."""
    try:
        server = RedisServer()
        server.start()
    except ServerUnavailable as exc:
        unavailable("redis-server", exc)
    try:
        compare(tmp_path, server, celery_python)
    finally:
        server.remove()


def clear_of_the_hour() -> None:
    """Wait out the last two minutes of an hour: the corpus's hour and date fields name the
    hour of its import + 90 s, which must be the hour of the minute boundary the window covers
    (a run starting at :58 would name the next hour and see this one's boundary)."""
    now = datetime.now(UTC)
    if now.minute >= 58:
        time.sleep((60 - now.minute) * 60 - now.second + 2)


def compare(tmp_path: Path, server: RedisServer, python: str) -> None:
    clear_of_the_hour()
    base = f"redis://127.0.0.1:{server.port}"
    results = tmp_path / "results"
    results.mkdir()
    lon = noon_longitude(datetime.now(UTC) + timedelta(seconds=45))
    common = {"CB_TEST_RESULTS": str(results), "CB_TEST_SOLAR_LON": str(lon)}
    stock_env = command_env(CB_TEST_BROKER=f"{base}/1", **common)
    store = f"{base}/3?prefix=twin{uuid.uuid4().hex[:6]}:"
    ours_env = command_env(CB_TEST_BROKER=f"{base}/2", CRON_BRIDGE_STORE=store, **common)
    stock_sniffer, ours_sniffer = Sniffer(f"{base}/1"), Sniffer(f"{base}/2")
    threads = [threading.Thread(target=s.run, daemon=True) for s in (stock_sniffer, ours_sniffer)]
    for thread in threads:
        thread.start()
    beats = [
        CeleryBeat(
            "stock", tmp_path, stock_env, python, "-s", str(tmp_path / "celerybeat-schedule")
        )
    ]
    beats += [
        CeleryBeat(f"ours{i}", tmp_path, ours_env, python, "-S", "cron_bridge") for i in range(3)
    ]
    try:
        with side_by_side(
            beats[0],
            beats[1:],
            ready=lambda _: bool(stock_sniffer.sent) and bool(ours_sniffer.sent),
            what="both sides' first messages",
        ) as twins:
            window = twins.watch(WINDOW, tail=1.0)
    finally:
        stock_sniffer.stop.set()
        ours_sniffer.stop.set()
        for thread in threads:
            thread.join(10)
    assert all("Traceback" not in beat.output() for beat in beats), twins.logs()

    def in_window(sniffer: Sniffer) -> dict[tuple[str, str, str], list[Sent]]:
        by_key: dict[tuple[str, str, str], list[Sent]] = defaultdict(list)
        for sent in sniffer.sent:
            if sent.at in window:
                by_key[sent.key].append(sent)
        return by_key

    stock, ours = in_window(stock_sniffer), in_window(ours_sniffer)
    version = version_of(python)
    label = f"celery {version}"
    assert len(stock) >= 25, (label, sorted(stock))
    assert set(stock) == set(ours), (label, set(stock) ^ set(ours))
    for key in stock:
        theirs, mine = stock[key], ours[key]
        assert abs(len(theirs) - len(mine)) <= 1, (label, key, len(theirs), len(mine))
        for field_name, value in theirs[0].shape.items():
            assert mine[0].shape[field_name] == value, (label, key, field_name)
        for attr in ("expires_in", "eta_in"):
            a, b = getattr(theirs[0], attr), getattr(mine[0], attr)
            assert (a is None) == (b is None), (label, key, attr)
            if a is not None and b is not None:
                assert abs(a - b) < 5, (label, key, attr, a, b)
    # The AND rule: the 10th-if-Sunday kind of entry names today's date with tomorrow's
    # weekday; celery beat never sends it, and neither do we.
    and_rule = ("proj.report", json.dumps(["and-rule"]), "{}")
    assert and_rule not in stock and and_rule not in ours
    assert len(ours[("proj.solar", json.dumps(["noon"]), "{}")]) == 1, label
    occurrences = Counter(sent.occurrence for sent in ours_sniffer.sent)
    assert None not in occurrences and max(occurrences.values()) == 1, occurrences.most_common(3)
    assert len({sent.replica for sent in ours_sniffer.sent}) >= 2
