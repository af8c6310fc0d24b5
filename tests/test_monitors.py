"""``monitor=``: the monitor config derived from a job, the declarations refused at import, the
process's default, and when the guard checks in (and when it does not)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cron_bridge import ConfigError, JobContext, Ping, Sentry, declare
from cron_bridge import monitors as monitoring
from cron_bridge.jobs import Occurrence
from cron_bridge.monitors import CheckIn, default_monitor, set_default
from cron_bridge.plumbing.keys import lock_key
from cron_bridge.run.guard import Guard
from cron_bridge.stores import MemoryStore

AT = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def config_of(**options: Any) -> dict[str, Any]:
    job = declare("nightly.report", target="inline", handler=lambda ctx: None, **options)
    return Sentry().config(job.name, job.schedule, job.misfire_grace, job.timeout)


def test_the_sentry_monitor_config_comes_from_the_schedule_grace_and_timeout() -> None:
    assert config_of(
        cron="30 2 * * 1-5", tz="Europe/Berlin", misfire_grace="5m", timeout="90s"
    ) == {
        "schedule": {"type": "crontab", "value": "30 2 * * 1-5"},
        "timezone": "Europe/Berlin",
        "checkin_margin": 5,
        "max_runtime": 2,
    }
    assert config_of(every="1h") == {
        "schedule": {"type": "interval", "value": 1, "unit": "hour"},
        "timezone": "UTC",
        "checkin_margin": 1,
    }
    assert config_of(every="90m")["schedule"] == {"type": "interval", "value": 90, "unit": "minute"}
    assert config_of(every="2d")["schedule"] == {"type": "interval", "value": 2, "unit": "day"}
    assert config_of(cron="@daily", start="2026-12-01T00:00:00Z")["schedule"]["value"] == "@daily"


@pytest.mark.parametrize(
    ("options", "value"),
    [
        ({"every": "30s", "monitor": "sentry"}, "sentry"),
        ({"every": "90s", "monitor": "sentry"}, "sentry"),
        ({"every": "1h", "offset": "5m", "monitor": "sentry"}, "sentry"),
        ({"at": "2026-12-24T18:00:00Z", "monitor": "sentry"}, "sentry"),
        ({"every": "1m", "monitor": "datadog"}, "datadog"),
        ({"every": "1m", "monitor": Ping("ftp://hc.example/abc")}, "ftp://hc.example/abc/start"),
        ({"every": "1m", "monitor": Ping()}, "Ping()"),
        ({"every": "1m", "monitor": Ping("https://hc.example/x", timeout=0)}, 0),
    ],
)
def test_a_monitor_that_cannot_watch_the_job_fails_at_declaration(
    options: dict[str, Any], value: object
) -> None:
    with pytest.raises(ConfigError) as caught:
        declare("pay.out", target="inline", handler=lambda ctx: None, **options)
    assert (caught.value.job, caught.value.option, caught.value.value) == (
        "pay.out",
        "monitor",
        value,
    )


def test_a_ping_url_as_healthchecks_takes_it_or_three_urls() -> None:
    assert Ping("https://hc.example/u/").urls == {
        "start": "https://hc.example/u/start",
        "success": "https://hc.example/u",
        "fail": "https://hc.example/u/fail",
    }
    given = Ping(
        start="https://cronitor.example/p/k/job?state=run",
        fail="https://cronitor.example/p/k/job?state=fail",
    )
    assert given.urls["success"] is None and given.urls["start"].endswith("state=run")


def test_the_default_monitor_is_a_built_in_named_by_the_option_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(monitoring, "_default", [])
    monkeypatch.delenv("CRON_BRIDGE_MONITOR", raising=False)
    assert default_monitor() is None
    monkeypatch.setenv("CRON_BRIDGE_MONITOR", "sentry")
    assert isinstance(default_monitor(), Sentry)
    monkeypatch.setenv("CRON_BRIDGE_MONITOR", "my.module:Monitor")  # never names code
    assert default_monitor() is None
    set_default("sentry")
    assert isinstance(default_monitor(), Sentry)
    set_default(None)
    assert default_monitor() is None


class Recording:
    """A monitor that writes down what it is told."""

    def __init__(self, *, fails: bool = False) -> None:
        self.said: list[tuple[str, str, int, bool | None]] = []
        self.fails = fails

    def check(
        self, job: str, schedule: Any, misfire_grace: timedelta, timeout: timedelta | None
    ) -> None:
        pass

    def started(self, check_in: CheckIn) -> None:
        self.said.append(("started", check_in.id, check_in.attempt, None))
        if self.fails:
            raise RuntimeError("monitor down")

    def finished(self, check_in: CheckIn, *, ok: bool, duration: float | None) -> None:
        self.said.append(("finished", check_in.id, check_in.attempt, ok))
        if self.fails:
            raise RuntimeError("monitor down")


def test_the_guard_checks_in_each_attempt_that_runs_and_nothing_that_does_not() -> None:
    """Attempts that run check in, start then end, under an id of their own; a redelivery of a
    completed occurrence and a run skipped behind the lock say nothing."""
    store = MemoryStore()
    monitor = Recording()
    outcomes = iter(["fail", "ok"])

    def handler(ctx: JobContext) -> None:
        if next(outcomes) == "fail":
            raise RuntimeError("first attempt fails")

    job = declare(
        "mon.job", every="1m", target="inline", handler=handler, attempts=2, monitor=monitor
    )
    occurrence = Occurrence(job=job.name, scheduled_at=AT)
    guard = Guard(store, "worker-a")
    assert guard.run(job, occurrence, trigger="queue", attempt=1).outcome == "failed"
    assert guard.run(job, occurrence, trigger="queue", attempt=2).outcome == "completed"
    assert guard.run(job, occurrence, trigger="queue", attempt=2).outcome == "skipped-completed"
    later = Occurrence(job=job.name, scheduled_at=AT + timedelta(minutes=1))
    store.acquire(lock_key(job.name), "someone-else", timedelta(seconds=30))
    assert guard.run(job, later, trigger="queue").outcome == "skipped-overlap"
    first, second = monitor.said[0][1], monitor.said[2][1]
    assert monitor.said == [
        ("started", first, 1, None),
        ("finished", first, 1, False),
        ("started", second, 2, None),
        ("finished", second, 2, True),
    ]
    assert first != second


def test_a_monitor_that_fails_never_fails_the_run() -> None:
    monitor = Recording(fails=True)
    job = declare(
        "mon.down", every="1m", target="inline", handler=lambda ctx: None, monitor=monitor
    )
    record = Guard(MemoryStore(), "r1").run(
        job, Occurrence(job=job.name, scheduled_at=AT), trigger="schedule"
    )
    assert record.outcome == "completed"
    assert [said[0] for said in monitor.said] == ["started", "finished"]
