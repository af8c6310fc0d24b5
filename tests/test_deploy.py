"""The Kubernetes manifests under deploy/k8s: what they promise, checked against the examples
and the compose file, and the CronJob's command run twice for real."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from cron_bridge.schedules import parse_duration
from tests.e2e.processes import REPO, cli, command_env

K8S = REPO / "deploy" / "k8s"


def manifests() -> dict[tuple[str, str], dict[str, Any]]:
    """Every object of the kustomization, by (kind, name)."""
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    found = {}
    for resource in kustomization["resources"]:
        for doc in yaml.safe_load_all((K8S / resource).read_text()):
            found[doc["kind"], doc["metadata"]["name"]] = doc
    return found


def container(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj["spec"]
    pod = spec["jobTemplate"]["spec"]["template"] if obj["kind"] == "CronJob" else spec["template"]
    (only,) = pod["spec"]["containers"]
    return dict(only)


def compose_command(service: str) -> list[str]:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    return list(compose["services"][service]["command"])


def test_three_beats_that_drain_before_they_are_killed() -> None:
    """3 replicas, replica id from the pod name, a grace period above shutdown_timeout, the
    compose beat's apps, and a liveness probe on the health endpoint."""
    objects = manifests()
    beat = objects["Deployment", "cron-bridge-beat"]
    config = objects["ConfigMap", "cron-bridge"]["data"]
    assert beat["spec"]["replicas"] == 3
    main = container(beat)
    (replica_id,) = [e for e in main["env"] if e["name"] == "CRON_BRIDGE_REPLICA_ID"]
    assert replica_id["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    shutdown = parse_duration(config["CRON_BRIDGE_SHUTDOWN_TIMEOUT"], option="shutdown")
    assert beat["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > (
        shutdown.total_seconds()
    )
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert (
        config["CRON_BRIDGE_APP"] == compose["services"]["beat"]["environment"]["CRON_BRIDGE_APP"]
    )
    assert main["command"] == compose_command("beat")
    assert main["livenessProbe"]["httpGet"]["path"] == "/_scheduler/healthz"
    assert main["command"][:2] == ["cron-bridge", "beat"]
    assert {"configMapRef": {"name": "cron-bridge"}} in main["envFrom"]
    assert {"secretRef": {"name": "cron-bridge"}} in main["envFrom"]
    # The compose file makes the operator supply the secret; no placeholder ships anywhere.
    assert compose["services"]["beat"]["environment"]["CRON_BRIDGE_SECRET"].startswith(
        "${CRON_BRIDGE_SECRET:?"
    )
    for path in [
        REPO / "docker-compose.yml",
        REPO / "docker-compose.embedded.yml",
        *K8S.glob("*.yaml"),
    ]:
        assert "change-me" not in path.read_text(), path
    # No Secret is shipped (no placeholder can reach a cluster): the docs say how to make it.
    assert not [kind for kind, _ in objects if kind == "Secret"]
    assert "create secret generic cron-bridge" in (REPO / "docs" / "deploy.md").read_text()
    if shutil.which("kubectl"):  # where it is installed, kustomize must build them too
        built = subprocess.run(
            ["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, check=False
        )
        assert built.returncode == 0, built.stderr
        assert len(list(yaml.safe_load_all(built.stdout))) == len(objects)


def test_the_workers_run_what_the_compose_file_runs() -> None:
    objects = manifests()
    for name in ("celery-worker", "rq-worker", "dramatiq-worker"):
        worker = objects["Deployment", name]
        assert container(worker)["command"] == compose_command(name), name
        grace = worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace > 25, name


@pytest.mark.extras  # the manifests' app is examples/celery_app.py
def test_the_cronjob_runs_an_on_demand_job_once_however_often_it_fires(tmp_path: Path) -> None:
    """The CronJob's own command, run twice for the same time: enqueued, then skipped-claimed,
    both exit 0; the job it names is declared on_demand=True."""
    objects = manifests()
    cronjob = objects["CronJob", "monthly-export"]
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    command = container(cronjob)["command"]
    assert command[:2] == ["cron-bridge", "run"]
    config = objects["ConfigMap", "cron-bridge"]["data"]
    env = command_env(
        CRON_BRIDGE_APP=config["CRON_BRIDGE_APP"],
        CRON_BRIDGE_STORE=f"sqlite:///{tmp_path / 'store.db'}",
        CELERY_BROKER_URL="memory://",  # the message itself is not what is checked
    )
    env["PYTHONPATH"] = f"{REPO}"
    listed = cli("list", "--json", env=env, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    (job,) = [row for row in json.loads(listed.stdout) if row["name"] == command[2]]
    assert job["next"] is None, "a CronJob should run an on_demand=True job"
    outcomes = []
    for _ in range(2):
        done = cli(*command[1:], env=env, cwd=tmp_path)
        assert done.returncode == 0, shlex.join(command) + "\n" + done.stderr
        outcomes.append(json.loads(done.stdout)["outcome"])
    assert outcomes == ["enqueued", "skipped-claimed"]
