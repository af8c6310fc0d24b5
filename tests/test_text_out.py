"""Text that leaves the process goes through one sanitiser: redacted, bounded, and without a
control character a terminal or a log reader would act on."""

from __future__ import annotations

import logging
import unicodedata
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cron_bridge import JobContext, declare
from cron_bridge.jobs import Occurrence
from cron_bridge.plumbing.keys import lock_key
from cron_bridge.plumbing.outbound import LogFormatter, logged_traceback, sanitize
from cron_bridge.run.guard import Guard
from cron_bridge.stores import MemoryStore

SECRET = "hunter2hunter2"
BIDI = {0x061C, 0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}


def unsafe(text: str, *, lines: bool = False) -> list[str]:
    """The characters of ``text`` a terminal or a log reader would act on."""
    return [
        c
        for c in text
        if (unicodedata.category(c) in ("Cc", "Cs") and not (lines and c == "\n")) or ord(c) in BIDI
    ]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("clear\x1b[2Jscreen", "clear\\x1b[2Jscreen"),
        ("\x1b]0;owned\x07title", "\\x1b]0;owned\\x07title"),
        ("\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\", "\\x1b]8;;http://evil\\x1b\\link"),
        ("c1 \x9b31m csi", "c1 \\x9b31m csi"),
        ("nul\x00del\x7f", "nul\\x00del\\x7f"),
        ("over\rwrite", "over\\rwrite"),
        ("abc\u202edcba", "abc\\u202edcba"),
        ("line\u2028sep", "line\\u2028sep"),
        ("lone \udcff surrogate", "lone \\udcff surrogate"),
        ("a\nb", "a\\nb"),
    ],
)
def test_every_control_character_is_written_as_an_escape(text: str, shown: str) -> None:
    """C0, DEL, C1, an ESC starting a CSI or OSC sequence, bidi overrides, line separators and
    lone surrogates become visible escapes; the rest of the text is kept."""
    out = sanitize(text)
    assert out.startswith(shown) and not unsafe(out)
    out.encode("utf-8")  # a lone surrogate would not encode, failing a log handler


def test_lines_keep_their_newlines_and_nothing_else() -> None:
    """A traceback shown as lines keeps its newlines; a CR, an ESC or a tab in it is escaped."""
    assert sanitize("one\ntwo\r\n\x1b[2J\tthree", lines=True) == "one\ntwo\\r\n\\x1b[2J\\tthree"


def test_a_long_text_is_cut_to_its_limit_after_redaction() -> None:
    """At most ``limit`` characters, the cut marked; the head of a message, the end of a
    traceback; the password masked either way."""
    text = f"redis://:{SECRET}@h/0 " + "\x1b" * 10_000 + f" amqp://u:{SECRET}@r//"
    head, tail = sanitize(text, 100), sanitize(text, 100, lines=True, keep="tail")
    assert len(head) == 100 and head.startswith("redis://:***@h/0 \\x1b") and head.endswith("…")
    # The tail falls in a word of 10,000 characters, which may be the rest of a secret: the
    # words near the cut are dropped.
    assert tail == "… amqp://u:***@r//"
    assert SECRET not in head + tail


@settings(max_examples=300, deadline=None)
@given(
    st.text(st.characters(codec=None, exclude_categories=()), max_size=300),
    st.integers(2, 400),
    st.booleans(),
    st.sampled_from(["head", "tail"]),
)
def test_whatever_the_text_what_leaves_is_bounded_and_inert(
    text: str, limit: int, lines: bool, keep: str
) -> None:
    """Any text (surrogates, C1, bidi included): no more than ``limit`` characters, encodable
    as UTF-8, and no control character but a kept newline."""
    out = sanitize(text, limit, lines=lines, keep=keep)  # type: ignore[arg-type]
    assert len(out) <= limit
    assert not unsafe(out, lines=lines), out
    out.encode("utf-8")


HOSTILE = (
    f"cannot reach redis://:{SECRET}@db:6379/0\n"
    "2026-01-01 00:00:00,000 INFO cron_bridge.beat.replica: forged line\x1b[2J\x1b]0;owned\x07"
    + "x"
    * (10 << 20)
)


def hostile(ctx: JobContext) -> None:
    raise ValueError(HOSTILE)


