"""The allow-list of what stored schedules may name: agreed by ``@cluster_task``, ``@storable``
or ``CRON_BRIDGE_STORED_TASKS``, refused otherwise where the name is added and on the worker
before anything is imported or called, and every refusal recorded."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from cron_bridge import ConfigError, RefusedTask, cluster_task, storable
from cron_bridge.control.schedules import GROUP, ScheduleEntry, StoredSchedules
from cron_bridge.registry import Registry
from cron_bridge.run import delivery as worker
from cron_bridge.run.stored import run_stored
from cron_bridge.storable import ENV, agreed, listed, refusal
from cron_bridge.stores import MemoryStore
from cron_bridge_rq.stored import _function, _unloaded

# Stored schedules name an adapter; the worker's side is the RQ adapter's.
pytestmark = pytest.mark.extras


@pytest.fixture(autouse=True)
def _no_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)


def tenant_report(tenant: int) -> str:
    return f"report {tenant}"


def yearly(ctx: object, tenant: int) -> str:
    return f"yearly {tenant}"


def test_a_task_is_agreed_by_cluster_task_by_storable_or_by_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    here = __name__
    assert not agreed("rq", f"{here}.tenant_report")
    storable(tenant_report)
    assert agreed("rq", f"{here}.tenant_report") and refusal("rq", f"{here}.tenant_report") is None
    assert not agreed("celery", f"{here}.tenant_report")  # per library
    cluster_task(cron="0 0 1 1 *", queue="reports", registry=Registry())(yearly)
    assert agreed("rq", f"{here}.yearly")
    monkeypatch.setenv(ENV, "proj.reports.*, billing.close_day")
    assert listed("proj.reports.tenant") and listed("proj.reports.sub.x")
    assert listed("billing.close_day") and not listed("billing.close_day_2")
    assert not listed("proj.reportsX.y") and not listed("os.system")


@pytest.mark.parametrize("pattern", ["*", ".*", "*.system"])
def test_a_pattern_that_would_agree_to_everything_is_not_honoured(
    pattern: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(ENV, pattern)
    assert not listed("os.system") and not agreed("rq", "os.system")
    assert "not honoured" in caplog.text


@pytest.mark.parametrize(
    ("library", "task"),
    [
        ("rq", "os.system"),
        ("rq", "subprocess.getoutput"),
        ("rq", "builtins.eval"),
        ("celery", "celery.backend_cleanup"),
        ("dramatiq", "proj.undeclared"),
    ],
)
def test_adding_a_task_nobody_agreed_to_is_refused_and_writes_nothing(
    library: str, task: str
) -> None:
    store = MemoryStore()
    with pytest.raises(ConfigError, match="stored schedules may name") as caught:
        StoredSchedules(store).add("evil", library=library, task=task, every="1m")
    assert caught.value.option == "task"
    assert store.controls(GROUP) == {} and store.controls("change:evil") == {}


def test_changing_a_schedule_to_a_task_nobody_agreed_to_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV, "proj.*")
    schedules = StoredSchedules(MemoryStore())
    schedules.add("tenant.1", library="rq", task="proj.report", every="1m")
    schedules.update("tenant.1", every="5m")  # the same task: not checked again
    with pytest.raises(ConfigError, match="stored schedules may name"):
        schedules.update("tenant.1", task="os.system")
    assert schedules.get("tenant.1").task == "proj.report"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "path", ["os.system", "builtins.eval", "subprocess.getoutput", "os.path.join", "os", ".x"]
)
def test_the_rq_worker_finds_only_functions_defined_where_they_are_named(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even a list that names the module: a builtin, a re-export or a non-function is none."""
    monkeypatch.setenv(ENV, "os.*,builtins.*,subprocess.*")
    if path == "subprocess.getoutput":  # a real function of subprocess: agreed by the list
        assert _function(path).__name__ == "getoutput"
        return
    with pytest.raises(LookupError):
        _function(path)


def test_the_rq_worker_imports_no_module_it_has_not_loaded_unless_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cb_side_effect.py").write_text(
        f"open({str(tmp_path / 'imported')!r}, 'w').close()\ndef task():\n    return 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(LookupError, match="has not loaded"):
        _function("cb_side_effect.task")
    assert "cb_side_effect" not in sys.modules and not (tmp_path / "imported").exists()
    monkeypatch.setenv(ENV, "cb_side_effect.task")
    assert _function("cb_side_effect.task")() == 1
    monkeypatch.delitem(sys.modules, "cb_side_effect")


