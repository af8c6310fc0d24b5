"""The one way a test waits for something: poll a condition until it holds or a deadline
passes. A test that waits on a fixed sleep guesses how fast the machine is; one that waits on
a condition with a deadline sized for a loaded machine (a user's CI is rarely idle) only
takes as long as the condition needs."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")


def waited(check: Callable[[], object], timeout: float, *, every: float = 0.1) -> bool:
    """Poll ``check`` every ``every`` seconds until it is true (True) or ``timeout`` seconds
    have passed (False, after one last look). For a test that asserts on what it finds
    either way, and so says more on a failure than "timed out"."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(every)
    return bool(check())


def wait_for(check: Callable[[], object], timeout: float, what: str, *, every: float = 0.1) -> None:
    """Poll ``check`` until it is true; fail the test after ``timeout`` seconds, naming
    ``what`` it waited for."""
    if not waited(check, timeout, every=every):
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def retried(
    call: Callable[[], _T],
    timeout: float,
    *,
    errors: tuple[type[BaseException], ...],
    every: float = 0.2,
) -> _T:
    """``call()``'s value, asking again every ``every`` seconds while it raises one of
    ``errors`` (a store through a failover); the last error once ``timeout`` has passed."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except errors:
            if time.monotonic() > deadline:
                raise
            time.sleep(every)
