"""No store password is ever printed, logged or raised: URLs are redacted everywhere."""

from __future__ import annotations

import string
import subprocess
import sys
import time
from datetime import UTC, datetime
from traceback import format_exception

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cron_bridge import ConfigError
from cron_bridge.plumbing.redaction import (
    SECRET_PARAMS,
    escape_log,
    redact_head,
    redact_tail,
    redact_text,
    redact_url,
)
from cron_bridge.run import delivery as worker
from cron_bridge.stores.records import LONG_TEXT_MAX, TRACEBACK_MAX, RunRecord

SECRET = "hunter2hunter2"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@h:6379/0?prefix=a:", "redis://:***@h:6379/0?prefix=a:"),
        ("redis://user:s3cret@h/0", "redis://user:***@h/0"),
        (
            "postgresql://u@h/db?password=s3cret&schema=ops",
            "postgresql://u@h/db?password=***&schema=ops",
        ),
        ("sqlite:///tmp/x.db", "sqlite:///tmp/x.db"),
    ],
)
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


@pytest.mark.extras  # psycopg
def test_a_postgres_store_given_the_wrong_scheme_does_not_echo_the_password() -> None:
    """PostgresStore built directly with a mistyped scheme says so without the password."""
    from cron_bridge.stores.postgres import PostgresStore

    with pytest.raises(ConfigError) as caught:
        PostgresStore(f"postgress://u:{SECRET}@h/db")
    assert SECRET not in str(caught.value)


@pytest.mark.extras  # the Celery adapter
def test_celery_beats_banner_shows_the_store_without_the_password() -> None:
    """celery beat prints its scheduler's info at start: the store URL, redacted."""
    from celery import Celery

    from cron_bridge_celery.scheduler import ClusterScheduler

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
        # Found by a hostile tester: a value that starts as a mask, a quoted value with a
        # space, names inside words, HTTP credentials, a Unicode blank inside a password.
        ("password=***hunter2", "password=***"),
        ('password="hunter two" x', 'password="***" x'),
        (
            "DB_PASSWORD=abc PGPASSWORD=xyz api_token=t1",
            "DB_PASSWORD=*** PGPASSWORD=*** api_token=***",
        ),
        (
            "AWS_SECRET_ACCESS_KEY=AKIA1 client_secret: s2",
            "AWS_SECRET_ACCESS_KEY=*** client_secret: ***",
        ),
        ("Authorization: Bearer abc.def", "Authorization: Bearer ***"),
        ("{'Authorization': 'Basic dXNlcjpw'}", "{'Authorization': 'Basic ***'}"),
        ("http://user:hun\u2028ter2@host/x", "http://user:***@host/x"),
        ("bypass=1 compass: north", "bypass=1 compass: north"),
    ],
)
def test_an_error_or_traceback_is_kept_without_the_passwords_it_shows(
    text: str, shown: str
) -> None:
    assert redact_text(text) == shown


# Linear time on adversarial text. The pattern this replaced took 1.7 s on the first shape at
# 16 KB and 6.8 s at 32 KB (quadratic: about 6,600 s at 1 MB); these take well under a
# second each at 1 MB. Each runs in a child process, so that a regression fails the test
# at the bound instead of holding the run for hours.
ADVERSARIAL = {
    "dots-then-at": '"a." * (N // 2) + "@"',
    "schemes": '"x://" * (N // 4) + "@"',
    "colons-then-at": '":" * N + "@"',
    "one-scheme-then-colons": '"x://" + ":" * N + "@"',
    "scheme-then-word": '"x://a:" + "a" * N',
    "params": '"password=" * (N // 9)',
    "param-then-blanks": '("password" + " " * 20) * (N // 28)',
    "quoted-params": '("token\'" * (N // 6))',
    "at-signs": '"x://" + "a:@" * (N // 3)',
    "names-in-words": '"DB_PASSWORD_" * (N // 12)',
    "name-then-its-word": '("secret" + "_" * 16) * (N // 22)',
    "open-quotes": '"password=\\"" * (N // 10)',
    "schemes-without-value": '"authorization: bearer " * (N // 22)',
    "masked-quotes-mixed": '("password=\'*** x" + " " * 30 + \'"\') * (N // 50)',
    "masked-quote-open": '"password=\\"*** " + "a" * N',
}
# CPU seconds per 1 MB shape (its child's own, so a busy machine does not count: 0.6 s at most
# here); the quadratic needs hours.
LINEAR_BOUND_S = 3.0


