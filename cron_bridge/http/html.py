"""HTML that is safe by construction: what a page is built of is ``Markup`` (text already
HTML, written by the dashboard itself) or is escaped on the way in.

``html(template, *values)`` fills a template written in this package, escaping every value
that is not ``Markup``; adding to or joining ``Markup`` escapes the other side likewise, so a
value read from a store or a request can only reach a page as text. Attribute values are
always written quoted (``html`` refuses a template with ``={}``), and escaping quotes both
kinds of quote, so a value never leaves its attribute.

Every value shown goes through ``shown_text`` first, which hands it to the process's one
sanitiser (``cron_bridge.plumbing.outbound.sanitize``, as the logs and the CLI do): redacted,
bounded,
and with control characters (which a page, a copied line or a terminal would act on) and lone
surrogates (which UTF-8 cannot carry) written as escapes.
"""

from __future__ import annotations

import html as _html
from collections.abc import Iterable
from typing import LiteralString

from cron_bridge.plumbing.outbound import sanitize

__all__ = ["Markup", "escape", "html", "join", "shown_text"]

# The most characters of one value a page shows: a stored traceback is cut to 8,000 when it
# is written; a forged one longer than this is cut here (``…``), and costs no more to show.
SHOWN_MAX = 20_000


def shown_text(text: str) -> str:
    """``text`` as the web surface may show it: through the process's one sanitiser
    (``outbound.sanitize``: redacted, bounded, control characters, bidirectional overrides
    and lone surrogates written as escapes), newlines kept for the page to lay out."""
    return sanitize(text, SHOWN_MAX, lines=True)


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
