"""The monitors' outbound calls against loopback peers that misbehave: each ping ends by its
deadline (a peer that never answers, one that trickles a byte at a time), redirects stay on
http(s) and are bounded, the run never waits for a ping, and an attempt's end is sent after
its start."""

from __future__ import annotations

import base64
import logging
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from cron_bridge import JobContext, Ping, Sentry, declare
from cron_bridge.jobs import Occurrence
from cron_bridge.monitors import CheckIn, settle
from cron_bridge.monitors.calls import MAX_IN_FLIGHT, in_flight
from cron_bridge.monitors.httpget import MAX_REDIRECTS, OutboundError, get
from cron_bridge.plumbing.keys import lock_key
from cron_bridge.run.guard import Guard
from cron_bridge.stores import MemoryStore
from tests.conftest import importable
from tests.peers import answering, large, redirecting, trickling
from tests.servers import silent_listener

MARGIN = 1.0  # seconds a loaded machine may add to a deadline


def within(limit: float, call: Callable[[], object]) -> tuple[float, object]:
    """Run ``call`` on a thread, waiting at most ``limit`` s: how long it took and what it
    returned (or raised). Fails the test, without hanging it, when it is still going."""
    found: list[object] = []

    def run() -> None:
        try:
            found.append(call())
        except BaseException as exc:
            found.append(exc)

    began = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    took = time.monotonic() - began
    assert not thread.is_alive(), f"still going after {took:.1f}s (limit {limit}s)"
    return took, found[0]


def check_in(job: str = "pinged") -> CheckIn:
    scheduled = Occurrence(job=job, scheduled_at=datetime.now(UTC))
    declared = declare(job, every="1m", target="inline", handler=lambda ctx: None)
    return CheckIn(
        job=job,
        schedule=declared.schedule,
        misfire_grace=declared.misfire_grace,
        timeout=None,
        occurrence_id=scheduled.id,
        attempt=1,
        replica="r1",
    )


def test_a_get_to_a_peer_that_never_answers_ends_by_its_deadline() -> None:
    with silent_listener() as port:
        took, raised = within(
            5, lambda: get(f"http://127.0.0.1:{port}/x", deadline=time.monotonic() + 1)
        )
    assert isinstance(raised, OSError | OutboundError), raised
    assert 0.9 <= took <= 1 + MARGIN


def test_a_get_to_a_peer_that_trickles_ends_by_its_deadline() -> None:
    """A byte every 0.2 s keeps every socket read short of a timeout: the deadline is on the
    whole request."""
    with trickling(0.2) as peer:
        took, raised = within(6, lambda: get(f"{peer.url}/x", deadline=time.monotonic() + 1.5))
        assert peer.paths() == ["/x"]
    assert isinstance(raised, OutboundError) and "deadline" in str(raised), raised
    assert 1.4 <= took <= 1.5 + MARGIN


def test_a_ping_to_a_trickling_peer_returns_at_once_and_leaves_within_its_timeout() -> None:
    """``started`` hands the ping over and returns; ``settle`` sees it over by its timeout."""
    with trickling(0.2) as peer:
        took, _ = within(3, lambda: Ping(peer.url, timeout=1).started(check_in()))
        assert took < 0.5
        settled, over = within(5, settle)
        assert over is True and settled <= 1 + MARGIN
        assert peer.paths() == ["/start"]


def test_the_handler_runs_at_once_and_the_lock_is_freed_however_slow_the_ping_peer() -> None:
    """The start ping trickles: the handler starts at once, the run ends at once, its overlap
    lock is free when it does, and its end is pinged after the start is given up."""
    store = MemoryStore()
    began: list[float] = []
    with trickling(0.2) as peer:
        job = declare(
            "slow.peer",
            every="1m",
            target="inline",
            handler=lambda ctx: began.append(time.monotonic()),
            monitor=Ping(peer.url, timeout=1.5),
        )
        occurrence = Occurrence(job=job.name, scheduled_at=datetime.now(UTC))
        sent = time.monotonic()
        took, record = within(
            5, lambda: Guard(store, "r1").run(job, occurrence, trigger="schedule")
        )
        assert store.holder(lock_key(job.name)) is None
        assert getattr(record, "outcome", record) == "completed"
        assert began and began[0] - sent < 0.5 and took < 0.5
        within(10, settle)
        (start_at, start), (end_at, end) = peer.heads
    assert start.startswith("GET /start ") and end.startswith("GET / ")
    assert end_at - start_at >= 1.4  # the end after the start was given up, at its deadline


