"""The adapter seam: adapters are found through entry points and name the tasks they accept."""

from __future__ import annotations

import inspect
from typing import Any

import dramatiq
import pytest
from celery import Celery
from dramatiq.brokers.stub import StubBroker
from hypothesis import given, settings
from hypothesis import strategies as st
from redis import Redis
from rq import Queue

from cron_bridge import ConfigError, Registry, cluster_task
from cron_bridge.queues.installed import ENTRY_POINT_GROUP, get_adapter, installed_adapters

# The three adapters and their queue libraries.
pytestmark = pytest.mark.extras


def report(ctx: Any) -> None:
    """A module-level function RQ can import by dotted path."""


def test_the_three_adapters_are_discovered_through_entry_points() -> None:
    """Installing an adapter distribution is all it takes for the core to find it."""
    names = {adapter.name for adapter in installed_adapters()}
    assert {"celery", "rq", "dramatiq"} <= names, ENTRY_POINT_GROUP
    assert type(get_adapter("celery")).__module__.startswith("cron_bridge_celery")


def test_an_object_no_adapter_accepts_lists_the_installed_adapters() -> None:
    """A plain function without ``queue=`` or ``target="inline"`` is refused with a way out."""
    with pytest.raises(ConfigError) as caught:
        cluster_task(every="5m", name="lost", registry=Registry())(report)
    message = str(caught.value)
    assert "celery, dramatiq, rq" in message
    assert 'target="inline"' in message
    assert caught.value.job == "lost"


def test_a_queue_target_with_instance_scope_is_refused_at_import() -> None:
    """scope="instance" runs in every beat, so a Celery task cannot take it."""
    app = Celery("tests", set_as_current=False)
    with pytest.raises(ConfigError) as caught:

        @cluster_task(every="5m", scope="instance", registry=Registry())
        @app.task(name="reports.local")
        def local(ctx: Any) -> None:
            pass

    assert (caught.value.job, caught.value.option, caught.value.value) == (
        "reports.local",
        "scope",
        "instance",
    )


@pytest.mark.parametrize("attribute", ["send_report", "celery_report", "dramatiq_report"])
def test_a_task_decorated_away_from_its_module_is_refused_with_how_to_declare_it(
    attribute: str,
) -> None:
    """``cluster_task(...)(imported_task)`` in another module: the worker imports the task from
    its own module, undecorated (no guard, no ctx, history "enqueued" forever), so it is a
    ConfigError that names where to put the decorator."""
    from tests.apps import imported

    task = getattr(imported, attribute)
    registry = Registry()
    with pytest.raises(ConfigError) as caught:
        cluster_task(every="1m", queue="reports", registry=registry)(task)
    error = caught.value
    assert (error.option, error.value) == ("target", f"tests.apps.imported.{attribute}")
    assert "above its definition in tests.apps.imported" in error.reason
    assert f"decorated in {__name__}" in error.reason
    assert len(registry) == 0


@pytest.mark.parametrize("library", ["celery", "dramatiq", "rq"])
def test_a_task_whose_adapter_is_not_installed_names_the_distribution_to_install(
    library: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the library's adapter, the error says which distribution to install (it used
    to say "decorate a Celery task..." about a Celery task)."""
    from cron_bridge.queues import installed

    others = [a for a in installed_adapters() if a.name != library]
    monkeypatch.setattr(installed, "installed_adapters", lambda: others)
    if library == "celery":
        task: Any = Celery("missing", set_as_current=False).task(name="missing.task")(report)
        queue: Any = None
    elif library == "dramatiq":
        task, queue = dramatiq.actor(actor_name="missing_actor", broker=StubBroker())(report), None
    else:
        task, queue = report, Queue("reports", connection=Redis())
    with pytest.raises(ConfigError) as caught:
        cluster_task(every="1m", queue=queue, registry=Registry())(task)
    distribution = f"cron-bridge-{library}"
    assert f"adapter is not installed: pip install {distribution}" in caught.value.reason
    assert (caught.value.option, caught.value.value) == ("target", "queue")


def test_the_senders_of_other_schedulers_take_no_cluster_task() -> None:
    """celery beat's, rq cron's, periodiq's and dramatiq-crontab's senders share the core's
    DropInSender: nothing is declared on them (and declares=False keeps them out of the adapters
    an error about a declaration lists)."""
    from cron_bridge.queues.sending import DropInSender
    from cron_bridge_celery.sender import BeatScheduleSender
    from cron_bridge_dramatiq.crontab import CrontabSender
    from cron_bridge_dramatiq.periodiq import PeriodiqSender
    from cron_bridge_rq.rq_cron import RQCronSender

    senders = [
        BeatScheduleSender(Celery("s", set_as_current=False), {}),
        CrontabSender({}),
        PeriodiqSender({}, "UTC"),
        RQCronSender(Redis(), {}),
    ]
    for sender in senders:
        assert isinstance(sender, DropInSender) and sender.declares is False
        assert sender.accepts(report, None) is False
        with pytest.raises(ConfigError, match="are not declared with @cluster_task"):
            sender.describe(report, None)
    assert {s.name for s in senders} == {
        "celery-beat-schedule",
        "dramatiq-crontab",
        "periodiq",
        "rq-cron",
    }


HANDLERS = {
    "plain": lambda ctx, account, day=None: None,
    "star": lambda ctx, *ids, dry_run=False: None,
    "keywords": lambda ctx, *, region, **more: None,
    "positional_only": lambda ctx, account, /, day=None: None,
    "bare": lambda ctx: None,
}


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    handler=st.sampled_from(sorted(HANDLERS)),
    calls=st.lists(
        st.tuples(
            st.integers(0, 3),
            st.lists(
                st.sampled_from(["account", "day", "ids", "dry_run", "region", "x", "y"]),
                unique=True,
            ),
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_a_celery_tasks_argument_check_answers_as_binding_does_on_every_call(
    handler: str, calls: list[tuple[int, list[str]]]
) -> None:
    """Celery checks a call's arguments on every ``apply_async``; the check the adapter puts
    there (the handler's signature less its ``ctx``) remembers the shapes of call it accepted
    (how many positional arguments, which keywords) and answers each call, again and again
    and in any order of its keywords, exactly as ``inspect.Signature.bind`` on that signature
    does, a refusal's text included."""
    from cron_bridge_celery.adapter import _header_without_ctx

    run = HANDLERS[handler]
    check = _header_without_ctx(run)
    signature = inspect.signature(run)
    without_ctx = signature.replace(parameters=list(signature.parameters.values())[1:])
    for count, names in calls * 2:
        args, kwargs = tuple(range(count)), dict.fromkeys(names, 1)
        try:
            without_ctx.bind(*args, **kwargs)
        except TypeError as exc:
            with pytest.raises(TypeError) as raised:
                check(*args, **kwargs)
            assert str(raised.value) == str(exc)
        else:
            check(*args, **kwargs)
