"""No store password is ever printed, logged or raised: URLs are redacted everywhere."""

from __future__ import annotations

import pytest
from celery import Celery

from cron_bridge import ConfigError
from cron_bridge.redaction import escape_log, redact_text, redact_url
from cron_bridge.run import delivery as worker
from cron_bridge.stores.postgres import PostgresStore
from cron_bridge_celery.scheduler import ClusterScheduler

SECRET = "hunter2hunter2"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@h:6379/0?prefix=a:", "redis://:***@h:6379/0?prefix=a:"),
        ("redis://user:s3cret@h/0", "redis://user:***@h/0"),
        ("postgresql://u@h/db?password=s3cret&schema=ops", "postgresql://u@h/db?password=***&schema=ops"),
        ("sqlite:///tmp/x.db", "sqlite:///tmp/x.db"),
    ],
)  # fmt: skip
def test_a_url_is_printed_without_its_password(url: str, shown: str) -> None:
    """The user-info password and password= parameters are masked; the rest stays."""
    assert redact_url(url) == shown
    assert "s3cret" not in redact_url(url)


def test_a_worker_whose_store_url_is_mistyped_raises_without_the_password() -> None:
    """The error a worker raises into its queue library's logs names the URL, redacted."""
    worker.configure(f"redis://:{SECRET}@127.0.0.1:99999/0")
    try:
        with pytest.raises(ConfigError) as caught:
            worker.worker_store()
    finally:
        worker.configure(None)
    assert SECRET not in str(caught.value) and "***" in str(caught.value)


def test_a_postgres_store_given_the_wrong_scheme_does_not_echo_the_password() -> None:
    """PostgresStore built directly with a mistyped scheme says so without the password."""
    with pytest.raises(ConfigError) as caught:
        PostgresStore(f"postgress://u:{SECRET}@h/db")
    assert SECRET not in str(caught.value)


def test_celery_beats_banner_shows_the_store_without_the_password() -> None:
    """celery beat prints its scheduler's info at start: the store URL, redacted."""
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.cron_bridge_store = f"redis://user:{SECRET}@127.0.0.1:6379/0?prefix=x:"
    info = ClusterScheduler(app, lazy=True).info
    assert SECRET not in info and "redis://user:***@127.0.0.1:6379/0" in info


def test_log_lines_cannot_be_forged_with_control_characters() -> None:
    """A request line with CR/LF and escape sequences is logged on one line, escaped."""
    line = escape_log("GET /_scheduler/x\r\n2026-01-01 INFO forged\x1b[31m HTTP/1.1")
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert "forged" in line and "\\r\\n" in line


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("ConnectionError: redis://:hunter2@db:6379/0", "ConnectionError: redis://:***@db:6379/0"),
        ("amqp://guest:guest@rabbit// refused", "amqp://guest:***@rabbit// refused"),
        (
            "postgresql://u@h/db?password=abc&sslmode=x",
            "postgresql://u@h/db?password=***&sslmode=x",
        ),
        ("dsn='host=x password=s3cret user=u'", "dsn='host=x password=*** user=u'"),
        ('{"token": "abc123", "n": 1}', '{"token": "***", "n": 1}'),
        ("redis://user@host:6379 and passwordless", "redis://user@host:6379 and passwordless"),
        ("KeyError: 'secret'", "KeyError: 'secret'"),
    ],
)
def test_an_error_or_traceback_is_kept_without_the_passwords_it_shows(
    text: str, shown: str
) -> None:
    assert redact_text(text) == shown