def test_a_redirect_to_ftp_is_not_followed() -> None:
    with socket.socket() as ftp:
        ftp.bind(("127.0.0.1", 0))
        ftp.listen(4)
        ftp.settimeout(0.5)
        with redirecting(f"ftp://127.0.0.1:{ftp.getsockname()[1]}/x") as peer:
            _, raised = within(5, lambda: get(f"{peer.url}/p", deadline=time.monotonic() + 2))
            assert isinstance(raised, OutboundError) and "not http(s)" in str(raised), raised
            assert peer.paths() == ["/p"]
        with pytest.raises(TimeoutError):
            ftp.accept()  # nothing came to the ftp:// address


def test_redirects_are_followed_on_http_up_to_a_bound() -> None:
    with answering() as target, redirecting(f"{target.url}/landed") as hop:
        assert within(5, lambda: get(f"{hop.url}/p", deadline=time.monotonic() + 2))[1] == 200
        assert target.paths() == ["/landed"]
    with redirecting("/again") as loop:
        _, raised = within(5, lambda: get(f"{loop.url}/p", deadline=time.monotonic() + 3))
        assert isinstance(raised, OutboundError) and "redirects" in str(raised), raised
        assert len(loop.heads) == MAX_REDIRECTS + 1


def test_an_answer_head_is_read_up_to_a_bound() -> None:
    with large() as peer:
        _, raised = within(5, lambda: get(f"{peer.url}/p", deadline=time.monotonic() + 3))
    assert isinstance(raised, OutboundError) and "larger than" in str(raised), raised


def test_user_info_is_sent_as_basic_credentials_to_its_own_host_only() -> None:
    with answering() as other, redirecting(f"{other.url}/away") as peer:
        url = peer.url.replace("http://", "http://hc:s%3Ecret@") + "/p"
        _, status = within(5, lambda: get(url, deadline=time.monotonic() + 2))
        assert status == 200
        sent = base64.b64encode(b"hc:s>cret").decode()
        assert f"Authorization: Basic {sent}" in peer.heads[0][1]
        assert "Authorization" not in other.heads[0][1]


def test_calls_beyond_the_bound_in_flight_are_dropped_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with silent_listener() as port:
        ping = Ping(f"http://127.0.0.1:{port}/x", timeout=1)
        took, _ = within(5, lambda: [ping.started(check_in("crowded")) for _ in range(80)])
        assert took < 2 and in_flight() <= MAX_IN_FLIGHT
        within(5, settle)
    said = [r.getMessage() for r in caplog.records if "was dropped" in r.getMessage()]
    assert len(said) == 1, said


def test_settle_waits_at_most_its_timeout() -> None:
    with trickling(0.2) as peer:
        Ping(peer.url, timeout=3).started(check_in())
        took, over = within(3, lambda: settle(0.3))
        assert over is False and took <= 0.3 + MARGIN
        within(6, settle)


@pytest.mark.extras  # sentry-sdk
def test_the_closing_sentry_check_in_is_flushed_off_the_run_thread() -> None:
    """sentry-sdk's flush waits up to FLUSH_TIMEOUT for a peer that never answers: never on
    the thread that runs the attempt (the beat's dispatch pool), only in ``settle``."""
    sentry_sdk = importable("sentry_sdk")
    with silent_listener() as port:
        sentry_sdk.init(
            dsn=f"http://key@127.0.0.1:{port}/1", default_integrations=False, shutdown_timeout=0
        )
        try:
            took, _ = within(5, lambda: Sentry().finished(check_in(), ok=True, duration=1.0))
            assert took < 0.5
            assert in_flight() >= 1
            within(5, settle)
        finally:
            # No DSN: the client off again; and no integrations, which sentry-sdk installs
            # for the whole process (its RQ one adds trace headers to every job's meta, seen
            # by a later test in this worker).
            sentry_sdk.init(default_integrations=False, shutdown_timeout=0)


def test_a_job_whose_ping_fails_still_runs_every_attempt(caplog: pytest.LogCaptureFixture) -> None:
    """A monitor's failure is said once and never the run's: here on the handler's record."""
    caplog.set_level(logging.WARNING)
    with silent_listener() as port:
        ran: list[JobContext] = []
        job = declare(
            "down.peer",
            every="1m",
            target="inline",
            handler=ran.append,
            monitor=Ping(f"http://127.0.0.1:{port}", timeout=0.5),
        )
        guard = Guard(MemoryStore(), "r1")
        for minute in range(3):
            at = datetime(2026, 12, 2, 9, minute, tzinfo=UTC)
            record = guard.run(job, Occurrence(job=job.name, scheduled_at=at), trigger="schedule")
            assert record.outcome == "completed"
        within(5, settle)
    assert len(ran) == 3
