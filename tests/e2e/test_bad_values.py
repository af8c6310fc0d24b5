"""Every bad value is one line naming the option and the value: exit 2 from the CLI,
``ConfigError`` from Python; never a traceback, never the store's password."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cron_bridge import Backoff, ConfigError, cluster_task
from cron_bridge.jobs import declare
from cron_bridge.stores import store_from_url
from tests.e2e.processes import cli, command_env

APP = "tests.apps.cli_app"
SECRET_URL = "redis://:hunter2hunter2@127.0.0.1:{port}/0"


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"every": float("nan")}, "every=nan"),
        ({"every": float("inf")}, "every=inf"),
        ({"every": 10**30}, "every=1000000000000000000000000000000"),
        ({"every": "9999999999999999999999d"}, "every='9999999999999999999999d'"),
        ({"every": "5m", "misfire_grace": float("nan")}, "misfire_grace=nan"),
        ({"every": "5m", "lock_ttl": float("-inf")}, "lock_ttl=-inf"),
        ({"every": "5m", "timeout": "1e400s"}, "timeout='1e400s'"),
    ],
)
def test_a_declaration_with_a_bad_number_is_a_config_error_naming_it(
    options: dict[str, Any], says: str
) -> None:
    """NaN, infinities and durations beyond any calendar: ConfigError naming job and option."""
    with pytest.raises(ConfigError) as caught:
        declare("billing.close", target="inline", handler=lambda ctx: None, **options)
    assert "job 'billing.close'" in str(caught.value) and says in str(caught.value)

    with pytest.raises(ConfigError, match=r"billing\.close"):
        cluster_task(name="billing.close", target="inline", **options)(lambda ctx: None)


def test_a_backoff_of_nan_is_refused() -> None:
    """Backoff built directly with NaN or inf is a ConfigError, not a silent wait of NaN."""
    for base, cap in ((float("nan"), None), (1.0, float("inf"))):
        with pytest.raises(ConfigError, match="backoff"):
            Backoff(kind="exponential", base=base, max=cap)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis://:hunter2hunter2@127.0.0.1:99999/0", "Port out of range"),
        ("redis://:hunter2hunter2@127.0.0.1:http/0", "store="),
        ("redis://:hunter2hunter2@[::1/0", "Invalid IPv6"),
        ("redis://:hunter2hunter2@127.0.0.1/0?connect_timeout=-1", "connect_timeout='-1'"),
        ("redis://:hunter2hunter2@127.0.0.1/0?connect_timeout=nan", "connect_timeout='nan'"),
        ("redis://:hunter2hunter2@127.0.0.1/0?history_limit=0", "history_limit='0'"),
        ("postgresql://u:hunter2hunter2@h/db?pool_size=100000", "pool_size='100000'"),
        ("mysql://u:hunter2hunter2@h/db", "unknown store scheme"),
        ("redis://:hunter2hunter2@h/0?bogus=1", "bogus='1'"),
    ],
)
def test_a_malformed_store_url_is_a_config_error_without_the_password(url: str, says: str) -> None:
    """Bad ports, broken IPv6 literals, negative or NaN timeouts, unknown schemes and options:
    ConfigError naming the option, and the password is never in it."""
    with pytest.raises(ConfigError) as caught:
        store_from_url(url)
    assert says in str(caught.value)
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["beat", "-A", APP, "--http", "127.0.0.1:99999", "--secret", "x" * 32], "--http"),
        (["beat", "-A", APP, "--http", "127.0.0.1:0", "--secret", "x" * 32], "65535"),
        (["beat", "-A", APP, "--http", "[::1:8080", "--secret", "x" * 32], "IPv6"),
        (["beat", "-A", APP, "--metrics", "127.0.0.1:70000"], "--metrics"),
        (["beat", "-A", APP, "--shutdown-timeout", "nan"], "shutdown_timeout='nan'"),
        (["beat", "-A", APP, "--shutdown-timeout", "inf"], "shutdown_timeout='inf'"),
        (["beat", "-A", APP, "--take-over", "plain\n" + "x" * 5000], "--take-over='plain\\n"),
        (["history", "x", "-n", "100000000000000000000"], "-n"),
        (["history", "x", "--audit", "--since", "99999999999999d"], "since="),
        (["demo", "--duration", "nan"], "--duration"),
        (["list", "-A", APP, "--store", SECRET_URL.format(port=99999)], "Port out of range"),
        (["list", "-A", APP, "--store", "redis://:hunter2hunter2@[::1/0"], "Invalid IPv6"),
        (
            [
                "run",
                "cache.warm",
                "-A",
                APP,
                "--store",
                "redis://:hunter2hunter2@127.0.0.1/0?connect_timeout=-5",
            ],
            "connect_timeout",
        ),
    ],
)
def test_every_bad_value_on_the_command_line_is_one_line_and_exit_2(
    tmp_path: Path, args: list[str], says: str
) -> None:
    """Ports out of range, NaN and huge durations, huge -n, malformed store URLs: one line
    that names the option, exit 2, no traceback, no password."""
    env = command_env(CRON_BRIDGE_STORE=f"sqlite:///{tmp_path}/s.db")
    done = cli(*args, env=env, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert "hunter2" not in done.stderr + done.stdout
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) <= 4, done.stderr  # click's usage errors come with a usage line


def test_a_redis_that_needs_a_password_gets_an_answer_that_says_so(tmp_path: Path) -> None:
    """redis-py's "HELLO must be called with the client already authenticated" becomes one
    line that says the server needs a password and how to give it; a wrong one says so too."""
    from tests.conftest import unavailable
    from tests.servers import RedisServer, ServerUnavailable

    server = RedisServer(extra=["--requirepass", "sekrit"])
    try:
        server.start()
    except ServerUnavailable as exc:
        unavailable("redis-server", exc)
    try:
        port = server.port
        for url, says in (
            (
                f"redis://127.0.0.1:{port}/0",
                "the server needs a password, which goes in the "
                "URL before the host as :PASSWORD@ or USER:PASSWORD@",
            ),
            (f"redis://:wrong@127.0.0.1:{port}/0", "the server refused the user or password"),
        ):
            done = cli("history", "x", "--store", url, env=command_env(), cwd=tmp_path)
            assert done.returncode == 2, done.stdout
            (line,) = done.stderr.strip().splitlines()
            assert says in line and "wrong" not in line, line
        ok = cli(
            "history",
            "x",
            "--store",
            f"redis://:sekrit@127.0.0.1:{port}/0",
            env=command_env(),
            cwd=tmp_path,
        )
        assert "needs a password" not in ok.stderr, ok.stderr
    finally:
        server.remove()
