"""JSON nobody vouches for: bounded in size and depth, no NaN or infinities, times in range;
and a bad record warned about once, again only once it changed."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from cron_bridge.plumbing import inbound


@pytest.mark.parametrize(
    "text",
    [
        "[" * 33 + "]" * 33,
        '{"a":' * 40 + "1" + "}" * 40,
        "NaN",
        '{"x": Infinity}',
        "1e999",
        "[-Infinity]",
        "9" * 5000,
        "1" + "0" * 400,
        '{"ms": -1' + "0" * 30 + "}",
        str(2**63),
        str(-(2**63) - 1),
        "x" * (inbound.MAX_BYTES + 1),
        b"\xff{}",
        "[" * 100_000,
    ],
)
def test_what_a_hostile_writer_stores_is_a_value_error(text: str | bytes) -> None:
    with pytest.raises(ValueError):
        inbound.loads(text)


def test_brackets_inside_strings_do_not_count_and_ordinary_json_reads() -> None:
    assert inbound.loads('{"a": "' + "[" * 100 + '\\"]"}') == {"a": "[" * 100 + '"]'}
    read = inbound.loads(b'{"every": 2.5, "n": [1, [2, [3]]]}')
    assert read == {"every": 2.5, "n": [1, [2, [3]]]}
    assert inbound.loads("[" * 32 + "]" * 32) is not None
    assert inbound.loads(f"[{2**63 - 1}, {-(2**63)}]") == [2**63 - 1, -(2**63)]


@pytest.mark.parametrize("ms", [9 * 10**18, -1, 1.5, "12ab", None, True, "9" * 20])
def test_a_time_out_of_range_is_none(ms: object) -> None:
    assert inbound.instant(ms) is None


def test_times_in_range_read_from_numbers_and_text() -> None:
    assert inbound.instant(0).isoformat() == "1970-01-01T00:00:00+00:00"  # type: ignore[union-attr]
    assert inbound.instant(b"1764583200000").year == 2025  # type: ignore[union-attr]
    assert inbound.instant(inbound.MAX_EPOCH_MS).year == 9999  # type: ignore[union-attr]


def test_a_bad_record_is_warned_about_once_until_it_changes(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inbound, "_seen", type(inbound._seen)())
    log = logging.getLogger("tests.untrusted")
    for raw in ("bad", "bad", "bad", "worse", "worse"):
        inbound.warn_once(log, "pause", "job", raw, "unreadable: %s", raw)
    inbound.warn_once(log, "pause", "other", "bad", "unreadable other: %s", "bad")
    assert [r.getMessage() for r in caplog.records] == [
        "unreadable: bad",
        "unreadable: worse",
        "unreadable other: bad",
    ]


@pytest.mark.parametrize(
    "raw", [b"\xff\xfe", b"\xed\xa0\x80", "a\udcff", 7, None, b"x" * (inbound.MAX_BYTES + 1)]
)
def test_what_is_no_utf8_text_of_bounded_size_is_none_and_warned_once(
    raw: object, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inbound, "_seen", type(inbound._seen)())
    for _ in range(3):
        assert inbound.text(raw, "controls:pause", b"job\xff") is None
    assert len(caplog.records) == 1 and "controls:pause" in caplog.records[0].getMessage()


def test_utf8_bytes_and_text_read_as_text() -> None:
    assert inbound.text("été".encode(), "controls:pause", "job") == "été"
    assert inbound.text("été", "controls:pause", "job") == "été"
    assert inbound.text(b"", "controls:pause", "job") == ""


@pytest.mark.parametrize(
    "value",
    [
        "9999-12-31T23:59:59+00:00",
        "9999-12-31T23:59:59-05:00",
        "0001-01-01T00:00:00+00:00",
        "1969-12-31T23:59:59+00:00",
        "2026-01-01T00:00:00",
        "2026-02-30T00:00:00+00:00",
        "",
        "x" * 65,
        7,
        None,
    ],
)
def test_a_time_with_no_zone_or_out_of_range_is_no_moment(value: object) -> None:
    assert inbound.moment(value) is None


def test_a_moment_is_aware_utc() -> None:
    at = inbound.moment("2026-01-01T01:00:00+01:00")
    assert at is not None and at.isoformat() == "2026-01-01T00:00:00+00:00"
    assert inbound.moment(inbound.LATEST) == inbound.LATEST


def test_no_text_makes_the_depth_check_backtrack() -> None:
    """A string that never closes, of 256 KiB of escaped quotes (two bulk lines long, a
    record in the store), is refused at once: the depth check tried it again from every
    quote, a minute of one core with the GIL held. In a process of its own, so a regression
    is stopped after 60 s (a thread could not be: the match holds the GIL)."""
    check = (
        "from cron_bridge.plumbing import inbound\n"
        "hostile = ['\"' + '\\\\\"' * 131_072, '[\"' + '\\\\' * 262_144]\n"
        "refused = 0\n"
        "for text in hostile:\n"
        "    try:\n"
        "        inbound.loads(text)\n"
        "    except ValueError:\n"
        "        refused += 1\n"
        "print(refused)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["2"], done.stderr[-2000:]
