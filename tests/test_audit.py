"""``history --occurrence`` and ``history --audit``: what the store says about occurrences."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cron_bridge import Every
from cron_bridge.control.audit import audit, final_outcome, occurrence_report
from cron_bridge.jobs import Occurrence
from cron_bridge.stores import MemoryStore, RunRecord, SQLiteStore, Store
from tests.e2e.processes import cli, command_env

JOB = "books.close"


def at(base: datetime, minutes: int, seconds: float = 0) -> datetime:
    return base + timedelta(minutes=minutes, seconds=seconds)


def fill(store: Store, base: datetime) -> dict[str, Occurrence]:
    """Five occurrences a minute apart: once, twice, retried, missed, and one without records."""
    names = ["once", "twice", "retried", "missed", "silent"]
    made = {name: Occurrence(job=JOB, scheduled_at=at(base, i)) for i, name in enumerate(names)}

    def record(name: str, outcome: str, replica: str, after: float, **extra: object) -> RunRecord:
        occurrence = made[name]
        return RunRecord(
            job=JOB,
            occurrence_id=occurrence.id,
            outcome=outcome,
            trigger="queue",  # type: ignore[arg-type]
            replica=replica,
            started_at=occurrence.scheduled_at + timedelta(seconds=after),
            **extra,  # type: ignore[arg-type]
        )

    for name in ("once", "twice", "retried"):
        store.claim(made[name], "beat-a")
    store.record_many(
        [
            record("once", "enqueued", "beat-a", 0.01),
            record("once", "skipped-claimed", "beat-b", 0.02),
            record("once", "completed", "worker-1", 0.5, duration_ms=12.0),
            record("twice", "completed", "worker-1", 0.5),
            record("twice", "completed", "worker-2", 0.6),
            record("retried", "failed", "worker-1", 0.5, error="ConnectionError: down"),
            record("retried", "completed", "worker-2", 2.5, attempt=2),
            record("missed", "missed", "beat-a", 40),
        ]
    )
    return made


def test_the_audit_counts_occurrences_by_completed_runs(tmp_path: Path) -> None:
    """From the records: once and retried completed once, twice is a duplicate, missed never
    completed. From the schedule: the occurrence that left no record counts as never."""
    store = SQLiteStore(tmp_path / "s.db")
    base = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    made = fill(store, base)
    found = audit(store, JOB, base - timedelta(seconds=1), at(base, 10))
    assert (found.occurrences, found.once) == (4, 2)
    assert found.never == {made["missed"].id: ["missed"]}
    assert found.more == {made["twice"].id: 2}
    assert not found.clean
    scheduled = audit(store, JOB, base - timedelta(seconds=1), at(base, 4), Every("1m"))
    assert scheduled.occurrences == 5
    assert scheduled.never == {made["missed"].id: ["missed"], made["silent"].id: []}
    assert scheduled.beyond_history == 0


def test_occurrences_older_than_the_kept_history_are_not_judged(tmp_path: Path) -> None:
    """With history_limit 4 the store dropped the oldest records: those occurrences are
    reported as beyond the history, not as never completed."""
    store = SQLiteStore(tmp_path / "s.db", history_limit=4)
    base = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    fill(store, base)
    found = audit(store, JOB, base - timedelta(seconds=1), at(base, 4), Every("1m"))
    assert found.beyond_history >= 1
    assert found.occurrences + found.beyond_history == 5


def test_an_occurrence_report_tells_its_whole_story(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    made = fill(store, datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    report = occurrence_report(store, made["retried"])
    assert report.claimed_by == "beat-a"
    assert [(r.outcome, r.attempt) for r in report.records] == [("failed", 1), ("completed", 2)]
    assert report.final == "completed"
    assert occurrence_report(store, made["missed"]).final == "missed"
    assert occurrence_report(store, made["silent"]).final == "none"
    assert final_outcome([]) == "none"


@pytest.mark.slow  # four cron-bridge processes
def test_the_cli_prints_the_occurrence_and_the_audit(tmp_path: Path) -> None:
    """history --occurrence and --audit --json on a real store file; the audit exits 1 when an
    occurrence never completed or completed twice, and 0 over a clean window."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    base = now - timedelta(minutes=10)
    made = fill(SQLiteStore(tmp_path / "s.db"), base)
    env = command_env()
    shown = cli(
        "history", JOB, "--store", url, "--occurrence", made["retried"].id, env=env, cwd=tmp_path
    )
    assert shown.returncode == 0, shown.stderr
    assert "claimed by  beat-a" in shown.stdout
    assert "final       completed" in shown.stdout
    assert "ConnectionError: down" in shown.stdout
    audited = cli(
        "history", JOB, "--store", url, "--audit", "--since", "1h", "--json", env=env, cwd=tmp_path
    )
    assert audited.returncode == 1, audited.stderr
    body = json.loads(audited.stdout)
    assert (body["occurrences"], body["completed_once"]) == (4, 2)
    assert body["completed_more_than_once"] == {made["twice"].id: 2}
    # A window around the retried occurrence only: 30 s either side of it.
    ago = datetime.now(UTC) - made["retried"].scheduled_at
    since, grace = int(ago.total_seconds()) + 30, int(ago.total_seconds()) - 30
    clean = cli(
        "history",
        JOB,
        "--store",
        url,
        "--audit",
        "--since",
        f"{since}s",
        "--grace",
        f"{grace}s",
        env=env,
        cwd=tmp_path,
    )
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "OCCURRENCES" in clean.stdout
    assert clean.stdout.splitlines()[2].split() == ["1", "1", "0", "0", "0"]
    wrong = cli(
        "history",
        "other.job",
        "--store",
        url,
        "--occurrence",
        made["once"].id,
        env=env,
        cwd=tmp_path,
    )
    assert wrong.returncode == 2 and len(wrong.stderr.strip().splitlines()) == 1


