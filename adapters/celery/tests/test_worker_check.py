"""What ``celery worker`` a worker check refuses: its options as Celery passes them, its app's
settings, the environment (the real worker is started in tests/e2e/test_embedded_beat.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cron_bridge_celery.worker_check import _check, problem

STORE = {"cron_bridge_store": "redis://127.0.0.1:6379/0"}


def found(
    options: dict[str, Any], conf: dict[str, Any] | None = None, **environ: str
) -> str | None:
    return problem(options, conf or {}, environ)


@pytest.mark.parametrize(
    "statedb", ["cron_bridge", "cron_bridge_django", "/var/run/cron_bridge.db"]
)
@pytest.mark.parametrize("beat", [True, False])
def test_a_state_file_named_after_a_scheduler_is_refused_whatever_else(
    statedb: str, beat: bool
) -> None:
    said = found({"beat": beat, "statedb": statedb})
    assert said is not None and "is --statedb on celery worker" in said
    assert "--beat --scheduler cron_bridge" in said


@pytest.mark.parametrize(
    "scheduler",
    [
        "cron_bridge",
        "cron_bridge_django",
        "cron_bridge.schedulers:ClusterScheduler",
        "cron_bridge.schedulers.ClusterScheduler",
        "cron_bridge_celery:ClusterScheduler",
        "cron_bridge_celery.scheduler:ClusterScheduler",
        "cron_bridge_celery.django_beat:DjangoClusterScheduler",
    ],
)
def test_an_embedded_cron_bridge_beat_passes_however_it_is_named(scheduler: str) -> None:
    assert found({"beat": True, "scheduler": scheduler}, STORE) is None
    assert found({"beat": True}, {**STORE, "beat_scheduler": scheduler}) is None


@pytest.mark.parametrize("scheduler", [None, "celery.beat:PersistentScheduler", "no.such:Thing"])
def test_another_embedded_beat_is_refused_where_cron_bridge_is_set_up(
    scheduler: str | None,
) -> None:
    options = {"beat": True, "scheduler": scheduler}
    for conf, environ in ((STORE, {}), ({}, {"CRON_BRIDGE_STORE": "sqlite:///x.db"})):
        said = found(options, conf, **environ)
        assert said is not None and "embedded beat (-B) runs" in said, said
    assert found(options) is None, "an app cron-bridge is not set up for is left alone"
    assert found({"beat": False, "scheduler": scheduler}, STORE) is None


@given(statedb=st.text(max_size=40), scheduler=st.none() | st.text(max_size=40))
def test_any_option_text_is_judged_without_an_error(statedb: str, scheduler: str | None) -> None:
    said = found({"beat": True, "statedb": statedb, "scheduler": scheduler}, STORE)
    assert said is None or said.startswith(("-S ", "this worker's embedded beat"))


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        ("cron_bridge_http", ("127.0.0.1", 8081), "cron_bridge_http"),
        ("cron_bridge_store", 42, "cron_bridge_store"),
        ("cron_bridge_shutdown_timeout", "banana", "shutdown_timeout"),
        ("cron_bridge_replica_id", "evil\nCRITICAL forged", "replica_id"),
    ],
)
def test_a_bad_setting_of_the_embedded_beat_refuses_the_worker(
    setting: str, value: object, says: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """Celery's signal dispatch logs what a handler raises and starts the worker anyway: a
    bad setting is turned into the refusal itself (one line, exit 2), never a beat process
    that dies inside a worker that lives on."""
    conf = {**STORE, setting: value}
    with pytest.raises(SystemExit) as exited:
        _check(conf=conf, options={"beat": True, "scheduler": "cron_bridge"})
    assert exited.value.code == 2
    err = capfd.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err
    assert "CRITICAL forged" not in err.splitlines()[-1][:20]


def test_a_duration_written_as_a_number_is_a_duration() -> None:
    from cron_bridge.cli.hosted import HostedOptions

    read = HostedOptions.read({"cron_bridge_shutdown_timeout": 30}.get, {})
    assert read.shutdown_timeout == "30.0s"


def test_a_refusal_is_one_line_whatever_the_command_line_held(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        _check(conf=dict(STORE), options={"beat": True, "scheduler": "evil\n\x1b[31m:X"})
    with pytest.raises(SystemExit):
        _check(conf=dict(STORE), options={"statedb": "/tmp/" + "a" * 50_000 + "/cron_bridge"})
    lines = capfd.readouterr().err.splitlines()
    assert len(lines) == 2 and "\x1b" not in lines[0] and len(lines[1]) < 2100, lines[0]
