"""Every message a monitor's option or ping gives shows no credential: the ping warning,
a mistyped ping URL, a DSN where a monitor's name goes (option, ``--monitor``, environment)."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from cron_bridge import ConfigError, Every, Ping
from cron_bridge.monitors import base, default_monitor, resolve, set_default
from cron_bridge.monitors.calls import settle

SECRET = "hunter2secret"
DSN = f"https://{SECRET}@o0.ingest.example.invalid/42"


def _said(exc: pytest.ExceptionInfo[BaseException]) -> str:
    return str(exc.value)


def test_a_mistyped_ping_url_is_refused_without_its_password() -> None:
    """A Ping URL that is not http(s) names the job and option, and masks its password."""
    with pytest.raises(ConfigError) as refused:
        Ping(f"htps://user:{SECRET}@hc.example.invalid/ping/x").check(
            "billing.close", Every("1m"), timedelta(seconds=30), None
        )
    assert "billing.close" in _said(refused) and "monitor" in _said(refused)
    assert SECRET not in _said(refused)


@pytest.mark.parametrize("value", [DSN, f"redis://:{SECRET}@127.0.0.1/0", f"x{SECRET}@y:z"])
def test_a_dsn_given_where_a_monitor_name_goes_is_refused_masked(value: str) -> None:
    """The option and ``--monitor`` (``set_default``) refuse a DSN without echoing its key."""
    with pytest.raises(ConfigError) as refused:
        resolve(value, job="billing.close")
    assert SECRET not in _said(refused)
    with pytest.raises(ConfigError) as refused:
        set_default(value)
    assert SECRET not in _said(refused)


def test_a_dsn_in_the_environment_is_warned_about_masked(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``CRON_BRIDGE_MONITOR`` holding a DSN: no monitor, and a warning without the key."""
    monkeypatch.setenv("CRON_BRIDGE_MONITOR", DSN)
    with caplog.at_level(logging.WARNING):
        assert default_monitor() is None
    assert "CRON_BRIDGE_MONITOR" in caplog.text
    assert SECRET not in caplog.text


def test_a_failed_ping_is_warned_about_by_host_without_credentials(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A ping to a port nobody listens on fails; the warning names the host, not the
    user-info of the URL."""
    from cron_bridge.monitors import CheckIn

    ping = Ping(f"http://user:{SECRET}@127.0.0.1:9/ping/abc", timeout=2)
    check_in = CheckIn(
        job="billing.close",
        schedule=Every("1m"),
        misfire_grace=timedelta(seconds=30),
        timeout=None,
        occurrence_id="billing.close@2026-01-01T00:00:00.000Z",
        attempt=1,
        replica="r1",
    )
    with caplog.at_level(logging.WARNING):
        ping.started(check_in)
        assert settle(5)
    assert "127.0.0.1:9" in caplog.text
    assert SECRET not in caplog.text


@pytest.mark.parametrize("cut", [10, 30, 199, 200, 201, 250, 799, 800, 801])
def test_masked_never_keeps_part_of_a_password_it_cut(cut: int) -> None:
    """However long the text before it, a URL's password is never shown in part."""
    text = "x" * cut + f"redis://:{SECRET}{SECRET}@127.0.0.1/0"
    shown = base.masked(text)
    assert len(shown) <= base.SHOWN + 1
    for start in range(len(SECRET) - 3):
        assert SECRET[start : start + 4] not in shown