def _seconds_in_a_child(code: str, bound: float) -> float:
    """How long ``code`` says it took (it prints the CPU seconds it spent), run in a child
    process that is given ``bound`` plus its start-up, so that a regression fails instead of
    hanging."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=5 * bound + 10,
            check=True,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"did not end within {5 * bound + 10} s: {code}")
    return float(done.stdout)


@pytest.mark.slow  # a child process each, timed on its own
@pytest.mark.parametrize("shape", sorted(ADVERSARIAL))
def test_redaction_takes_linear_time_on_adversarial_text_of_1_mb(shape: str) -> None:
    """redact_text, redact_head and redact_tail on 1 MB shaped to make a backtracking pattern
    go quadratic each finish within LINEAR_BOUND_S."""
    code = (
        "import time\n"
        "from cron_bridge.plumbing.redaction import redact_head, redact_tail, redact_text\n"
        f"N = 1 << 20\ntext = {ADVERSARIAL[shape]}\n"
        "began = time.process_time()\n"
        "redact_text(text); redact_text(text, cut_at_end=True)\n"
        "redact_head(text, 4000); redact_tail(text, 8000)\n"
        "print(time.process_time() - began)\n"
    )
    took = _seconds_in_a_child(code, LINEAR_BOUND_S)
    assert took < LINEAR_BOUND_S, f"{shape}: {took:.2f} s"


@pytest.mark.slow  # a child process, timed on its own
def test_a_record_of_a_huge_hostile_error_costs_what_it_keeps() -> None:
    """A run record made (and read back) from a 4 MB error and traceback shaped against the
    old pattern takes well under a second: cut first, then redacted."""
    code = (
        "import time\nfrom datetime import UTC, datetime\n"
        "from cron_bridge.stores.base import RunRecord\n"
        f"hostile = 'redis://:{SECRET}@db:6379/0 ' + 'a.' * (1 << 21) + '@'\n"
        "began = time.process_time()\n"
        "record = RunRecord(job='j', occurrence_id='j@x', outcome='failed', trigger='timer',"
        " replica='r', started_at=datetime.now(UTC), error=hostile,"
        " traceback='Traceback (most recent call last):\\n' + hostile)\n"
        "assert RunRecord.from_json(record.to_json()) == record\n"
        "print(time.process_time() - began)\n"
    )
    assert _seconds_in_a_child(code, 1.0) < 1.0


def test_a_record_keeps_the_head_of_a_huge_error_and_the_end_of_its_traceback() -> None:
    """What a record keeps of a huge error is its start, of a huge traceback its first line
    and its end, each within its bound and redacted (here: the password of the URL the
    error starts with, and of the one the traceback ends with)."""
    error = f"ConnectionError: redis://:{SECRET}@db:6379/0 " + "x " * 100_000
    trace = (
        "Traceback (most recent call last):\n"
        + '  File "j.py", line 1\n' * 50_000
        + f"ConnectionError: amqp://u:{SECRET}@rabbit// refused\n"
    )
    record = RunRecord(
        job="j",
        occurrence_id="j@x",
        outcome="failed",
        trigger="timer",
        replica="r",
        started_at=datetime.now(UTC),
        error=error,
        traceback=trace,
    )
    assert record.error is not None and record.traceback is not None
    assert len(record.error) <= LONG_TEXT_MAX and len(record.traceback) <= TRACEBACK_MAX
    assert record.error.startswith("ConnectionError: redis://:***@db:6379/0 x x")
    assert record.traceback.startswith("Traceback (most recent call last):\n…\n")
    assert record.traceback.endswith("ConnectionError: amqp://u:***@rabbit// refused\n")
    assert SECRET not in record.error + record.traceback


def test_the_traceback_of_a_huge_error_keeps_its_innermost_frames() -> None:
    """A 10 MiB error leaves its traceback's frames in the record (then the error's start),
    not 8,000 characters of the error."""

    def innermost() -> None:
        raise ValueError(f"redis://:{SECRET}@db " + "x" * (10 << 20))

    try:
        innermost()
    except ValueError as exc:
        trace = "".join(format_exception(exc))
    record = RunRecord(
        job="j",
        occurrence_id="j@x",
        outcome="failed",
        trigger="timer",
        replica="r",
        started_at=datetime.now(UTC),
        traceback=trace,
    )
    assert record.traceback is not None and len(record.traceback) <= TRACEBACK_MAX
    assert record.traceback.startswith("Traceback (most recent call last):\n  File ")
    assert ", in innermost\n" in record.traceback
    assert "\nValueError: redis://:***@db xxx" in record.traceback
    assert record.traceback.endswith("x…") and SECRET not in record.traceback


# What a secret looks like to the properties below: uppercase letters and digits, which the
# text around it never holds; so any of them left in the output is a part of a secret.
_SECRET_CHARS = string.ascii_uppercase + string.digits
_AROUND = string.ascii_lowercase + " \t\n:/@.=&'\",;)}_-+?#*%\x1b"
_secret = st.text(_SECRET_CHARS, min_size=1, max_size=24)
_word = st.text(string.ascii_lowercase + "._-", max_size=8)


@st.composite
def _with_secrets(draw: st.DrawFn) -> str:
    """Text around one to four secrets, each in a URL's user-info or a secret parameter."""
    parts = [draw(st.text(_AROUND, max_size=60))]
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            scheme = draw(st.sampled_from(["redis", "amqp", "postgresql", "x", "rediss+sentinel"]))
            password = draw(_secret)
            if draw(st.booleans()):  # an @ in the password, before the host's
                password += "@" + draw(_secret)
            parts.append(f"{scheme}://{draw(_word)}:{password}@{draw(_word)}")
        else:
            name = draw(st.sampled_from(sorted(SECRET_PARAMS)))
            gap = (
                draw(st.sampled_from(["", "'", '"']))
                + " " * draw(st.integers(0, 3))
                + draw(st.sampled_from("=:"))
                + "\t" * draw(st.integers(0, 2))
                + draw(st.sampled_from(["", "'", '"']))
            )
            name = name.upper() if draw(st.booleans()) else name
            value = draw(_secret)
            quote = gap[-1] if gap[-1] in "'\"" else ""
            if quote and draw(st.booleans()):  # a quoted passphrase: words and blanks
                value = f"{value} {draw(_secret)}{quote}"
            parts.append(" " + name.lower() + gap + value)
        parts.append(draw(st.text(_AROUND, max_size=60)))
    return "".join(parts)


