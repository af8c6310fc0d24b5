"""Job declarations, their validation, occurrences, backoff and the abort signal."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cron_bridge import (
    Aborted,
    AbortSignal,
    Backoff,
    ConfigError,
    Every,
    Occurrence,
    Registry,
    cluster_task,
    declare,
)


def handler(ctx: Any) -> None:
    """A plain inline handler."""


BAD_DECLARATIONS = [
    pytest.param({"cron": "61 * * * *"}, "cron", "61 * * * *", id="invalid-cron"),
    pytest.param({"cron": "0 0 30 2 *"}, "cron", "0 0 30 2 *", id="never-firing-cron"),
    pytest.param(
        {"cron": "0 3 * * *", "tz": "Mars/Olympus"}, "tz", "Mars/Olympus", id="unknown-tz"
    ),
    pytest.param(
        {"cron": "0 3 * * *", "every": "5m"}, "cron", "0 3 * * *", id="both-cron-and-every"
    ),
    pytest.param({}, "cron", None, id="neither-cron-nor-every"),
    pytest.param({"every": "5m", "attempts": 0}, "attempts", 0, id="attempts-below-one"),
    pytest.param(
        {"every": "5m", "kwargs": {"when": datetime(2026, 1, 1)}},
        "kwargs",
        {"when": datetime(2026, 1, 1)},
        id="non-json-kwargs",
    ),
    pytest.param({"every": "5m", "scope": "everywhere"}, "scope", "everywhere", id="unknown-scope"),
    pytest.param({"every": "5m", "overlap": "queue"}, "overlap", "queue", id="unknown-overlap"),
    pytest.param({"every": "5m", "misfire": "always"}, "misfire", "always", id="unknown-misfire"),
    pytest.param({"every": "soon"}, "every", "soon", id="bad-interval"),
    pytest.param(
        {"every": "5m", "lock_ttl": -5}, "lock_ttl", timedelta(seconds=-5), id="negative-lock-ttl"
    ),
    pytest.param(
        {"every": "5m", "misfire_grace": "-1s"},
        "misfire_grace",
        "-1s",
        id="unreadable-misfire-grace",
    ),
    pytest.param({"every": "5m", "timeout": "nope"}, "timeout", "nope", id="bad-timeout"),
]


@pytest.mark.parametrize(("options", "option", "value"), BAD_DECLARATIONS)
def test_bad_declarations_name_the_job_the_option_and_the_value(
    options: dict[str, Any], option: str, value: Any
) -> None:
    """Each bad declaration of DESIGN.md fails at declaration time with a ConfigError."""
    registry = Registry()
    with pytest.raises(ConfigError) as caught:
        cluster_task(name="billing.close-day", target="inline", registry=registry, **options)(
            handler
        )
    error = caught.value
    assert (error.job, error.option, error.value) == ("billing.close-day", option, value)
    assert "billing.close-day" in str(error)
    assert option in str(error)
    assert repr(value) in str(error)
    assert len(registry) == 0


@pytest.mark.parametrize("name", ["", "-leading-dash", "has space", "x" * 201, "emoji-☃"])
def test_a_bad_name_is_refused(name: str) -> None:
    """Names are [A-Za-z0-9][A-Za-z0-9._-]{0,199}."""
    with pytest.raises(ConfigError) as caught:
        cluster_task(every="5m", name=name, target="inline", registry=Registry())(handler)
    assert (caught.value.option, caught.value.value) == ("name", name)


def test_a_duplicate_name_is_refused() -> None:
    """Two declarations from different places cannot share a name."""
    registry = Registry()

    def other(ctx: Any) -> None:
        pass

    cluster_task(every="5m", name="reports.daily", target="inline", registry=registry)(handler)
    with pytest.raises(ConfigError, match="already declared") as caught:
        cluster_task(every="1h", name="reports.daily", target="inline", registry=registry)(other)
    assert (caught.value.job, caught.value.option) == ("reports.daily", "name")


def test_the_same_declaration_again_replaces_it() -> None:
    """Re-running the same declaration (a module reload) replaces the job instead of failing."""
    registry = Registry()
    cluster_task(every="5m", name="reports.daily", target="inline", registry=registry)(handler)
    cluster_task(every="1h", name="reports.daily", target="inline", registry=registry)(handler)
    job = registry.get("reports.daily")
    assert job is not None
    assert job.schedule == Every("1h")


def test_an_inline_declaration_registers_every_default() -> None:
    """Defaults are those of DESIGN.md and the function comes back unchanged."""
    registry = Registry()
    returned = cluster_task(every="5m", target="inline", registry=registry)(handler)
    assert returned is handler
    (job,) = registry.jobs()
    assert job.name == "tests.test_jobs.handler"
    assert (job.scope, job.overlap, job.misfire, job.attempts) == ("cluster", "skip", "skip", 1)
    assert (job.misfire_grace, job.lock_ttl) == (timedelta(seconds=30), timedelta(seconds=30))
    assert (job.timeout, job.on_demand, dict(job.kwargs), job.target) == (None, False, {}, "inline")
    assert job.backoff == Backoff.fixed(0)
    assert job.handler is handler


def test_a_queue_target_with_instance_scope_is_refused() -> None:
    """Instance scope runs in every replica, so it only fits inline targets."""
    with pytest.raises(ConfigError) as caught:
        declare("x", every="5m", scope="instance", adapter="celery", task="x")
    assert (caught.value.job, caught.value.option, caught.value.value) == ("x", "scope", "instance")


def test_an_inline_target_needs_a_callable_and_no_queue() -> None:
    """``target="inline"`` takes a callable and refuses ``queue=``."""
    with pytest.raises(ConfigError, match="callable"):
        declare("x", every="5m", target="inline", handler=None)
    with pytest.raises(ConfigError) as caught:
        declare("x", every="5m", target="inline", handler=handler, queue="default")
    assert caught.value.option == "queue"


def test_occurrence_ids_and_keys() -> None:
    """Ids are <job>@<UTC ISO-8601 with milliseconds>; claim keys are occ:<job>:<epoch ms>."""
    at = datetime(2026, 1, 1, 3, 0, tzinfo=UTC).astimezone(datetime.now().astimezone().tzinfo)
    occurrence = Occurrence(job="billing.close-day", scheduled_at=at)
    assert occurrence.id == "billing.close-day@2026-01-01T03:00:00.000Z"
    assert occurrence.claim_key == "occ:billing.close-day:1767236400000"
    assert Occurrence.parse(occurrence.id) == occurrence
    odd = Occurrence(job="j", scheduled_at=datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=UTC))
    assert odd.id == "j@2026-01-01T00:00:00.123Z"
    with pytest.raises(ValueError, match="not an occurrence id"):
        Occurrence.parse("no-at-sign")


def test_backoff() -> None:
    """Fixed waits stay; exponential ones double up to the cap."""
    assert Backoff.fixed(2).delays(3) == [2, 2, 2]
    assert Backoff.exponential(1).delays(4) == [1, 2, 4, 8]
    assert Backoff.exponential("1s", max="5s").delays(4) == [1, 2, 4, 5]
    with pytest.raises(ConfigError):
        Backoff.exponential(10, max=1)


def test_the_abort_signal_keeps_its_first_reason() -> None:
    """``abort`` is one-way, the first reason sticks, and waiters wake up."""
    signal = AbortSignal()
    assert not signal.aborted
    assert signal.reason is None
    signal.raise_if_aborted()
    woke = threading.Event()

    def waiter() -> None:
        if signal.wait(30):
            woke.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    assert signal.abort("lock-lost")
    assert not signal.abort("shutdown")
    thread.join(30)
    assert woke.is_set()
    assert (signal.aborted, signal.reason) == (True, "lock-lost")
    with pytest.raises(Aborted) as caught:
        signal.raise_if_aborted()
    assert caught.value.reason == "lock-lost"