@pytest.fixture
def worker_store() -> MemoryStore:
    store = MemoryStore()
    worker.configure(store)
    yield store
    worker.configure(None)


def _write(store: MemoryStore, name: str, task: str, **fields: object) -> dict[str, str]:
    spec = ScheduleEntry(name=name, library="rq", task=task, options={"every": "1m"}, **fields)
    store.put_control(GROUP, name, json.dumps(spec.to_json()))
    return {"job": name, "occurrence_id": f"{name}@2026-12-01T10:00:00.000Z"}


def test_a_refused_delivery_looks_nothing_up_and_is_recorded(worker_store: MemoryStore) -> None:
    """Written straight into the store, past every check where names are added."""
    meta = _write(worker_store, "evil", "os.system", args=["touch pwned"])
    looked_up: list[str] = []
    with pytest.raises(RefusedTask, match="stored schedules may name"):
        run_stored("rq", "evil", meta, attempt=lambda job: 1, resolve=looked_up.append)  # type: ignore[arg-type]
    assert looked_up == []
    (record,) = worker_store.history("evil")
    assert (record.outcome, record.reason, record.trigger) == ("failed", "refused", "queue")
    assert record.occurrence_id == meta["occurrence_id"] and "os.system" in (record.error or "")


def test_a_delivery_of_a_schedule_that_is_gone_is_refused_and_recorded(
    worker_store: MemoryStore,
) -> None:
    meta = {"job": "gone", "occurrence_id": "gone@2026-12-01T10:00:00.000Z"}
    with pytest.raises(RefusedTask, match="no stored rq schedule"):
        run_stored("rq", "gone", meta, attempt=lambda job: 1, resolve=lambda name: print)
    assert [r.reason for r in worker_store.history("gone")] == ["refused"]


def test_a_decorated_task_runs_with_ctx_and_a_plain_one_without(
    worker_store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "proj.*")
    calls: list[tuple[object, ...]] = []

    def plain(*args: object) -> str:
        calls.append(args)
        return "plain"

    def body(ctx: object, *args: object) -> str:
        calls.append((type(ctx).__name__, *args))
        return "decorated"

    def wrapper() -> None:
        raise AssertionError("the decorated task's own guard must not run for a stored one")

    wrapper.__cron_bridge_handler__ = body  # type: ignore[attr-defined]
    for name, target in (("s.plain", plain), ("s.decorated", wrapper)):
        meta = _write(worker_store, name, "proj.task", args=[7])
        job, delivery = run_stored(
            "rq", name, meta, attempt=lambda job: 1, resolve=lambda task, t=target: t
        )  # type: ignore[misc]
        assert job.name == name and delivery.record.outcome == "completed"
    assert calls == [(7,), ("JobContext", 7)]


def test_a_refusal_on_an_rq_worker_that_never_loaded_the_module_says_how_to_load_it(
    worker_store: MemoryStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A @cluster_task function whose module this worker never imported (a plain `rq
    worker`): the refusal names what is missing, the module, and how to load it, never
    "declare it with @cluster_task"; nothing is imported. Once loaded, the usual refusal."""
    (tmp_path / "cb_unloaded_tasks.py").write_text(
        f"open({str(tmp_path / 'imported')!r}, 'w').close()\ndef report():\n    return 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    meta = _write(worker_store, "tenant.report", "cb_unloaded_tasks.report")
    with pytest.raises(RefusedTask) as refused:
        run_stored(
            "rq",
            "tenant.report",
            meta,
            attempt=lambda job: 1,
            resolve=_function,
            unloaded=_unloaded,
        )
    said = str(refused.value)
    assert "'cb_unloaded_tasks.report' is not loaded in this worker" in said, said
    assert "`rq worker -c cb_unloaded_tasks`" in said and ENV in said, said
    assert "declare it with" not in said, said
    assert "cb_unloaded_tasks" not in sys.modules and not (tmp_path / "imported").exists()
    (record,) = worker_store.history("tenant.report")
    assert record.reason == "refused" and "rq worker -c cb_unloaded_tasks" in (record.error or "")
    # A module that is loaded, whose function nobody agreed to: how to agree to it.
    assert _unloaded(f"{__name__}.tenant_report") is None
    why = refusal("rq", f"{__name__}.unmarked_here", unloaded=_unloaded)
    assert why is not None and "declare it with @cluster_task" in why, why