def _leaks(text: str) -> list[str]:
    return [c for c in text if c in _SECRET_CHARS]


@settings(max_examples=400, deadline=None)
@given(_with_secrets())
def test_no_password_in_a_user_info_or_a_secret_parameter_survives(text: str) -> None:
    """Whatever surrounds them, every password in a URL's user-info and every secret
    parameter's value is masked whole."""
    assert not _leaks(redact_text(text)), (text, redact_text(text))


@settings(max_examples=400, deadline=None)
@given(_with_secrets(), st.integers(1, 200))
def test_a_cut_text_never_keeps_a_part_of_a_password(text: str, limit: int) -> None:
    """Cut anywhere, at its head or its tail (splitting a URL, a password or the name that
    marks it), what redact_head and redact_tail keep holds no part of any password, and no
    more than ``limit`` characters."""
    for kept in (redact_head(text, limit), redact_tail(text, limit)):
        assert len(kept) <= limit and not _leaks(kept), (text, limit, kept)


@settings(max_examples=60, deadline=None)
@given(st.text(_AROUND, min_size=1, max_size=8), st.booleans())
def test_redaction_of_any_repeated_pattern_is_fast(unit: str, at_end: bool) -> None:
    """Any short pattern repeated to 64 KB (what a backtracking pattern is slow on) is
    redacted within a quarter of a second of CPU (the old pattern took about 7 s on ``a.``):
    the thread's own time, whatever else the machine is doing."""
    text = unit * ((1 << 16) // len(unit)) + ("@" if at_end else "")
    began = time.thread_time()
    redact_text(text)
    assert time.thread_time() - began < 0.25
