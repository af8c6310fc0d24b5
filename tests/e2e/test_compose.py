"""``docker-compose.yml`` cannot rot: its services run here as local processes.

No Docker engine runs on our machines, so the test reads the compose file and starts each
service's own command with the service's own environment against local Redis and Postgres:
the three beat replicas, the Celery, RQ and Dramatiq workers of ``examples/``. Host names of
the compose network are the only thing rewritten (``redis:6379`` and the store URL).
"""

from __future__ import annotations

import math
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from cron_bridge.jobs import Occurrence
from cron_bridge.schedules import parse_duration
from cron_bridge.stores import RunRecord, store_from_url
from tests.conftest import make_kit
from tests.e2e.processes import (
    REPO,
    Service,
    outcomes_by_occurrence,
    records_of,
    stop_together,
)
from tests.servers import RedisServer, free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

COMPOSE = REPO / "docker-compose.yml"
EMBEDDED = REPO / "docker-compose.embedded.yml"  # the beat inside every worker
BROKER_DB = 11  # the session Redis is shared: the three queue libraries get a database of their own
LIBRARIES = {
    "celery": ("celery.heartbeat", "celery.sync_rates", "celery.rebuild_search"),
    "rq": ("rq.heartbeat", "rq.sync_stock", "rq.compact"),
    "dramatiq": ("dramatiq.heartbeat", "dramatiq.sync_users", "dramatiq.reindex"),
}


def load_compose(*overrides: Path) -> dict[str, Any]:
    """The compose file, with ``overrides`` merged in as ``docker compose -f ... -f ...``
    merges them: a service's ``command`` replaced, its ``environment`` and ``deploy`` merged
    key by key."""
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    for path in overrides:
        for name, changes in yaml.safe_load(path.read_text())["services"].items():
            service = loaded["services"][name]
            for key, value in changes.items():
                if isinstance(value, dict):
                    service[key] = {**service.get(key, {}), **value}
                else:
                    service[key] = value
    return loaded


def seconds(value: str) -> float:
    return parse_duration(value, option="compose").total_seconds()


