"""docs/configuration.md cannot drift from the code: its tables of options are generated from
the commands and the URL parser, every environment variable the code reads is listed, and so
is every Celery setting."""

from __future__ import annotations

import re

import pytest

from tests.e2e.processes import REPO
from tests.reference import PAGE, page

SOURCES = [*(REPO / "cron_bridge").rglob("*.py"), *(REPO / "adapters").glob("*/cron_bridge_*/*.py")]


@pytest.mark.extras  # the adapters' commands are in the tables
def test_the_option_tables_are_the_ones_the_code_has() -> None:
    """Regenerate them with ``python -m tests.reference`` after changing an option."""
    assert PAGE.read_text() == page()


def test_every_environment_variable_the_code_reads_is_listed_with_its_default() -> None:
    text = PAGE.read_text()
    listed = set(re.findall(r"^\| `(CRON_BRIDGE_[A-Z_]+)` \|", text, re.MULTILINE))
    read = {
        name for path in SOURCES for name in re.findall(r"CRON_BRIDGE_[A-Z_]+", path.read_text())
    }
    assert read == listed, (sorted(read - listed), sorted(listed - read))


def test_every_celery_setting_the_adapter_reads_is_listed() -> None:
    text = PAGE.read_text()
    adapter = "\n".join(
        p.read_text() for p in (REPO / "adapters/celery/cron_bridge_celery").rglob("*.py")
    )
    settings = set(re.findall(r"conf\.get\(\"(cron_bridge_\w+)\"", adapter))
    assert settings and all(f"`{name}`" in text for name in settings), settings


def _said_in_code() -> str:
    """The code's text with string literals joined across lines, as messages are written."""
    text = "\n".join(path.read_text() for path in SOURCES)
    text = re.sub(r"\"\s*(?:\)\s*#[^\n]*)?\n\s*f?\"", "", text)  # "…" "…" and f"…" continued
    return re.sub(r"%[-+.\d]*[sdfr]|\{[^{}\n]*\}", "…", text)  # what is filled in reads "…"


def test_every_message_troubleshooting_explains_is_one_the_code_prints() -> None:
    """Each heading is a message with ``…`` where it names a value: each literal part of it
    must be in the code, so the page never explains a message nobody prints any more."""
    page = (REPO / "docs" / "troubleshooting.md").read_text()
    headings = re.findall(r"^### `(.+)`$", page, re.MULTILINE)
    assert len(headings) >= 15, headings
    code = _said_in_code()
    for heading in headings:
        message = heading.removeprefix("cron-bridge: ")  # what fail() puts before every error
        for part in (p.strip(" '") for p in message.split("…")):
            if len(part) >= 6:
                assert part in code, (heading, part)
