"""What a job or a record says reaches a log, Sentry and a terminal sanitised: a real beat
whose job raises a hostile error, and the ``history`` command over a hostile record, piped
and on a terminal."""

from __future__ import annotations

import gzip
import json
import os
import pty
import select
import subprocess
import sys
import threading
import time
import unicodedata
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cron_bridge.jobs import Occurrence
from cron_bridge.stores import RunRecord, store_from_url
from tests.e2e.processes import BeatProcess, command_env
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

SECRET = "hunter2hunter2"
FORGED = "2026-01-01 00:00:00,000 INFO cron_bridge.beat.replica: forged line"
ESCAPES = "\x1b[2J\x1b]0;owned\x07\x9b31m\u202e\x00\r"
MESSAGE = f"cannot reach redis://:{SECRET}@db:6379/0\n{FORGED}{ESCAPES}"

HOSTILE_APP = f"""
import logging
import os

import sentry_sdk
from sentry_sdk.integrations.logging import LoggingIntegration

from cron_bridge import cluster_task

sentry_sdk.init(dsn=os.environ["CB_TEST_SENTRY_DSN"], default_integrations=False,
                integrations=[LoggingIntegration(level=logging.INFO, event_level=logging.ERROR)])


@cluster_task(every="1s", name="hostile.job", target="inline")
def hostile(ctx):
    raise ValueError({MESSAGE!r} + "x" * (10 << 20))
"""


class Envelopes:
    """A loopback server standing in for Sentry: it keeps every envelope it is sent."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def serve(self) -> Iterator[str]:
        """Serve on a free port; yields the DSN that points at it."""
        bodies = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                elif self.headers.get("Content-Encoding") == "br":
                    import brotli  # sentry-sdk compresses so only when brotli is installed

                    body = brotli.decompress(body)
                bodies.append(body)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://public@127.0.0.1:{server.server_address[1]}/1"
        finally:
            server.shutdown()
            server.server_close()

    def events(self) -> list[dict[str, Any]]:
        """The event items of the envelopes (a header line, then each item's header and its
        payload, one line each)."""
        found = []
        for body in list(self.bodies):
            lines = body.split(b"\n")
            for header, payload in zip(lines[1::2], lines[2::2], strict=False):
                if header.strip() and json.loads(header).get("type") == "event":
                    found.append(json.loads(payload))
        return found


def inert(text: str) -> list[str]:
    """The characters of ``text`` a terminal would act on (a newline aside)."""
    return [
        c
        for c in text
        if (unicodedata.category(c) in ("Cc", "Cs") and c != "\n")
        or c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    ]


def test_a_beat_logs_a_hostile_failure_redacted_bounded_on_its_own_lines_and_so_sees_sentry(
    tmp_path: Path,
) -> None:
    """A real beat whose job raises, every second, a 10 MiB ValueError holding a password, a
    newline followed by a line that looks like the beat's own, and escape sequences: the
    beat's log holds no password, no escape, no line of more than 20 KB and no forged line
    (each line of the traceback is indented), hundreds of KB where it wrote 10.5 MB a
    failure; and the events sentry-sdk's logging integration sends hold no password."""
    (tmp_path / "hostile_app.py").write_text(HOSTILE_APP)
    envelopes = Envelopes()
    served = envelopes.serve()
    env = command_env(CB_TEST_SENTRY_DSN=next(served))
    beat = BeatProcess(
        "hostile", tmp_path, env, app="hostile_app", store_url=f"sqlite:///{tmp_path}/s.db"
    )
    beat.start()
    try:
        wait_for(lambda: beat.output().count(" ERROR ") >= 2, 60, "two failures logged")
        wait_for(lambda: len(envelopes.events()) >= 2, 30, "two events sent to Sentry")
        assert beat.terminate() < 30
    finally:
        beat.ensure_stopped()
        served.close()
    raw = beat.log.read_bytes()
    failures = raw.count(b" ERROR ")
    assert len(raw) < 40_000 * failures + 20_000, (len(raw), failures)
    assert SECRET.encode() not in raw
    assert not {0x1B, 0x07, 0x00} & set(raw) and b"\xc2\x9b" not in raw  # ESC, BEL, NUL, C1
    text = raw.decode("utf-8")
    assert not inert(text.replace("\r\n", "\n"))
    lines = text.splitlines()
    assert max(len(line) for line in lines) < 20_000
    assert not [line for line in lines if line.startswith(FORGED[:20])]
    assert any(line.startswith("    | ") and FORGED in line for line in lines), text[-3000:]
    assert "ValueError: cannot reach redis://:***@db:6379/0" in text
    events = envelopes.events()
    for body in envelopes.bodies:
        assert SECRET.encode() not in body and len(body) < 100_000, len(body)
        assert b"\\u001b" not in body and b"\\u0007" not in body
    said = json.dumps(events)
    assert "redis://:***@db:6379/0" in said and "failed hostile.job@" in said


def _history(*args: str, env: dict[str, str], cwd: Path, terminal: bool) -> bytes:
    """The bytes ``cron-bridge history ARGS`` writes, piped or to a pseudo-terminal."""
    argv = [sys.executable, "-m", "cron_bridge", "history", *args]
    if not terminal:
        done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout + done.stderr
    main, child = pty.openpty()
    process = subprocess.Popen(argv, env=env, cwd=cwd, stdin=child, stdout=child, stderr=child)
    os.close(child)
    out = b""
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 1.0)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(main)
        process.kill() if process.poll() is None else None
        process.wait(30)
    assert process.returncode == 0, out[-2000:]
    return out


@pytest.mark.parametrize("terminal", [False, True], ids=["piped", "terminal"])
def test_history_prints_no_control_character_a_record_holds(tmp_path: Path, terminal: bool) -> None:
    """``history`` and ``history --occurrence`` over a record whose error, traceback and
    replica hold CSI and OSC sequences, a bell, C1, NUL, CR and a bidi override: the bytes
    written, piped or to a terminal, hold none of them (they are shown escaped), and no
    password."""
    url = f"sqlite:///{tmp_path}/s.db"
    store = store_from_url(url)
    occurrence = Occurrence(job="evil.job", scheduled_at=datetime(2026, 11, 30, 12, tzinfo=UTC))
    store.record(
        RunRecord(
            job="evil.job",
            occurrence_id=occurrence.id,
            outcome="failed",
            trigger="timer",
            replica=f"beat{ESCAPES}",
            started_at=datetime.now(UTC),
            error=f"ValueError: {MESSAGE}",
            traceback=f'Traceback (most recent call last):\n  File "x"\nValueError: {MESSAGE}\n',
        )
    )
    store.close()
    env = command_env(CRON_BRIDGE_STORE=url)
    for args in (["evil.job"], ["evil.job", "--occurrence", occurrence.id]):
        out = _history(*args, env=env, cwd=tmp_path, terminal=terminal)
        assert b"redis://:***@db:6379/0" in out and SECRET.encode() not in out
        assert not {0x1B, 0x07, 0x00, 0x9B} & set(out) and b"\xc2\x9b" not in out, out
        assert not inert(out.decode("utf-8").replace("\r\n", "\n")), out
        assert b"\\x1b[2J\\x1b]0;owned\\x07" in out  # shown, escaped
    # --occurrence prints the traceback as lines: the forged one is its own line there,
    # after the error's, and escaped as the rest.
    lines = out.decode().replace("\r\n", "\n").splitlines()
    assert "ValueError: cannot reach redis://:***@db:6379/0" in lines