def test_a_failed_run_is_logged_redacted_bounded_and_without_a_forged_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A job raising a 10 MiB ValueError that holds a password, a newline followed by what
    looks like a beat's log line, and escape sequences: each log record of its attempts
    (a WARNING while attempts remain, the last an ERROR with its traceback) holds no password
    and no control character, is some KB, carries no raw exception (exc_info), and every
    line after its first is indented as a traceback's."""
    job = declare("hostile.job", every="1s", target="inline", handler=hostile, attempts=2)
    occurrence = Occurrence(job=job.name, scheduled_at=datetime(2026, 11, 30, 12, tzinfo=UTC))
    guard = Guard(MemoryStore(), "worker-a")
    with caplog.at_level(logging.INFO, logger="cron_bridge"):
        guard.run(job, occurrence, trigger="queue", attempt=1)
        guard.run(job, occurrence, trigger="queue", attempt=2)
    failed = [r for r in caplog.records if r.getMessage().startswith("failed ")]
    assert [r.levelno for r in failed] == [logging.WARNING, logging.ERROR]
    for record in caplog.records:
        message = record.getMessage()
        assert SECRET not in message and record.exc_info is None
        assert len(message) < 16_000, len(message)
        rest = message.split("\n")[1:]
        assert not unsafe(message, lines=True)
        assert all(line.startswith("    | ") for line in rest), message[:2000]
    assert "redis://:***@db:6379/0\\n2026-01-01" in failed[0].getMessage()  # one line
    assert "    | ValueError: cannot reach redis://:***@db" in failed[1].getMessage()
    assert "in hostile" in failed[1].getMessage()  # the handler's frame


def test_the_log_formatter_makes_any_record_safe() -> None:
    """What another library logs, with a message or an exception holding a password, a
    forged line and escapes, comes out of the CLI's formatter redacted and indented."""
    formatter = LogFormatter("%(levelname)s %(name)s: %(message)s")
    try:
        raise RuntimeError(HOSTILE[:300])
    except RuntimeError as exc:
        record = logging.LogRecord(
            "lib",
            logging.ERROR,
            __file__,
            1,
            "said %s",
            (HOSTILE,),
            (type(exc), exc, exc.__traceback__),
        )
    out = formatter.format(record)
    first, *rest = out.split("\n")
    assert first.startswith("ERROR lib: said cannot reach redis://:***@db:6379/0")
    assert rest and all(line.startswith("    | ") for line in rest)
    assert SECRET not in out and not unsafe(out, lines=True) and len(out) < 30_000


def test_a_logged_traceback_keeps_its_end_indented() -> None:
    """An exception's traceback as logged: its innermost frame and error kept, each line
    indented."""
    try:
        raise ValueError("a\nb")
    except ValueError as exc:
        text = logged_traceback(exc)
    assert text.splitlines()[0] == "    | Traceback (most recent call last):"
    assert text.splitlines()[-2:] == ["    | ValueError: a", "    | b"]


class _Unsayable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


class _NotText(Exception):
    def __str__(self) -> str:
        return 42  # type: ignore[return-value]


def _raises(error: BaseException) -> None:
    raise error


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (_Unsayable(), "_Unsayable: <its text could not be read: RuntimeError>"),
        (_NotText(), "_NotText: <its text could not be read: TypeError>"),
        (SystemExit(3), "SystemExit: 3"),
        (KeyboardInterrupt(), "KeyboardInterrupt: "),
    ],
)
def test_a_run_whose_exception_cannot_be_said_or_exits_is_recorded(
    error: BaseException, said: str
) -> None:
    """A handler's exception whose ``__str__`` raises or returns no text, or a handler that
    calls ``sys.exit()`` or raises KeyboardInterrupt, is recorded failed with what can be said
    of it (before, it left no record and the lock's release to chance); an exit goes on as
    raised once recorded."""
    store = MemoryStore()
    job = declare("odd.job", every="1s", target="inline", handler=lambda ctx: _raises(error))
    occurrence = Occurrence(job=job.name, scheduled_at=datetime(2026, 11, 30, 12, tzinfo=UTC))
    guard = Guard(store, "worker-a")
    if isinstance(error, Exception):
        record = guard.run(job, occurrence, trigger="schedule", attempt=1)
        assert record.outcome == "failed"
    else:
        with pytest.raises(type(error)):
            guard.run(job, occurrence, trigger="schedule", attempt=1)
    (stored,) = store.history(job.name, 5)
    assert (stored.outcome, stored.error) == ("failed", said)
    assert store.holder(lock_key(job.name)) is None  # its lock is free
