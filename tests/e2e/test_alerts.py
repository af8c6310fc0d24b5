"""The ready-made alerting in deploy/: the Prometheus rules (deploy/prometheus) and the
Grafana dashboard (deploy/grafana) name only metrics and labels a running beat really
exports, scraped from two replicas on a Redis store (whose clock gives the offset gauge)."""

from __future__ import annotations

import json
import re
import time
import typing
import urllib.request
import uuid
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from cron_bridge.stores.records import Outcome
from tests.e2e.processes import REPO, BeatProcess, command_env
from tests.servers import RedisServer, free_port
from tests.waiting import wait_for

pytestmark = [pytest.mark.redis, pytest.mark.slow]

RULES = REPO / "deploy" / "prometheus" / "cron-bridge-alerts.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "cron-bridge.json"
METRIC = re.compile(r"\b(cron_bridge_[a-z_]+)(\{[^}]*\})?")
MATCHER = re.compile(r'(\w+)\s*(?:=~|!~|!=|=)\s*"([^"]*)"')
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
TEMPLATE_LABEL = re.compile(r"\$labels\.(\w+)|\{\{\s*(\w+)\s*\}\}")
BUILTIN = {"le"}  # a histogram's bucket label


def rules() -> list[dict[str, typing.Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def dashboard_queries() -> list[tuple[str, str]]:
    """Each panel's query with its legend, and the templating queries."""
    board = json.loads(DASHBOARD.read_text())
    found = [
        (target["expr"], target.get("legendFormat", ""))
        for panel in board["panels"]
        for target in panel.get("targets", [])
    ]
    for variable in board["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            found.append((query["query"], ""))
    return found


def scrape(port: int) -> tuple[dict[str, set[str]], dict[str, float]]:
    """Every sample name a beat's /metrics serves, with the label names it carries; and the
    value of each sample without labels but ``replica`` (the beat's own gauges)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, set[str]] = defaultdict(set)
    gauges: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[sample.name] |= set(sample.labels)
            if set(sample.labels) == {"replica"}:
                gauges[sample.name] = sample.value
    return samples, gauges


def check(expr: str, templates: str, exported: dict[str, set[str]], where: str) -> None:
    """The metrics ``expr`` names are exported, with the labels it matches, groups by and
    shows (``templates``: legends, annotations); an outcome it matches is one cron-bridge
    records."""
    named = METRIC.findall(expr)
    assert named, f"{where}: names no cron-bridge metric: {expr}"
    labels: set[str] = set()
    for metric, matchers in named:
        if metric.startswith("cron_bridge_") and metric not in exported:
            raise AssertionError(
                f"{where}: {metric} is not exported (exported: {sorted(exported)})"
            )
        labels |= exported[metric]
        for label, value in MATCHER.findall(matchers or ""):
            assert label in exported[metric], f"{where}: {metric} has no label {label}"
            if label == "outcome":
                assert value in typing.get_args(Outcome), f"{where}: no outcome {value!r}"
    for grouped in GROUPING.findall(expr):
        for label in filter(None, (part.strip() for part in grouped.split(","))):
            assert label in labels | BUILTIN, f"{where}: grouped by {label}, not a label"
    for pair in TEMPLATE_LABEL.findall(templates):
        label = pair[0] or pair[1]
        if label != "value":
            assert label in labels, f"{where}: shows {label}, not a label of {expr}"


def test_the_alert_rules_and_the_dashboard_name_what_a_running_beat_exports(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    url = f"{redis_server.url}?prefix=alerts{uuid.uuid4().hex[:6]}:"
    ports = [free_port(), free_port()]
    beats = [
        BeatProcess(
            f"beat{i}",
            tmp_path,
            command_env(),
            app="tests.apps.alerting",
            store_url=url,
            extra=["--metrics", f"127.0.0.1:{port}"],
        ).start()
        for i, port in enumerate(ports)
    ]
    try:
        # Each beat counts the live replicas at most every 5 s: until both see the other, a
        # count read before the second one's first heartbeat stands.
        wait_for(
            lambda: all(_gauge(p, "cron_bridge_replicas_live") == 2 for p in ports),
            30,
            "both beats seeing two live replicas",
        )
        time.sleep(2)  # runs of both jobs, counted, timed and late
        scraped = [scrape(port) for port in ports]
    finally:
        for beat in beats:
            beat.ensure_stopped()
    exported: dict[str, set[str]] = defaultdict(set)
    for samples, gauges in scraped:
        for name, labels in samples.items():
            exported[name] |= labels
        # Each running beat: its loop runs, the store answers, both replicas alive in it.
        assert gauges["cron_bridge_up"] == gauges["cron_bridge_store_up"] == 1, gauges
        assert gauges["cron_bridge_replicas_live"] == 2, gauges
        assert abs(gauges["cron_bridge_clock_offset_seconds"]) < 1, gauges
    for gauge in (
        "cron_bridge_up",
        "cron_bridge_store_up",
        "cron_bridge_replicas_live",
        "cron_bridge_clock_offset_seconds",
    ):
        assert exported.get(gauge) == {"replica"}, (gauge, exported)
    found = rules()
    assert {rule["alert"] for rule in found} >= {
        "CronBridgeMissedOccurrences",
        "CronBridgeJobFailing",
        "CronBridgeNoLiveReplica",
        "CronBridgeClockOffset",
        "CronBridgeStoreUnreachable",
    }
    for rule in found:
        shown = json.dumps(rule.get("annotations", {}))
        check(rule["expr"], shown, exported, f"rule {rule['alert']}")
    queries = dashboard_queries()
    assert len(queries) >= 10
    for expr, legend in queries:
        check(expr, legend, exported, "dashboard")


def test_the_store_gauge_falls_to_0_while_the_store_is_down_and_the_scrape_still_answers(
    tmp_path: Path,
) -> None:
    """What CronBridgeStoreUnreachable reads: the Redis store stopped under a running beat,
    its /metrics still answers, with ``cron_bridge_store_up`` 0 and the last count of live
    replicas; once the store is back, 1 again."""
    from tests.conftest import unavailable
    from tests.servers import ServerUnavailable

    server = RedisServer()
    try:
        server.start()
    except ServerUnavailable as exc:
        unavailable("redis-server", exc)
    port = free_port()
    beat = BeatProcess(
        "beat",
        tmp_path,
        command_env(),
        app="tests.apps.alerting",
        store_url=f"{server.url}?connect_timeout=1",
        extra=["--metrics", f"127.0.0.1:{port}"],
    ).start()
    try:
        wait_for(lambda: _gauge(port, "cron_bridge_replicas_live") == 1, 30, "the beat alive")
        server.stop()
        wait_for(lambda: _gauge(port, "cron_bridge_store_up") == 0, 30, "the store gauge at 0")
        assert _gauge(port, "cron_bridge_replicas_live") == 1  # the last count stands
        assert _gauge(port, "cron_bridge_up") == 1  # the loop goes on
        server.start()
        wait_for(lambda: _gauge(port, "cron_bridge_store_up") == 1, 30, "the store gauge at 1")
    finally:
        beat.ensure_stopped()
        server.remove()


def _gauge(port: int, name: str) -> float | None:
    try:
        return scrape(port)[1].get(name)
    except OSError:
        return None