def test_the_compose_file_says_what_production_needs() -> None:
    """Three beat replicas that drain before they are killed, workers for the three libraries,
    healthchecks, and every app service pointed at the same store."""
    services = load_compose()["services"]
    assert set(services) == {
        "redis",
        "postgres",
        "beat",
        "celery-worker",
        "rq-worker",
        "dramatiq-worker",
    }
    beat = services["beat"]
    assert beat["deploy"]["replicas"] == 3
    shutdown = seconds(beat["environment"]["CRON_BRIDGE_SHUTDOWN_TIMEOUT"])
    assert seconds(beat["stop_grace_period"]) > shutdown
    for name in ("redis", "postgres", "beat"):
        assert services[name]["healthcheck"]["test"], name
    assert "--with-scheduler" in services["rq-worker"]["command"]
    for name in ("beat", "celery-worker", "rq-worker", "dramatiq-worker"):
        service = services[name]
        assert service["environment"]["CRON_BRIDGE_STORE"].startswith("postgresql://cron:")
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        assert seconds(service["stop_grace_period"]) > shutdown, name
    if compose_client():
        checked = subprocess.run(
            ["docker", "compose", "-f", str(COMPOSE), "config", "--quiet"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert checked.returncode == 0, checked.stderr


def compose_client() -> bool:
    """Whether ``docker compose`` is here to validate the file too (it needs no engine)."""
    if shutil.which("docker") is None:
        return False
    found = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
    return found.returncode == 0


class ComposeService(Service):
    """One compose service (one replica of it) as a local process."""

    def __init__(
        self, name: str, folder: Path, env: dict[str, str], argv: list[str], grace: float
    ) -> None:
        super().__init__(name, folder, env)
        self._argv = argv
        self.grace = grace  # its stop_grace_period: compose SIGKILLs it then

    def argv(self) -> list[str]:
        return self._argv


# What the operator puts in the environment (or .env) before `docker compose up`.
OPERATOR_ENV = {"CRON_BRIDGE_SECRET": secrets.token_urlsafe(32)}
_REQUIRED = re.compile(r"\$\{(\w+):\?[^}]*\}")


def localise(text: str, broker: str, store: str, http: str) -> str:
    """The compose network's names, as this machine reaches them; required variables filled
    in from the operator's environment, as docker compose does."""
    text = _REQUIRED.sub(lambda match: OPERATOR_ENV[match.group(1)], text)
    if text.startswith("postgresql://") and "@postgres:" in text:
        return store
    for inside in ("0.0.0.0:8080", "127.0.0.1:8080"):  # the beat's port, bound and probed
        text = text.replace(inside, http)
    return text.replace("redis://redis:6379/0", broker)


def twin(
    compose: dict[str, Any], name: str, replica: int, folder: Path, broker: str, store: str
) -> tuple[ComposeService, str]:
    """The service ``name`` (its ``replica``-th copy) with its command and environment."""
    service = compose["services"][name]
    http = f"127.0.0.1:{free_port()}"
    env = {key: value for key, value in _base_env().items() if not key.startswith("CB_TEST_")}
    env.update(
        {k: localise(str(v), broker, store, http) for k, v in service["environment"].items()}
    )
    env["HOSTNAME"] = f"{name}-{replica}"  # a container's host name
    env["PYTHONFAULTHANDLER"] = "1"  # a process stuck at the end shows where (Service.stuck)
    command = [localise(part, broker, store, http) for part in service["command"]]
    command[0] = str(Path(sys.executable).parent / command[0])  # the image's PATH is our venv
    grace = seconds(service["stop_grace_period"])
    return ComposeService(f"{name}-{replica}", folder, env, command, grace), http


def _base_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("CRON_BRIDGE_STORE", None)
    env["PYTHONPATH"] = str(REPO)  # the image's WORKDIR holds examples/
    env["PYTHONUNBUFFERED"] = "1"
    return env


def occurrence_times(every: float, start: float, end: float) -> list[datetime]:
    first = math.ceil(start / every) * every
    return [datetime.fromtimestamp(t, UTC) for t in range(int(first), int(end) + 1, int(every))]


def test_the_embedded_form_moves_the_beat_into_every_worker() -> None:
    """docker-compose.embedded.yml: no beat service, and each worker carries one, the way
    each queue's docs say (never celery worker -S, which is the state file)."""
    services = load_compose(EMBEDDED)["services"]
    assert services["beat"]["deploy"]["replicas"] == 0
    celery = services["celery-worker"]["command"]
    assert celery[-3:] == ["--beat", "--scheduler", "cron_bridge"] and "-S" not in celery
    assert services["rq-worker"]["command"][2:4] == ["-w", "cron_bridge_rq.BeatWorker"]
    assert "cron_bridge_dramatiq.beat:run_beat" in services["dramatiq-worker"]["command"]
    for name in ("celery-worker", "rq-worker", "dramatiq-worker"):
        service = services[name]
        shutdown = seconds(service["environment"]["CRON_BRIDGE_SHUTDOWN_TIMEOUT"])
        assert seconds(service["stop_grace_period"]) > shutdown, name
        assert service["environment"]["CRON_BRIDGE_STORE"].startswith("postgresql://cron:")


@pytest.mark.parametrize("form", ["beat service", "embedded"])
def test_the_compose_services_run_as_local_processes(
    request: pytest.FixtureRequest, tmp_path: Path, redis_server: RedisServer, form: str
) -> None:
    """The three workers and the beats, started as the compose file says (3 beat replicas;
    or, with docker-compose.embedded.yml, a beat in each worker: 4 replicas), for about 20 s:
    every heartbeat occurrence completes once on its worker, the failing-first jobs complete
    on their second attempt through the queue's retries, the slow jobs skip the occurrences
    that come while they run, and the beats' health check passes."""
    embedded = form == "embedded"
    compose = load_compose(EMBEDDED) if embedded else load_compose()
    kit = make_kit("postgres", request, tmp_path)
    broker = f"redis://127.0.0.1:{redis_server.port}/{BROKER_DB}"
    redis.Redis.from_url(broker).flushdb()
    services: list[ComposeService] = []
    health: list[tuple[list[str], str]] = []
    for replica in range(1, compose["services"]["beat"]["deploy"]["replicas"] + 1):
        service, http = twin(compose, "beat", replica, tmp_path, broker, kit.url)
        services.append(service)
        probe = compose["services"]["beat"]["healthcheck"]["test"][1:]
        health.append(([localise(part, broker, kit.url, http) for part in probe], http))
    replicas = len(services)
    for name in ("celery-worker", "rq-worker", "dramatiq-worker"):
        copies = compose["services"][name].get("deploy", {}).get("replicas", 1)
        for replica in range(1, copies + 1):
            worker, http = twin(compose, name, replica, tmp_path, broker, kit.url)
            services.append(worker)
            if embedded:  # every worker carries a beat; the Celery one serves its health
                replicas += 1
                if "CRON_BRIDGE_HTTP" in compose["services"][name]["environment"]:
                    probe = compose["services"]["beat"]["healthcheck"]["test"][1:]
                    health.append(([localise(p, broker, kit.url, http) for p in probe], http))
    assert replicas == (4 if embedded else 3)
    store = store_from_url(kit.url)
    try:
        for service in services:
            service.start()
        wait_for(lambda: len(store.replicas()) == replicas, 90, f"{replicas} live replicas")
        ready = {
            "celery-worker": "ready.",
            "rq-worker": "Listening on",
            "dramatiq-worker": "Worker process is ready",
        }
        for service in services:
            said = ready.get(service.name.rsplit("-", 1)[0])
            if said is not None:
                wait_for(lambda s=service, t=said: t in s.output(), 60, f"{service.name}")
        began = time.time()
        for argv, http in health:
            argv[0] = sys.executable
            probed = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
            assert probed.returncode == 0, (http, probed.stderr)
        time.sleep(20)
        ended = time.time()
        window = occurrence_times(5, began + 1, ended - 1)
        retried = occurrence_times(10, began + 1, ended - 5)
        assert len(window) >= 3 and retried

        def settled() -> bool:
            jobs = [job for heartbeat, flaky, _ in LIBRARIES.values() for job in (heartbeat, flaky)]
            found = outcomes_by_occurrence(store, jobs)
            return all(
                found.get(Occurrence(job=heartbeat, scheduled_at=at).id, Counter())["completed"]
                for heartbeat, _, _ in LIBRARIES.values()
                for at in window
            ) and all(
                found.get(Occurrence(job=flaky, scheduled_at=at).id, Counter())["completed"]
                for _, flaky, _ in LIBRARIES.values()
                for at in retried
            )

        wait_for(settled, 45, "the heartbeat and retried occurrences to complete")
        graces = {service.name: service.grace for service in services}
        took = stop_together(services, lambda service: graces[service.name])
        killed = sorted(name for name, seconds in took.items() if seconds is None)
        request.node.user_properties.append(("compose twin: killed in rq's teardown", killed))
    finally:
        for service in services:
            service.ensure_stopped()
    logs = "\n".join(f"--- {s.name}\n{s.output()[-3000:]}" for s in services)
    for library, (heartbeat, flaky, slow) in LIBRARIES.items():
        outcomes = outcomes_by_occurrence(store, [heartbeat, flaky, slow])
        assert all(c["completed"] <= 1 for c in outcomes.values()), (library, outcomes)
        for at in window:
            found = outcomes[Occurrence(job=heartbeat, scheduled_at=at).id]
            if embedded:  # each worker's beat declares what its app holds: 2 or 3 stood aside
                assert found["completed"] == found["enqueued"] == 1, (library, at, found, logs)
                assert set(found) == {"completed", "enqueued", "skipped-claimed"}, (at, found)
            else:
                expected = Counter({"completed": 1, "enqueued": 1, "skipped-claimed": 2})
                assert found == expected, (library, at, found, logs)
        runs: dict[str, list[RunRecord]] = {}
        for record in records_of(store, [flaky]):
            runs.setdefault(record.occurrence_id, []).append(record)
        for at in retried:
            attempts = sorted(
                (r.attempt, r.outcome, r.trigger)
                for r in runs.get(Occurrence(job=flaky, scheduled_at=at).id, [])
                if r.outcome in ("failed", "completed")
            )
            assert attempts == [(1, "failed", "queue"), (2, "completed", "queue")], (
                library,
                at,
                attempts,
                logs,
            )
        slow_outcomes = Counter(r.outcome for r in records_of(store, [slow]))
        assert slow_outcomes["skipped-overlap"] >= 1, (library, slow_outcomes, logs)
        assert slow_outcomes["completed"] >= 1, (library, slow_outcomes, logs)
    request.node.user_properties.append(
        ("compose twin: heartbeat occurrences checked per library", len(window))
    )
    store.close()
