"""Pause and resume with real processes: three beats on Redis and on Postgres, the CLI, and
the JSON API over a real socket."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cron_bridge.control import lost_claims
from cron_bridge.jobs import Occurrence
from tests.apps import journal
from tests.conftest import make_kit
from tests.e2e.processes import BeatProcess, cli, command_env
from tests.e2e.test_http import SECRET, call
from tests.servers import free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.slow


def _scheduled(line: dict[str, Any]) -> datetime:
    return Occurrence.parse(line["occurrence_id"]).scheduled_at


@pytest.mark.parametrize("kind", ["redis", "postgres"])
def test_pause_stops_every_replica_within_two_seconds_and_resume_restarts(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    kit = make_kit(kind, request, tmp_path)
    path = tmp_path / "journal.jsonl"
    env = command_env(path, CB_TEST_JOBS="2")
    beats = [
        BeatProcess(f"b{i}", tmp_path, env, app="tests.apps.many", store_url=kit.url)
        for i in range(3)
    ]
    store = kit.open()
    try:
        for beat in beats:
            beat.start()
        wait_for(
            lambda: any(line["job"] == "tick.00" for line in journal.read(path)),
            30,
            "tick.00 running",
        )
        done = cli(
            "pause",
            "tick.00",
            "--reason",
            "incident 42",
            "--store",
            kit.url,
            "-A",
            "tests.apps.many",
            env=env,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        paused_at = datetime.now(UTC)
        assert json.loads(done.stdout)["paused"]["reason"] == "incident 42"
        listed = json.loads(
            cli(
                "list", "-A", "tests.apps.many", "--json", "--store", kit.url, env=env, cwd=tmp_path
            ).stdout
        )
        assert {row["name"]: bool(row["paused"]) for row in listed} == {
            "tick.00": True,
            "tick.01": False,
        }
        time.sleep(5)
        resuming_at = datetime.now(UTC)  # what was due until now was held back
        done = cli(
            "resume",
            "tick.00",
            "--catch-up",
            "-A",
            "tests.apps.many",
            "--store",
            kit.url,
            env=env,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        resumed_at = datetime.now(UTC)
        caught_up = json.loads(done.stdout)["caught_up"]
        assert (caught_up["outcome"], caught_up["trigger"]) == ("completed", "misfire")
        done = cli(
            "history", "tick.00", "--changes", "--json", "--store", kit.url, env=env, cwd=tmp_path
        )
        changes = [(c["action"], c["reason"], c["by"][:4]) for c in json.loads(done.stdout)]
        assert changes == [("resumed", "incident 42", "cli:"), ("paused", "incident 42", "cli:")]
        wait_for(
            lambda: any(
                line["job"] == "tick.00" and _scheduled(line) > resumed_at
                for line in journal.read(path)
            ),
            10,
            "tick.00 after resume",
        )
        for beat in beats:
            beat.terminate()
        ran = [line for line in journal.read(path) if line["job"] == "tick.00"]
        caught = [line for line in ran if line["trigger"] == "misfire"]
        assert [line["occurrence_id"] for line in caught] == [caught_up["occurrence_id"]]
        held = [
            line
            for line in ran
            if line["trigger"] == "schedule"
            if paused_at + timedelta(seconds=2) < _scheduled(line) <= resuming_at
        ]
        assert held == [], f"ran while paused: {held}"
        other = [
            line
            for line in journal.read(path)
            if line["job"] == "tick.01"
            if paused_at < _scheduled(line) <= resumed_at
        ]
        assert len(other) >= 4, "the other job kept running"
        by_occurrence: dict[str, Counter[str]] = {}
        for record in lost_claims.history(store, "tick.00", 1000):
            by_occurrence.setdefault(record.occurrence_id, Counter())[record.outcome] += 1
        paused = {o: c for o, c in by_occurrence.items() if c["skipped-paused"]}
        assert len(paused) >= 4
        # The latest held back when the catch-up looked runs once more. An occurrence that
        # came due while the catch-up itself ran (after `resume` was launched) is held back
        # too, as it would have overlapped it.
        when = {o: Occurrence.parse(o).scheduled_at for o in paused}
        caught_at = when[caught_up["occurrence_id"]]
        assert caught_at >= max(at for at in when.values() if at <= resuming_at)
        assert all(at > resuming_at for at in when.values() if at > caught_at), when
        paused[caught_up["occurrence_id"]]["completed"] -= 1
        for counts in paused.values():  # once, by the claim's winner; the others stood aside
            assert +counts == Counter({"skipped-paused": 1, "skipped-claimed": 2})
    finally:
        for beat in beats:
            beat.ensure_stopped()
        kit.close()


def test_the_json_api_pauses_and_resumes_behind_the_secret(tmp_path: Path) -> None:
    beat, base = _served_beat(tmp_path)
    api = f"{base}/api/jobs"
    try:
        assert call(f"{api}/reports.minutely/pause", None)[0] == 401
        assert call(f"{api}/reports.minutely/pause", "wrong")[0] == 401
        assert call(f"{api}/nope/pause", SECRET)[0] == 404
        assert call(f"{api}/reports.minutely/stop", SECRET)[0] == 404
        status, body = call(f"{api}/reports.minutely/pause", SECRET, body={"reason": 7})
        assert (status, "reason" in body["error"]) == (400, True), body
        status, body = call(f"{api}/reports.minutely/pause", SECRET, body={"reason": "db"})
        assert status == 200, body
        assert body["paused"]["reason"] == "db"
        assert body["paused"]["by"] == "http:127.0.0.1"
        status, body = call(f"{api}/reports.minutely", SECRET, method="GET")
        assert (status, body["paused"]["reason"]) == (200, "db")
        assert call(f"{api}/reports.minutely/pause", SECRET, method="GET")[0] == 405
        status, body = call(f"{api}/reports.minutely/resume", SECRET, body={"catch_up": True})
        assert (status, body["was_paused"]["reason"]) == (200, "db")
        assert body["caught_up"] is None  # hourly: nothing came due while paused
        status, body = call(f"{api}/reports.minutely", SECRET, method="GET")
        assert (status, body["paused"]) == (200, None)
        beat.terminate()
    finally:
        beat.ensure_stopped()


def test_the_json_api_manages_stored_schedules_behind_the_secret(tmp_path: Path) -> None:
    beat, base = _served_beat(tmp_path)
    api = f"{base}/api/schedules"
    spec = {
        "name": "tenant-7.report",
        "library": "rq",
        "task": "proj.reports.report",
        "every": "1h",
        "kwargs": {"tenant": 7},
        "queue": "reports",
    }
    try:
        assert call(api, None, method="GET")[0] == 401
        assert call(api, "wrong", body=spec)[0] == 401
        status, body = call(api, SECRET, body=spec)
        assert status == 201, body
        assert body["schedule"]["options"] == {"every": "1h"}
        assert call(api, SECRET, body=spec)[0] == 400  # exists
        status, body = call(api, SECRET, body={**spec, "name": "bad", "every": "often"})
        assert (status, "every" in body["error"]) == (400, True), body
        status, body = call(api, SECRET, body={**spec, "name": "odd", "colour": "blue"})
        assert status == 400, body
        status, body = call(
            f"{api}/tenant-7.report",
            SECRET,
            method="PATCH",
            body={"cron": "0 6 * * *", "tz": "Europe/Warsaw"},
        )
        assert status == 200, body
        assert body["schedule"]["options"] == {"cron": "0 6 * * *", "tz": "Europe/Warsaw"}
        status, body = call(
            f"{api}/tenant-7.report", SECRET, method="PATCH", body={"cron": "99 * * * *"}
        )
        assert status == 400, body
        status, body = call(api, SECRET, method="GET")
        assert [s["name"] for s in body["schedules"]] == ["tenant-7.report"]
        assert body["schedules"][0]["options"]["cron"] == "0 6 * * *"  # the bad PATCH wrote nothing
        assert call(f"{api}/nope", SECRET, method="GET")[0] == 404
        assert call(f"{api}/tenant-7.report", SECRET, method="PUT", body={})[0] == 405
        status, body = call(f"{api}/tenant-7.report", SECRET, method="DELETE")
        assert (status, body["removed"]["task"]) == (200, "proj.reports.report")
        assert call(api, SECRET, method="GET")[1] == {"schedules": []}
        beat.terminate()
    finally:
        beat.ensure_stopped()


def test_the_bulk_routes_take_megabytes_over_a_real_socket_only_with_the_secret(
    tmp_path: Path,
) -> None:
    """``:add-many`` and ``:remove-many`` with 10,000 tenants (some 2 MB of JSON lines) through
    ``cron-bridge beat --http``; a length past 16 KiB without the secret, or past 16 MiB with
    it, answered at once, before any of the body is sent."""
    beat, base = _served_beat(tmp_path)
    port = int(base.split(":")[2].split("/")[0])
    api = "/_scheduler/api/schedules"
    tenants = [
        {
            "name": f"tenant-{n}.report",
            "library": "rq",
            "task": "proj.reports.report",
            "cron": f"{n % 60} 3 * * *",
            "tz": "Europe/Warsaw",
            "kwargs": {"tenant": n, "plan": "pro" * 20},
        }
        for n in range(10_000)
    ]
    body = "".join(json.dumps(t) + "\n" for t in tenants).encode()
    assert len(body) > 2_000_000

    def post(path: str, data: bytes, token: str | None) -> tuple[int, dict[str, Any]]:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {"Content-Type": "application/x-ndjson"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        connection.request("POST", path, body=data, headers=headers)
        response = connection.getresponse()
        answer = json.loads(response.read())
        connection.close()
        return response.status, answer

    def first_line(path: str, length: int, token: str | None) -> str:
        """The status line answered to headers that promise ``length`` bytes, none sent."""
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        try:
            sock.sendall(
                f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\n"
                f"{auth}Content-Length: {length}\r\n\r\n".encode()
            )
            return sock.recv(4096).decode(errors="replace").split("\r\n")[0]
        finally:
            sock.close()

    try:
        assert post(f"{api}:add-many", body, SECRET) == (200, {"added": 10_000})
        assert first_line(f"{api}:add-many", len(body), None).startswith("HTTP/1.1 401 ")
        assert first_line(f"{api}:add-many", len(body), "wrong").startswith("HTTP/1.1 401 ")
        assert first_line(f"{api}:add-many", 16 * 1024 * 1024 + 1, SECRET).startswith(
            "HTTP/1.1 413 "
        )
        assert first_line(api, len(body), SECRET).startswith("HTTP/1.1 413 ")
        status, answer = post(f"{api}:remove-many", body, SECRET)
        assert (status, answer) == (200, {"removed": 10_000, "missing": []})
        assert call(f"{base}/api/schedules", SECRET, method="GET")[1] == {"schedules": []}
        beat.terminate()
    finally:
        beat.ensure_stopped()


def _served_beat(tmp_path: Path) -> tuple[BeatProcess, str]:
    """A beat of tests.apps.cli_app serving HTTP with the test secret; its base URL."""
    port = free_port()
    # The stored schedules these tests add name proj.reports tasks, which no module here has.
    env = command_env(CRON_BRIDGE_STORED_TASKS="proj.reports.*")
    beat = BeatProcess(
        "api",
        tmp_path,
        env,
        app="tests.apps.cli_app",
        store_url=f"sqlite:///{tmp_path}/s.db",
        extra=["--http", f"127.0.0.1:{port}", "--secret", SECRET],
    ).start()
    try:
        wait_for(lambda: "HTTP trigger on" in beat.output(), 30, "the HTTP server")
    except AssertionError:
        beat.ensure_stopped()
        raise
    return beat, f"http://127.0.0.1:{port}/_scheduler"
