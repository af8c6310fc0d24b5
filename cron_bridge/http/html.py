"""HTML that is safe by construction: what a page is built of is ``Markup`` (text already
HTML, written by the dashboard itself) or is escaped on the way in.

``html(template, *values)`` fills a template written in this package, escaping every value
that is not ``Markup``; adding to or joining ``Markup`` escapes the other side likewise, so a
value read from a store or a request can only reach a page as text. Attribute values are
always written quoted (``html`` refuses a template with ``={}``), and escaping quotes both
kinds of quote, so a value never leaves its attribute.

Every value shown goes through ``shown_text`` first, the one place where text that leaves the
process by the web surface is made safe to show: redacted, without control characters (which
a page, a copied line or a terminal would act on), without lone surrogates (which UTF-8
cannot carry).
"""

from __future__ import annotations

import html as _html
from collections.abc import Iterable
from typing import LiteralString

from cron_bridge.redaction import redact_text

__all__ = ["Markup", "escape", "html", "join", "shown_text"]

# C0 but tab and newline, DEL, C1; the bidirectional overrides and isolates (text that reads
# other than it is); lone surrogates. One table: ``str.translate`` is linear in the text.
_REMOVED = dict.fromkeys(
    [
        *(c for c in range(0x20) if c not in (0x09, 0x0A)),
        *range(0x7F, 0xA0),
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
        *range(0xD800, 0xE000),
    ]
)


def shown_text(text: str) -> str:
    """``text`` as the web surface may show it: redacted (``redact_text``) and stripped of
    control characters, bidirectional overrides and lone surrogates."""
    # TODO(issue 36): the text sanitiser of cron_bridge.redaction, once it lands.
    return redact_text(text.translate(_REMOVED))


class Markup(str):
    """Text that is already HTML: added to, joined with or filled into a template, whatever
    is not ``Markup`` itself is escaped."""

    __slots__ = ()

    def __add__(self, other: str) -> Markup:
        return Markup(str.__add__(self, escape(other)))

    def __radd__(self, other: str) -> Markup:
        return Markup(str.__add__(escape(other), self))

    def join(self, parts: Iterable[str]) -> Markup:
        return Markup(str.join(self, (escape(part) for part in parts)))


def escape(value: object) -> Markup:
    """``value`` as HTML text: ``Markup`` as it is, anything else shown (``shown_text``) and
    escaped, quotes included."""
    if isinstance(value, Markup):
        return value
    return Markup(_html.escape(shown_text(str(value)), quote=True))


def _filled(value: object) -> object:
    # Numbers stay numbers, for the template's format specs (``{:.1f}``); their text is safe.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    return escape(value)


def html(template: LiteralString, *values: object, **named: object) -> Markup:
    """``template`` (``str.format`` syntax, written here, never read from input) with each
    value escaped unless it is ``Markup``.

    Raises:
        ValueError: the template writes an attribute value unquoted (``x={}``): an escaped
            value could still end such an attribute at a space.
    """
    if "={" in template:
        raise ValueError(f"quote the attribute values of {template[:60]!r}")
    return Markup(
        template.format(*map(_filled, values), **{k: _filled(v) for k, v in named.items()})
    )


def join(parts: Iterable[str], separator: str = "") -> Markup:
    """``parts`` one after the other, each escaped unless it is ``Markup``."""
    return Markup(separator).join(parts)
