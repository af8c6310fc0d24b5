"""The ``cron-bridge`` command as a user runs it: output, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from cron_bridge.control import pause as control
from cron_bridge.stores import RunRecord, store_from_url
from tests.e2e.processes import BeatProcess, cli, command_env
from tests.servers import free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

APP = "tests.apps.cli_app"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return command_env(tmp_path / "journal.jsonl", CRON_BRIDGE_STORE=f"sqlite:///{tmp_path}/s.db")


def ran_until(beat: BeatProcess, says: str, what: str, *, then: float = 0.0) -> BeatProcess:
    """Start ``beat``, wait until its output says ``says`` (``what`` it is waiting for), let it
    run ``then`` seconds more, and stop it: it stops within 30 s, and is stopped whatever
    happens."""
    beat.start()
    try:
        wait_for(lambda: says in beat.output(), 30, what)
        time.sleep(then)
        assert beat.terminate() < 30
    finally:
        beat.ensure_stopped()
    return beat


def test_list_prints_the_documented_columns(tmp_path: Path, env: dict[str, str]) -> None:
    """NAME SCHEDULE TIMEZONE SCOPE TARGET NEXT LAST, one row per job; --json too."""
    done = cli("list", "-A", APP, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert header.split() == ["NAME", "SCHEDULE", "TIMEZONE", "SCOPE", "TARGET", "NEXT", "LAST"]
    assert [row.split()[0] for row in rows] == ["billing.broken", "cache.warm", "reports.minutely"]
    assert "Europe/Warsaw" in rows[0]
    assert "on-demand" in rows[2]
    as_json = json.loads(cli("list", "-A", APP, "--json", env=env, cwd=tmp_path).stdout)
    assert {row["name"]: row["timezone"] for row in as_json}["billing.broken"] == "Europe/Warsaw"


def test_list_shows_a_beat_schedule_and_the_stored_schedules_beside_declared_jobs(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A Celery app's beat_schedule entries, as ``-S cron_bridge`` runs them, and the stored
    schedules of the store (one named like a job in code is the code's, listed once)."""
    env = {**env, "CRON_BRIDGE_STORED_TASKS": "proj.*"}
    for name in ("tenant-1.report", "cache.warm"):
        done = cli(
            "schedule",
            "add",
            name,
            "--library",
            "rq",
            "--task",
            "proj.reports.report",
            "--cron",
            "0 6 * * *",
            "--tz",
            "Europe/Warsaw",
            env=env,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
    done = cli(
        "list", "-A", "tests.apps.celery_beat_app", "-A", APP, "--json", env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert {n for n, r in rows.items() if r["source"] == "beat_schedule"} == {
        "every-minute-ee043e",
        "every-second-f9497f",
        "every-two-seconds-33a0f5",
    }
    assert rows["every-minute-ee043e"]["timezone"] == "Europe/Warsaw"
    assert rows["every-minute-ee043e"]["schedule"] == "* * * * *"
    assert rows["cache.warm"]["source"] == "code"  # the code's job, not the stored one
    stored = rows["tenant-1.report"]
    assert (stored["source"], stored["target"], stored["timezone"]) == (
        "stored",
        "stored:rq:default",
        "Europe/Warsaw",
    )
    # In the job's zone, with its offset: 06:00 in Warsaw in December, 05:00 UTC.
    assert stored["next"].endswith("T06:00:00+01:00")
    assert datetime.fromisoformat(stored["next"]).astimezone(UTC).hour == 5
    # Without the module that declares cache.warm, its stored schedule is what a beat runs.
    table = cli("list", "-A", "tests.apps.celery_beat_app", env=env, cwd=tmp_path).stdout
    expected = [
        ("cache.warm", "stored:rq:default"),
        ("every-minute-ee043e", "celery-beat-schedule:default"),
        ("every-second-f9497f", "celery-beat-schedule:default"),
        ("every-two-seconds-33a0f5", "celery-beat-schedule:default"),
        ("tenant-1.report", "stored:rq:default"),
    ]
    rows_shown = table.splitlines()[1:]
    assert len(rows_shown) == len(expected), table
    for row, (name, target) in zip(rows_shown, expected, strict=True):
        assert row.split()[0] == name and f" {target} " in row, row


def test_several_apps_come_from_repeated_options_or_the_environment(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """-A twice loads the jobs of both modules; so does CRON_BRIDGE_APP with two names."""
    both = ["examples.rq_app", "examples.dramatiq_app"]
    done = cli("list", "-A", both[0], "-A", both[1], "--json", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    names = {row["name"] for row in json.loads(done.stdout)}
    assert {"rq.heartbeat", "dramatiq.heartbeat"} <= names
    from_env = cli("list", "--json", env={**env, "CRON_BRIDGE_APP": " ".join(both)}, cwd=tmp_path)
    assert from_env.returncode == 0, from_env.stderr
    assert {row["name"] for row in json.loads(from_env.stdout)} == names


def test_run_claims_the_scheduled_occurrence_once(tmp_path: Path, env: dict[str, str]) -> None:
    """Two runs of a ``* * * * *`` job in one minute: completed, then skipped-claimed; both 0.
    ``--force`` runs a fresh occurrence; ``list`` then shows the last run."""
    if datetime.now(UTC).second > 50:  # both runs must fall in the same minute
        time.sleep(61 - datetime.now(UTC).second)
    first = cli("run", "reports.minutely", "-A", APP, env=env, cwd=tmp_path)
    second = cli("run", "reports.minutely", "-A", APP, env=env, cwd=tmp_path)
    assert (first.returncode, second.returncode) == (0, 0), (first.stderr, second.stderr)
    one, two = json.loads(first.stdout), json.loads(second.stdout)
    assert (one["outcome"], two["outcome"]) == ("completed", "skipped-claimed")
    assert one["occurrence_id"] == two["occurrence_id"]
    assert one["occurrence_id"].endswith(":00.000Z")
    assert {"name", "occurrence_id", "outcome", "duration_ms"} <= one.keys()
    forced = cli("run", "reports.minutely", "-A", APP, "--force", env=env, cwd=tmp_path)
    assert forced.returncode == 0
    again = json.loads(forced.stdout)
    assert again["outcome"] == "completed"
    assert again["occurrence_id"] != one["occurrence_id"]
    listed = cli("list", "-A", APP, env=env, cwd=tmp_path).stdout
    assert "completed" in next(line for line in listed.splitlines() if "reports.minutely" in line)
    history = cli("history", "reports.minutely", "--json", env=env, cwd=tmp_path)
    outcomes = [r["outcome"] for r in json.loads(history.stdout)]
    assert outcomes == ["completed", "skipped-claimed", "completed"]


def test_a_failing_job_exits_1(tmp_path: Path, env: dict[str, str]) -> None:
    """The run's error is in the JSON, and the exit code is 1."""
    done = cli("run", "billing.broken", "-A", APP, env=env, cwd=tmp_path)
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert result["outcome"] == "failed"
    assert "the ledger is locked" in result["error"]


def test_list_pages_and_streams_by_name_and_history_pages_newest_first(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """1,200 stored schedules beside the module's jobs: every page is the same slice of the
    whole list (which is read and printed 500 at a time), with its pauses and latest runs;
    ``history --offset`` pages the records newest first."""
    store = store_from_url(env["CRON_BRIDGE_STORE"])
    names = [f"tenant-{n:04d}.report" for n in range(1_200)]
    spec = {"library": "rq", "task": "proj.reports.report", "options": {"every": "1h"}}
    store.put_controls(
        "schedule", {name: json.dumps({"name": name, **spec, "kwargs": {}}) for name in names}
    )
    control.pause(store, "tenant-0603.report", reason="unpaid", by="billing")
    for n in range(30):
        at = datetime(2026, 12, 1, 9, n, tzinfo=UTC)
        store.record(
            RunRecord(
                job="tenant-0602.report",
                occurrence_id=f"tenant-0602.report@{at.isoformat()[:19]}.000Z",
                outcome="completed",
                trigger="schedule",
                replica="beat-a",
                started_at=at,
            )
        )
    store.close()
    env = {**env, "CRON_BRIDGE_STORED_TASKS": "proj.*"}

    def listed(*args: str) -> list[dict[str, object]]:
        done = cli("list", "-A", APP, "--json", *args, env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    everything = listed()
    assert [row["name"] for row in everything] == sorted(
        [*names, "billing.broken", "cache.warm", "reports.minutely"]
    )
    pages = [listed("--limit", "400", "--offset", str(k)) for k in range(0, 1_203, 400)]
    assert [row for page in pages for row in page] == everything
    page = listed("--limit", "3", "--offset", "604")
    assert [row["name"] for row in page] == [
        "tenant-0601.report",
        "tenant-0602.report",
        "tenant-0603.report",
    ]
    assert page[1]["last"]["occurrence_id"].endswith("T09:29:00.000Z")  # type: ignore[index]
    assert page[2]["paused"]["reason"] == "unpaid"  # type: ignore[index]
    assert page[0]["last"] is None and page[0]["paused"] is None
    table = cli("list", "-A", APP, env=env, cwd=tmp_path).stdout.splitlines()
    assert len(table) == 1 + 1_203 and table[0].split()[0] == "NAME"
    assert [line.split()[0] for line in table[1:]] == [row["name"] for row in everything]
    assert any(line.startswith("tenant-0603.report") and " paused " in line for line in table)

    def history(*args: str) -> list[str]:
        done = cli("history", "tenant-0602.report", "--json", *args, env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return [r["occurrence_id"][-13:-8] for r in json.loads(done.stdout)]

    # A run recorded late (a long one) and a record nobody can read: the pages are still
    # slices of one list, each record on one page.
    late = store_from_url(env["CRON_BRIDGE_STORE"])
    try:
        at = datetime(2026, 12, 1, 8, 59, tzinfo=UTC)
        late.record(
            RunRecord(
                job="tenant-0602.report",
                occurrence_id=f"tenant-0602.report@{at.isoformat()[:19]}.000Z",
                outcome="completed",
                trigger="schedule",
                replica="beat-b",
                started_at=at,
            )
        )
    finally:
        late.close()
    whole = history("-n", "100")
    assert len(whole) == 31 and sorted(whole) == sorted(set(whole))
    assert [t for k in range(0, 31, 4) for t in history("-n", "4", "--offset", str(k))] == whole
    assert history("-n", "3") == ["09:29", "09:28", "09:27"]
    assert history("--limit", "3", "--offset", "3") == ["09:26", "09:25", "09:24"]
    assert history("--offset", "28") == whole[28:]


def test_a_refused_declaration_is_listed_once_after_the_last_job_of_the_pages(
    tmp_path: Path, env: dict[str, str]
) -> None:
    app = "tests.apps.refused_app"

    def names(*args: str) -> list[str]:
        done = cli("list", "-A", app, "--json", *args, env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return [row["name"] for row in json.loads(done.stdout)]

    assert names() == ["a.one", "b.two", "nightly-cleanup"]
    assert names("--limit", "2") == ["a.one", "b.two"]
    assert names("--limit", "2", "--offset", "2") == ["nightly-cleanup"]
    assert names("--offset", "5") == []
    table = cli("list", "-A", app, "--limit", "2", env=env, cwd=tmp_path).stdout
    assert "Refused declarations" not in table
    table = cli("list", "-A", app, "--offset", "1", env=env, cwd=tmp_path).stdout
    assert "Refused declarations (1)" in table and "nightly-cleanup" in table


def test_schedule_add_many_adds_a_json_lines_file_or_nothing(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """``schedule add-many``: 6,000 tenants from a JSON lines file, in batches; a bad line,
    a refused task or a name already stored: one line, exit 2, and nothing of that batch."""
    env = {**env, "CRON_BRIDGE_STORED_TASKS": "proj.*"}
    tenants = tmp_path / "tenants.jsonl"
    tenants.write_text(
        "\n".join(
            json.dumps(
                {
                    "name": f"tenant-{n}.report",
                    "library": "rq",
                    "task": "proj.reports.report",
                    "cron": f"{n % 60} 3 * * *",
                    "tz": "Europe/Warsaw",
                    "kwargs": {"tenant": n},
                }
            )
            for n in range(6_000)
        )
        + "\n\n"
    )
    done = cli("schedule", "add-many", str(tenants), env=env, cwd=tmp_path)
    assert (done.returncode, done.stdout.strip()) == (0, '{"added": 6000}'), done.stderr
    store = store_from_url(env["CRON_BRIDGE_STORE"])
    try:
        stored = store.controls("schedule", most=10**6)
        assert len(stored) == 6_000
        assert json.loads(stored["tenant-5999.report"])["kwargs"] == {"tenant": 5999}
        [added] = control.changes(store, "tenant-42.report")
        assert added.action == "schedule added" and added.by.startswith("cli:")
    finally:
        store.close()
    for body, says in (
        ('{"name": "a.b", "library": "rq", "task": "proj.x", "every": "1h"}\n{oops\n', "line 2"),
        ('{"name": "a.b", "library": "rq", "task": "os.system", "every": "1h"}\n', "os.system"),
        (
            '{"name": "tenant-1.report", "library": "rq", "task": "proj.x", "every": "1h"}\n',
            "exist",
        ),
        ("[1, 2]\n", "expected a JSON object"),
    ):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(body)
        done = cli("schedule", "add-many", str(bad), env=env, cwd=tmp_path)
        assert done.returncode == 2 and says in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    done = cli("schedule", "list", "--json", env=env, cwd=tmp_path)
    assert len(json.loads(done.stdout)) == 6_000  # nothing more was written


def test_schedule_update_many_and_remove_many_read_json_lines_or_change_nothing(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """``schedule update-many`` and ``remove-many``: 6,000 tenants changed from a JSON lines
    file and 5,000 removed from standard input, in batches; a bad line, a schedule that is
    not stored, a refused task, two lines of one name, an unreachable store: one line
    naming the line, exit 2, and nothing changed."""
    env = {**env, "CRON_BRIDGE_STORED_TASKS": "proj.*"}

    def lines(name: str, entries: list[dict[str, object]]) -> str:
        path = tmp_path / name
        path.write_text("".join(json.dumps(entry) + "\n" for entry in entries) + "\n")
        return str(path)

    names = [f"tenant-{n}.report" for n in range(6_000)]
    tenants = [
        {"name": n, "library": "rq", "task": "proj.reports.report", "every": "1h"} for n in names
    ]
    done = cli("schedule", "add-many", lines("tenants.jsonl", tenants), env=env, cwd=tmp_path)
    assert (done.returncode, done.stdout.strip()) == (0, '{"added": 6000}'), done.stderr
    changes = [
        {"name": n, "cron": "0 6 * * *", "tz": "Europe/Warsaw", "every": None} for n in names
    ]
    done = cli("schedule", "update-many", lines("changes.jsonl", changes), env=env, cwd=tmp_path)
    assert (done.returncode, done.stdout.strip()) == (0, '{"updated": 6000}'), done.stderr

    def stored() -> list[dict[str, object]]:
        listed = cli("schedule", "list", "--json", env=env, cwd=tmp_path)
        return json.loads(listed.stdout)  # type: ignore[no-any-return]

    before = stored()
    assert len(before) == 6_000
    assert {str(s["options"]) for s in before} == {"{'cron': '0 6 * * *', 'tz': 'Europe/Warsaw'}"}
    good = {"name": "tenant-1.report", "queue": "q"}
    for command, entries, says in (
        ("update-many", [good, {"name": "tenant-x.report", "queue": "q"}], "line 2: job 'tenant-x"),
        ("update-many", [good, {"name": "tenant-2.report", "task": "os.system"}], "line 2: "),
        ("update-many", [good, {"name": "tenant-2.report", "cron": "99 * * * *"}], "option cron"),
        ("update-many", [good, good], "two entries of one name"),
        ("update-many", [good, "tenant-2.report"], "expected a JSON object"),
        ("remove-many", [{"name": "tenant-1.report"}, {"name": 7}], "line 2: "),
        ("remove-many", [{"name": "tenant-1.report"}, {"nmae": "x"}], "line 2: "),
    ):
        done = cli("schedule", command, lines("bad.jsonl", entries), env=env, cwd=tmp_path)  # type: ignore[arg-type]
        assert done.returncode == 2 and says in done.stderr, (says, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"name": "tenant-1.report", "queue": "q"}\n{oops\n')
    done = cli("schedule", "update-many", str(bad), env=env, cwd=tmp_path)
    assert done.returncode == 2 and "line 2" in done.stderr, done.stderr
    assert stored() == before  # nothing was written
    gone = "".join(json.dumps({"name": n}) + "\n" for n in [*names[:5_000], "nope"])
    done = cli("schedule", "remove-many", "-", env=env, cwd=tmp_path, stdin=gone)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"removed": 5_000, "missing": ["nope"]}
    assert [s["name"] for s in stored()] == sorted(names[5_000:])
    down = {**env, "CRON_BRIDGE_STORE": f"redis://127.0.0.1:{free_port()}/0"}
    for command in ("update-many", "remove-many"):
        done = cli("schedule", command, lines("one.jsonl", [good]), env=down, cwd=tmp_path)
        assert done.returncode == 2 and "redis" in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_history_shows_a_failures_traceback_and_times_in_utc_or_the_zone_asked(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """``history`` marks its times as UTC (``Z``) or shows them in ``--tz``'s zone with the
    offset; ``--occurrence`` prints the traceback of each failed attempt under the table."""
    assert cli("run", "billing.broken", "-A", APP, env=env, cwd=tmp_path).returncode == 1
    (record,) = json.loads(
        cli("history", "billing.broken", "-A", APP, "--json", env=env, cwd=tmp_path).stdout
    )
    started = datetime.fromisoformat(record["started_at"])
    assert started.utcoffset() == timedelta(0)  # JSON: ISO 8601 with its offset, UTC
    assert "raise RuntimeError" in record["traceback"]
    in_utc = cli("history", "billing.broken", "-A", APP, env=env, cwd=tmp_path).stdout
    assert started.strftime("%Y-%m-%dT%H:%M:%S.") in in_utc.splitlines()[1]
    assert in_utc.splitlines()[1].split()[5].endswith("Z")
    warsaw = started.astimezone(ZoneInfo("Europe/Warsaw"))
    in_warsaw = cli(
        "history", "billing.broken", "-A", APP, "--tz", "Europe/Warsaw", env=env, cwd=tmp_path
    ).stdout
    shown = in_warsaw.splitlines()[1].split()[5]
    assert shown.startswith(warsaw.strftime("%Y-%m-%dT%H:%M:%S."))
    assert shown.endswith(warsaw.strftime("%z")[:3] + ":00")
    one = cli(
        "history",
        "billing.broken",
        "-A",
        APP,
        "--occurrence",
        record["occurrence_id"],
        env=env,
        cwd=tmp_path,
    )
    assert one.returncode == 0, one.stderr
    lines = one.stdout.splitlines()
    assert f"attempt 1 on {record['replica']}, " in one.stdout
    assert lines[lines.index("Traceback (most recent call last):") + 1].strip().startswith("File")
    assert lines[-1] == "RuntimeError: the ledger is locked"
    wrong = cli(
        "history", "billing.broken", "-A", APP, "--tz", "Mars/Olympus", env=env, cwd=tmp_path
    )
    assert wrong.returncode == 2 and "unknown time zone" in wrong.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["run", "nope", "-A", APP], "no job called 'nope'"),
        (["run", "reports.minutely", "-A", "tests.apps.missing"], "cannot import"),
        (["run", "reports.minutely", "-A", APP, "--store", "mysql://db/x"], "unknown store scheme"),
        (["run", "reports.minutely", "-A", APP, "--store", "redis://127.0.0.1:1/0"], "127.0.0.1:1"),
        (["list", "-A", APP, "--store", "postgresql://127.0.0.1:1/db"], "127.0.0.1:1"),
        (["beat", "-A", APP, "--http", "127.0.0.1:0"], "without a secret"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    tmp_path: Path, env: dict[str, str], args: list[str], says: str
) -> None:
    """Unknown job, bad module, bad or unreachable store, missing secret: exit 2, one line."""
    done = cli(*args, env=env, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert says in lines[0]
    assert "Traceback" not in done.stderr


def test_a_bad_declaration_fails_at_import_with_one_line(tmp_path: Path) -> None:
    """A ConfigError while importing the app names the job and option, without a traceback."""
    module = tmp_path / "badapp.py"
    module.write_text(
        "from cron_bridge import cluster_task\n"
        "@cluster_task(cron='0 0 30 2 *', name='never', target='inline')\n"
        "def never(ctx): pass\n"
    )
    done = cli("list", "-A", "badapp", env=command_env(), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "cron-bridge: job 'never', option cron='0 0 30 2 *': never fires"
    )


def test_the_memory_store_warns_and_refuses_cluster_jobs_in_production(tmp_path: Path) -> None:
    """``beat --store memory://`` logs its warning; with CRON_BRIDGE_ENV=production it refuses."""
    refused = cli(
        "beat",
        "-A",
        APP,
        "--store",
        "memory://",
        cwd=tmp_path,
        env=command_env(CRON_BRIDGE_ENV="production"),
    )
    assert refused.returncode == 2
    assert "allow_local_cluster" in refused.stderr.strip().splitlines()[-1]
    beat = ran_until(
        BeatProcess("mem", tmp_path, command_env(), app=APP, store_url="memory://"),
        "started with",
        "the beat to start",
    )
    assert "this process only" in beat.output()
    assert beat.process is not None and beat.process.returncode == 0


@pytest.mark.parametrize(
    "module", ["tests.apps.direct", "tests.apps.celery_corpus", "tests.apps.rq_cron_config"]
)
def test_a_beat_that_starts_with_no_job_warns_once_and_names_the_module(
    tmp_path: Path, module: str
) -> None:
    """A module with no @cluster_task job: the beat starts (stored schedules may come), but
    says once which module it imported, and what that module declares instead."""
    beat = ran_until(
        BeatProcess(
            "empty", tmp_path, command_env(), app=module, store_url=f"sqlite:///{tmp_path}/s.db"
        ),
        "started with 0 jobs",
        "the beat to start",
        then=1.5,
    )
    warnings = [line for line in beat.output().splitlines() if "no job is declared" in line]
    assert len(warnings) == 1, beat.output()
    assert f"no job is declared in {module} (imported)" in warnings[0]
    assert " WARNING " in warnings[0]
    told = {
        "tests.apps.celery_corpus": f"beat_schedule entries, which `celery -A {module} beat -S "
        "cron_bridge` runs",
        "tests.apps.rq_cron_config": f"it has 5 rq cron entries, which `cron-bridge rq-cron "
        f"{module}` runs",
    }
    if module in told:
        assert told[module] in warnings[0], warnings[0]
    else:
        assert "it has" not in warnings[0], warnings[0]


def test_a_beat_says_what_else_its_modules_hold_that_it_does_not_run(tmp_path: Path) -> None:
    """@cluster_task jobs beside periodiq actors: the beat runs the jobs and says once that
    the actors are not run here, and which command runs them (never both at once)."""
    beat = ran_until(
        BeatProcess(
            "both",
            tmp_path,
            command_env(),
            app="tests.apps.cli_app",
            store_url=f"sqlite:///{tmp_path}/s.db",
            extra=["-A", "tests.apps.periodiq_app"],
        ),
        "started with 3 jobs",
        "the beat to start",
    )
    told = [line for line in beat.output().splitlines() if "also has" in line]
    assert told == [told[0]] and " WARNING " in told[0], beat.output()
    assert (
        "tests.apps.cli_app, tests.apps.periodiq_app also has 4 periodiq entries, which "
        "`cron-bridge periodiq tests.apps.cli_app tests.apps.periodiq_app` runs"
    ) in told[0]


def test_a_job_name_nobody_declared_is_refused_with_the_closest_names(tmp_path: Path) -> None:
    """pause, resume and history check the name against the jobs the cluster knows (what
    the beats published, stored schedules, -A): a typo is one line, exit 2, and writes no
    pause for a job that does not exist."""
    store = f"sqlite:///{tmp_path}/s.db"
    env = command_env(CRON_BRIDGE_STORE=store)
    unknown = cli("pause", "nosuch.job", env=env, cwd=tmp_path)
    assert unknown.returncode == 2
    assert unknown.stderr.strip().splitlines() == [
        "cron-bridge: no job called 'nosuch.job' is known: no beat has published its jobs to "
        "this store yet; give the module that declares it with -A"
    ]
    typo = cli("pause", "reports.minutly", "-A", APP, env=env, cwd=tmp_path)
    assert typo.returncode == 2
    assert "no job called 'reports.minutly' (did you mean 'reports.minutely'?)" in typo.stderr
    ran_until(
        BeatProcess("names", tmp_path, env, app=APP, store_url=store),
        "started with",
        "the beat to publish its jobs",
        then=1,
    )
    # Known from the catalog the beat published, without -A.
    assert cli("pause", "cache.warm", env=env, cwd=tmp_path).returncode == 0
    assert cli("resume", "cache.warm", env=env, cwd=tmp_path).returncode == 0
    for command in (["resume", "cache.wram"], ["history", "cache.wram"], ["pause", "zzz"]):
        refused = cli(*command, env=env, cwd=tmp_path)
        assert refused.returncode == 2, (command, refused.stdout)
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "did you mean 'cache.warm'" in cli("history", "cache.wram", env=env, cwd=tmp_path).stderr
    listed = cli("pause", "zzz", env=env, cwd=tmp_path).stderr
    assert "(known: billing.broken, cache.warm, reports.minutely)" in listed
    assert control.paused(store_from_url(store)) == {}


def test_version_names_every_distribution_and_its_queue_library(tmp_path: Path) -> None:
    from importlib.metadata import version

    done = cli("--version", env=command_env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"cron-bridge {version('cron-bridge')}",
        f"cron-bridge-celery {version('cron-bridge-celery')} (celery {version('celery')})",
        f"cron-bridge-dramatiq {version('cron-bridge-dramatiq')} (dramatiq {version('dramatiq')})",
        f"cron-bridge-rq {version('cron-bridge-rq')} (rq {version('rq')})",
    ]


def test_a_duration_in_plain_seconds_is_taken_on_the_command_line(tmp_path: Path) -> None:
    """``--shutdown-timeout 5``, as job options take 5: seconds, not a refusal."""
    beat = ran_until(
        BeatProcess(
            "secs",
            tmp_path,
            command_env(),
            app=APP,
            store_url=f"sqlite:///{tmp_path}/s.db",
            extra=["--shutdown-timeout", "5"],
        ),
        "started with",
        "the beat to start",
    )
    assert beat.process is not None and beat.process.returncode == 0, beat.output()[-2000:]


def test_the_beat_prints_the_dashboards_url_for_a_bare_port(tmp_path: Path) -> None:
    """``--http PORT`` listens on the loopback, and the beat says where to open the dashboard
    (it used to log ``http://PORT/...``)."""
    from tests.servers import free_port

    port = free_port()
    env = command_env(CRON_BRIDGE_SECRET="s" * 40)
    beat = ran_until(
        BeatProcess(
            "url",
            tmp_path,
            env,
            app=APP,
            store_url=f"sqlite:///{tmp_path}/s.db",
            extra=["--http", str(port)],
        ),
        "HTTP trigger on",
        "the HTTP server",
    )
    assert (
        f"dashboard on http://127.0.0.1:{port}/_scheduler/ (log in with the secret); HTTP "
        f"trigger on http://127.0.0.1:{port}/_scheduler/run/<job>"
    ) in beat.output()


def test_one_job_is_one_job(tmp_path: Path) -> None:
    (tmp_path / "onejob.py").write_text(
        "from cron_bridge import cluster_task\n\n\n"
        "@cluster_task(every='1h', target='inline')\n"
        "def hourly(ctx):\n    pass\n"
    )
    beat = ran_until(
        BeatProcess(
            "one", tmp_path, command_env(), app="onejob", store_url=f"sqlite:///{tmp_path}/s.db"
        ),
        "started with",
        "the beat to start",
    )
    assert "started with 1 job on" in beat.output(), beat.output()[-1000:]


def test_every_option_of_every_command_has_its_own_help(tmp_path: Path) -> None:
    """No option without a help text, and none that says only "The job's every."."""
    import click

    from cron_bridge.cli import main
    from tests.reference import every_command

    missing = [
        f"{full} {param.opts[0]}"
        for full, command in every_command(main)
        for param in command.params
        if isinstance(param, click.Option)
        and (not param.help or param.help.startswith("The job's "))
    ]
    assert missing == []


def test_next_lists_occurrences_in_the_jobs_zone_and_marks_what_dst_does(tmp_path: Path) -> None:
    """A 02:30 job in Warsaw over the next year: each occurrence at 02:30 local with its
    offset and UTC time; the spring-forward day's (02:30 does not exist) marked moved, the
    fall-back day's marked as in the repeated hour; a typo gets the closest name."""
    (tmp_path / "dstjobs.py").write_text(
        "from cron_bridge import cluster_task\n\n\n"
        "@cluster_task(cron='30 2 * * *', tz='Europe/Warsaw', target='inline', name='nightly')\n"
        "def nightly(ctx):\n    pass\n"
    )
    env = command_env()
    done = cli("next", "nightly", "-A", "dstjobs", "-n", "366", "--json", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert len(rows) == 366
    plain = [r for r in rows if not r["note"]]
    assert all(r["at"][11:19] == "02:30:00" and r["at"][19:] in ("+01:00", "+02:00") for r in plain)
    moved = [r for r in rows if r["note"].startswith("moved by DST")]
    repeated = [r for r in rows if r["note"].startswith("in the hour the clocks go back")]
    assert len(moved) == len(repeated) == 1, [r for r in rows if r["note"]]
    spring, autumn = (
        datetime.fromisoformat(moved[0]["at"]),
        datetime.fromisoformat(repeated[0]["at"]),
    )
    assert (spring.month, spring.weekday(), spring.hour, spring.utcoffset()) == (
        3,
        6,
        3,
        timedelta(hours=2),
    )
    assert (autumn.month, autumn.weekday(), autumn.hour) == (10, 6, 2)
    table = cli("next", "nightly", "-A", "dstjobs", "-n", "2", env=env, cwd=tmp_path)
    assert table.stdout.splitlines()[:2] == [
        "nightly: 30 2 * * * in Europe/Warsaw",
        "OCCURRENCE                 UTC                        NOTE",
    ]
    typo = cli("next", "nightyl", "-A", "dstjobs", env=env, cwd=tmp_path)
    assert typo.returncode == 2
    assert "no job called 'nightyl' (did you mean 'nightly'?) in dstjobs" in typo.stderr


@pytest.mark.parametrize("command", ["add-many", "update-many", "remove-many"])
def test_a_bulk_source_that_cannot_be_read_is_one_line_and_exit_2(
    tmp_path: Path, env: dict[str, str], command: str
) -> None:
    """``-`` with standard input closed, a directory, a file that is not there: click's
    usage error naming the source, never a traceback."""
    closed = subprocess.run(
        [sys.executable, "-m", "cron_bridge", "schedule", command, "-"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=lambda: os.close(0),  # the child starts with its standard input closed
    )
    for done in (
        closed,
        cli("schedule", command, str(tmp_path), env=env, cwd=tmp_path),
        cli("schedule", command, str(tmp_path / "missing.jsonl"), env=env, cwd=tmp_path),
    ):
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr and "Invalid value for 'SOURCE'" in done.stderr
