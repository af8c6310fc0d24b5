"""What ``celery worker`` a worker check refuses: its options as Celery passes them, its app's
settings, the environment (the real worker is started in tests/e2e/test_embedded_beat.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cron_bridge_celery.worker_check import problem

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
