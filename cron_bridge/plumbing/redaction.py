"""Text that is printed or logged, made safe: URLs without passwords, request lines without
control characters.

The text redacted here is a job's error message or traceback, which anyone able to make a
job fail chooses: every pass is linear in what it reads (no pattern that can backtrack), and
a long text is cut before it is redacted (``redact_head``, ``redact_tail``), so what it costs
is bounded by what is kept, not by what was raised.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit, urlunsplit

__all__ = [
    "SECRET_PARAMS",
    "escape_log",
    "is_secret_name",
    "redact_head",
    "redact_tail",
    "redact_text",
    "redact_url",
]

SECRET_PARAMS = {
    "password",
    "pass",
    "passwd",
    "secret",
    "token",
    "sslpassword",
    "sentinel_password",
    "authorization",
}
# Names that mark a secret wherever they are in a name (``DB_PASSWORD``, ``PGPASSWORD``,
# ``api_token``, ``client_secret``, ``AWS_SECRET_ACCESS_KEY``); the others only as a word.
_PART_NAMES = (
    "password",
    "passwd",
    "secret",
    "token",
    "api_key",
    "apikey",
    "access_key",
    "private_key",
    "credential",
)


def is_secret_name(name: str) -> bool:
    """Whether a parameter called ``name`` holds a secret (its value is never shown)."""
    lowered = name.lower()
    return lowered in SECRET_PARAMS or any(part in lowered for part in _PART_NAMES)


def redact_url(url: str) -> str:
    """``url`` with its password (in the user-info or a ``password=`` parameter) as ``***``,
    safe to print and log. Never raises: text that is not a URL comes back masked whole."""
    try:
        parts = urlsplit(str(url))
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, host = netloc.rpartition("@")
            user, has_password, _ = userinfo.partition(":")
            netloc = f"{user}:***@{host}" if has_password else f"{userinfo}@{host}"
        query = "&".join(
            f"{key}=***" if is_secret_name(key) else f"{key}={value}"
            for key, value in parse_qsl(parts.query, keep_blank_values=True)
        )
        if netloc == parts.netloc and query == parts.query:
            return str(url)  # nothing to hide (and sqlite:/// keeps its slashes)
        return urlunsplit(parts._replace(netloc=netloc, query=query))
    except ValueError:
        return "***"


# A secret parameter written ``name=value`` or ``name: value`` (a query string, a DSN, a repr,
# JSON, an environment, a header). Each part is one character class, the gap bounded and on
# one line, and no two neighbours can match the same character: a failed match gives up in a
# bounded number of steps. The name is one of _PART_NAMES anywhere in a word, with what
# follows it in that word (``secret_access_key``), or ``pass`` and ``authorization`` at a
# word's start; an HTTP scheme (``Bearer``) is kept before the value, which is masked up to a
# delimiter. A secret never spans a line break (``redact_tail`` relies on it).
# (The lookahead for a name's first letter lets the engine skip to where a name can start.)
_FIRST = "".join(sorted({name[0] for name in ("pass", "authorization", *_PART_NAMES)}))
_NAME = r"(?<![a-z0-9])(?:pass|authorization)|(?:" + "|".join(_PART_NAMES) + r")[a-z0-9_-]{0,16}"
_GAP = r"['\"]?[ \t]{0,16}[=:][ \t]{0,16}"
_PARAM = re.compile(
    rf"(?i)(?=[{_FIRST}])({_NAME})({_GAP}['\"]?(?:(?:bearer|basic|digest|token)[ \t]{{1,4}})?)"
    r"(?!\*\*\*(?![^\s&'\",;)}]))[^\s&'\",;)}]+"
)
# Then the rest of a quoted value that holds a blank (``password="correct horse"``), up to its
# closing quote on its line. Only the masked start is taken and the rest looked at (possessive,
# so a quote that does not close costs one pass): a rest may hold the name of the next secret,
# when quotes do not pair up as a hostile text has them, and that one's rest is dropped too.
_QUOTED = re.compile(
    rf"(?i)(?=[{_FIRST}])(?:{_NAME})['\"]?[ \t]{{0,16}}[=:][ \t]{{0,16}}(['\"])"
    r"(?:(?:bearer|basic|digest|token)[ \t]{1,4})?\*\*\*(?=([^'\"\n]*+))"
)


def _drop_quoted_rests(text: str, cut_at_end: bool) -> str:
    # A rest ends at its closing quote, or at the end of a text cut inside it.
    kept, done = [], 0
    for found in _QUOTED.finditer(text):
        quote, rest = found.groups()
        after = found.end() + len(rest)
        closed = text[after : after + 1] == quote or (cut_at_end and after == len(text))
        if rest and closed:
            kept.append(text[done : found.end()])
            done = max(done, after)
    return "".join([*kept, text[done:]]) if kept else text


# A ``://`` and (looked at, not taken) what follows it up to the end of its authority: no
# whitespace, no ``/``.
# ASCII whitespace only: a Unicode one (``\u2028``, ``\x85``) inside a password must not end
# its authority before its ``@`` (it is shown as an escape, with the rest of the password).
_AUTHORITY = re.compile(r"://(?=([^ \t\n\r\f\v/]*))")
_BLANK = re.compile(r"\s")
# A parameter's value starts at most this far after the start of its name: the longest name
# with what may follow it in its word (11 + 16), the gap (34) and a scheme (10), rounded up.
_VALUE_GAP_MAX = 72


def redact_text(text: str, *, cut_at_end: bool = False) -> str:
    """``text`` (an error message, a traceback) with the passwords it shows as ``***``: those
    in URLs' user-info (``scheme://user:password@``, up to the host's ``@``) and the values of
    secret parameters (``password=``, ``token: ``). Linear in ``len(text)``.

    Args:
        text: what to redact.
        cut_at_end: ``text`` is the head of a longer text: a user-info that runs to its end
            may have its ``@`` beyond, and is masked from its first ``:``.
    """
    if "://" in text and ("@" in text or cut_at_end):
        text = _redact_userinfo(text, cut_at_end)
    text = _PARAM.sub(r"\1\2***", text)
    return _drop_quoted_rests(text, cut_at_end) if "***" in text else text


def _redact_userinfo(text: str, cut_at_end: bool) -> str:
    # One pass: each ``://`` opens an authority that ends at whitespace or a ``/``, so no
    # two overlap (the next ``://`` starts at the earliest on the ``:`` before that ``/``).
    out: list[str] = []
    done = 0
    for found in _AUTHORITY.finditer(text):
        authority, begin = found.group(1), found.end()
        if cut_at_end and begin + len(authority) == len(text):
            colon = authority.find(":")  # its host's ``@`` may be past the cut
            if colon != -1:
                out += [text[done : begin + colon + 1], "***"]
                done = len(text)
            continue
        at = authority.rfind("@")  # the host's: a password may hold an ``@``
        colon = authority.find(":", 0, max(at, 0))
        if colon != -1 and at > colon + 1:  # user:password@host
            out += [text[done : begin + colon + 1], "***"]
            done = begin + at
    return "".join([*out, text[done:]])


def redact_head(text: str, limit: int) -> str:
    """The first ``limit`` characters of ``text``, redacted; the cost is O(``limit``).

    Cut first, then redacted knowing it was cut: a password whose ``@`` was cut off is masked
    all the same, and a parameter's name comes before its value, so no secret is split from
    what marks it."""
    if len(text) <= limit:
        return redact_text(text)[:limit]
    return redact_text(text[:limit], cut_at_end=True)[:limit]


def redact_tail(text: str, limit: int) -> str:
    """The last ``limit`` characters of ``text``, redacted; the cost is O(``limit``).

    What a secret is known by (``://``, ``password=``) comes before it on its line, so the
    text is redacted from the start of the line where the cut falls; when that line starts
    more than ``limit`` characters earlier, the first words of the part kept, which may be
    the rest of a secret, are dropped for ``…``."""
    if len(text) <= limit:
        return redact_text(text)[-limit:]
    cut = len(text) - limit
    newline = text.rfind("\n", max(0, cut - limit), cut)
    if newline != -1 or cut <= limit:  # the line the cut falls in starts within reach
        return redact_text(text[newline + 1 :])[-limit:]
    kept = text[cut:]
    # A secret is one word (no whitespace) that starts within _VALUE_GAP_MAX of the cut when
    # what marks it is before the cut (a parameter's name, even one the cut splits); so the
    # words that start that near are dropped, up to the end of the line at most.
    newline = kept.find("\n", 0, _VALUE_GAP_MAX)
    blank = _BLANK.search(kept, _VALUE_GAP_MAX) if newline == -1 else None
    drop = newline if newline != -1 else len(kept) if blank is None else blank.start()
    return ("…" + redact_text(kept[drop:]))[-limit:]


def escape_log(text: str, limit: int = 2000) -> str:
    """``text`` with control characters escaped (no forged log lines) and cut at ``limit``."""
    escaped = text.encode("unicode_escape", "backslashreplace").decode("ascii")
    return escaped if len(escaped) <= limit else escaped[:limit] + "..."
