"""A beat hosted by a worker reads each option from the host's settings, else the environment
variable ``cron-bridge beat`` reads, and refuses a bad value with one line before it starts."""

from __future__ import annotations

import logging
import socket
from typing import Any

import pytest

from cron_bridge import Beat
from cron_bridge.cli.hosted import HostedEndpoints, HostedOptions
from cron_bridge.errors import ConfigError
from cron_bridge.stores import MemoryStore


def test_a_setting_wins_over_the_environment_and_the_defaults_are_the_commands() -> None:
    settings = {"cron_bridge_store": "memory://", "cron_bridge_http": ""}
    environ = {
        "CRON_BRIDGE_STORE": "sqlite:///other.db",
        "CRON_BRIDGE_HTTP": "127.0.0.1:8081",
        "CRON_BRIDGE_REPLICA_ID": "worker-1",
    }
    options = HostedOptions.read(settings.get, environ)
    assert options.store == "memory://"
    assert options.http == "127.0.0.1:8081", "an empty setting is no setting"
    assert options.replica_id == "worker-1"
    assert (options.shutdown_timeout, options.forwarded_allow_ips) == ("25s", "127.0.0.1")
    assert HostedOptions.read(None, {}) == HostedOptions()
    assert HostedOptions.read(None, {"CRON_BRIDGE_TAKE_OVER": "all"}).take_over == "all"
    with pytest.raises(ConfigError, match=r"cron_bridge_take_over \(CRON_BRIDGE_TAKE_OVER\)"):
        HostedOptions.read({"cron_bridge_take_over": "plain"}.get, {})


def test_a_setting_that_is_not_text_names_itself_and_hides_a_secret() -> None:
    with pytest.raises(ConfigError) as raised:
        HostedOptions.read({"cron_bridge_secret": 12345678901234567890}.get, {})
    assert "cron_bridge_secret" in str(raised.value)
    assert "1234567890" not in str(raised.value)


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"store": "mysql://db/x"}, "unknown store scheme"),
        ({"http": "127.0.0.1:99999"}, "CRON_BRIDGE_HTTP"),
        ({"http": "127.0.0.1:8081"}, "secret"),
        ({"http": "127.0.0.1:8081", "secret": "changeme"}, "placeholder"),
        ({"metrics": "nowhere"}, "CRON_BRIDGE_METRICS"),
        ({"monitor": "statsd"}, "monitor"),
        ({"shutdown_timeout": "banana"}, "CRON_BRIDGE_SHUTDOWN_TIMEOUT"),
        ({"shutdown_timeout": "-5s"}, "CRON_BRIDGE_SHUTDOWN_TIMEOUT"),
        ({"replica_id": "evil\n[CRITICAL] forged"}, "replica_id"),
        ({"replica_id": "x" * 10_000}, "replica_id"),
        ({"take_over": "everything"}, "CRON_BRIDGE_TAKE_OVER"),
    ],
)
def test_a_bad_value_is_one_line_and_exit_2(
    values: dict[str, Any], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        HostedOptions(**values).check()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and len(err) < 400, err


def test_good_values_pass() -> None:
    HostedOptions(
        store="memory://",
        http="127.0.0.1:8081",
        secret="a-long-enough-secret-for-the-test",
        metrics="127.0.0.1:9100",
    ).check()


def test_a_replica_id_that_would_forge_a_log_line_is_refused_by_every_beat() -> None:
    with pytest.raises(ConfigError, match="replica_id"):
        Beat(MemoryStore(), [], replica_id="beat-1\n2026-01-01 CRITICAL forged")
    assert Beat(MemoryStore(), [], replica_id="cron-bridge-beat-7f9c4d-x2k9q").replica_id


def test_an_endpoint_whose_port_is_taken_is_an_error_and_the_beat_runs_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two workers on one host with one CRON_BRIDGE_HTTP: the second cannot listen, says so
    at ERROR, and its beat still claims (a worker's beat dead for its probe is worse)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        options = HostedOptions(http=f"127.0.0.1:{port}", secret="a-long-enough-secret-for-it")
        store = MemoryStore()
        beat = Beat(store, [])
        with caplog.at_level(logging.ERROR):
            endpoints = HostedEndpoints(beat, store, options)
        endpoints.shutdown()
    assert any("the beat runs on" in r.getMessage() for r in caplog.records), caplog.records