def test_the_audit_says_what_became_of_each_occurrence_that_never_completed() -> None:
    """Every never-completed occurrence is explained: an accepted loss (missed, failed,
    skipped for an overlap, claimed by a replica that died before it enqueued) or one to look
    into (enqueued and never run, never claimed)."""
    store = MemoryStore()
    base = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    names = ["died", "queued", "failed", "held", "missed", "unclaimed"]
    made = {name: Occurrence(job=JOB, scheduled_at=at(base, i)) for i, name in enumerate(names)}

    def record(name: str, outcome: str, replica: str, **extra: object) -> RunRecord:
        return RunRecord(
            job=JOB,
            occurrence_id=made[name].id,
            outcome=outcome,
            trigger="queue",  # type: ignore[arg-type]
            replica=replica,
            started_at=made[name].scheduled_at,
            **extra,
        )  # type: ignore[arg-type]

    store.claim(made["died"], "beat-dead")
    store.record_many(
        [
            record("died", "skipped-claimed", "beat-b"),
            record("queued", "enqueued", "beat-a"),
            record("failed", "failed", "worker-1", error="ValueError: no ledger"),
            record("held", "skipped-overlap", "worker-2", reason="held by x@y on worker-1"),
            record("missed", "missed", "beat-a"),
        ]
    )
    found = audit(store, JOB, base - timedelta(minutes=1), at(base, 10), Every("1m"))
    why = {name: found.why[made[name].id] for name in names}
    assert (
        why["died"] == "claimed by beat-dead, which recorded nothing (it died before it enqueued)"
    )
    assert why["queued"].startswith("enqueued by beat-a, no worker recorded a run")
    assert why["failed"] == "failed on worker-1: ValueError: no ledger"
    assert why["held"] == "skipped-overlap on worker-2: held by x@y on worker-1"
    assert why["missed"] == "missed on beat-a"
    assert why["unclaimed"].startswith("never claimed")
    assert json.loads(json.dumps(found.to_json()))["why_never_completed"][made["held"].id]


def test_the_audit_leaves_out_the_occurrences_before_a_replica_first_declared_the_job() -> None:
    """A job first published 10 minutes ago, audited over 24 h: the 47 half-hours before it
    are not "never claimed (no replica up)"; the window starts at the first declaration, which
    a later publish (a restart, a schedule change) never moves."""
    from cron_bridge import declare
    from cron_bridge.control import catalog

    store = MemoryStore()
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    job = declare("billing.new", every="30m", target="inline", handler=lambda ctx: None)
    deployed = now - timedelta(minutes=10)
    catalog.publish(store, [job], now=deployed)
    catalog.publish_some(store, [job], now=now)  # changed again later: the first stays
    assert catalog.first_seen(store, job.name) == deployed
    end = now - timedelta(minutes=1)  # the CLI's --grace
    whole_day = audit(store, job.name, now - timedelta(hours=24), end, job.schedule)
    assert whole_day.occurrences == 47 and len(whole_day.never) == 47  # what it said before
    found = audit(
        store,
        job.name,
        now - timedelta(hours=24),
        end,
        job.schedule,
        first_seen=catalog.first_seen(store, job.name),
    )
    assert (found.occurrences, found.first_seen, found.clean) == (0, deployed, True)
    assert found.to_json()["first_seen"] == deployed.isoformat()
    assert catalog.first_seen(store, "never.declared") is None
