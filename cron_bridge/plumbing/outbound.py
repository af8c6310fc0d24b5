"""Text that leaves the process (a log line, a terminal, a page), made safe in one place.

What a job raises and what a record holds is chosen by whoever can make a job fail or write
to the store. Before it is logged, printed or served it goes through ``sanitize``: redacted
(no password of a URL's user-info or of a secret parameter), bounded (a 10 MiB message is
not 10 MiB of log), and with nothing a terminal or a log reader would act on: control
characters (C0, DEL, C1: so no ANSI CSI or OSC sequence, no bell), bidirectional overrides,
line separators and lone surrogates are written as escapes (``\\x1b``, ``\\u202e``), and a
newline either is too (one line: a log line, a table cell) or starts a line that cannot be
taken for one of the process's own (``logged_traceback`` indents every line).

Cut before it is redacted, so what it costs is bounded by ``limit``, not by the text.
"""

from __future__ import annotations

import logging
from traceback import format_exception
from typing import Literal

from cron_bridge.plumbing.redaction import redact_head, redact_tail

__all__ = [
    "LINE_MAX",
    "TRACEBACK_MAX",
    "LogFormatter",
    "described",
    "logged_traceback",
    "sanitize",
]

LINE_MAX = 2000  # a message in a log line or a table cell
TRACEBACK_MAX = 8000  # a traceback in a log record or a terminal: its innermost frames
LOG_MESSAGE_MAX = 16000  # a whole log message: a line and the traceback it carries
CUT = "…"
TRACEBACK_INDENT = "    | "


def _escape_table(*, lines: bool) -> dict[int, str]:
    table = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7F, 0xA0)]}
    table |= {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}
    # Bidirectional marks, embeddings, overrides and isolates (text shown in another order
    # than it is), the Unicode line and paragraph separators, and lone surrogates (which no
    # encoding writes: a log handler would fail on them).
    others = [
        0x061C,
        0x200E,
        0x200F,
        0x2028,
        0x2029,
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
        *range(0xD800, 0xE000),
    ]
    table |= {c: f"\\u{c:04x}" for c in others}
    if lines:
        del table[ord("\n")]
    return table


_ONE_LINE = _escape_table(lines=False)
_LINES = _escape_table(lines=True)


def sanitize(
    text: object,
    limit: int = LINE_MAX,
    *,
    lines: bool = False,
    keep: Literal["head", "tail"] = "head",
) -> str:
    """``text`` as it may leave the process: redacted, at most ``limit`` characters, and with
    its control characters written as escapes.

    Args:
        text: what a job, a record or a peer said (anything: ``str()`` of it is shown).
        limit: the most characters returned; a cut is marked ``…``.
        lines: keep newlines (a traceback shown as such); else they are written ``\\n``.
        keep: which end of a long text is kept: its start (a message) or its end (a
            traceback's innermost frames and error).
    """
    text = text if isinstance(text, str) else str(text)
    if limit < 2:
        raise ValueError(f"sanitize: limit must be 2 or more, got {limit!r}")
    head = keep == "head"
    cut = len(text) > limit
    redacted = redact_head(text, limit) if head else redact_tail(text, limit)
    shown = redacted.translate(_LINES if lines else _ONE_LINE)
    if not cut and len(shown) <= limit:
        return shown
    # Cut again after escaping (an escape is up to six characters), which is safe: what is
    # cut now is redacted already.
    room = limit - len(CUT)
    if head:
        return shown[:room] + CUT
    return shown if shown.startswith(CUT) and len(shown) <= limit else CUT + shown[-room:]


def described(error: BaseException) -> str:
    """``error`` as one says it: ``TypeName: its text``, whatever its ``__str__`` does (one
    that raises, or returns something other than text, is said as such; not sanitised yet)."""
    name = type(error).__name__
    try:
        said = str(error)
    except Exception as exc:  # noqa: BLE001 - a job's exception type is anyone's code
        return f"{name}: <its text could not be read: {type(exc).__name__}>"
    return f"{name}: {said}"


def logged_traceback(failure: BaseException | str, limit: int = TRACEBACK_MAX) -> str:
    """A traceback as a log record carries it, in its message rather than as ``exc_info``
    (which every handler, and sentry-sdk's logging integration, would format raw): sanitised,
    its end kept, and every line indented so that none, whatever the error says, reads as one
    of the process's own log lines.

    Args:
        failure: the exception, or its traceback already formatted (a run record's).
        limit: the most characters of the traceback kept (the indent not counted).
    """
    text = failure if isinstance(failure, str) else "".join(format_exception(failure))
    kept = sanitize(text.rstrip("\n"), limit, lines=True, keep="tail")
    return "\n".join(TRACEBACK_INDENT + line for line in kept.split("\n"))


class LogFormatter(logging.Formatter):
    """The formatter of the processes the CLI runs (a beat): every record's message
    sanitised, its continuation lines indented, an exception or stack as ``logged_traceback``.

    A second line of defence, for what other libraries log: cron-bridge's own records of a
    job's failure are sanitised where they are made, which is what sentry-sdk's logging
    integration reads (it sees a record before any handler formats it).
    """

    def format(self, record: logging.LogRecord) -> str:
        kept = sanitize(record.getMessage(), LOG_MESSAGE_MAX, lines=True)
        first, *rest = kept.split("\n")
        record.message = "\n".join(
            [
                first,
                *(
                    line if line.startswith(TRACEBACK_INDENT) else TRACEBACK_INDENT + line
                    for line in rest
                ),
            ]
        )
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        text = self.formatMessage(record)
        if record.exc_info is not None and record.exc_info[1] is not None:
            text += "\n" + logged_traceback(record.exc_info[1])
        if record.stack_info:
            text += "\n" + logged_traceback(record.stack_info)
        return text
