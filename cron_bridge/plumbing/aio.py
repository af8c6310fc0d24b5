"""``async def`` handlers: their coroutines run on one event loop per process, in a thread of
its own that cron-bridge owns, while the run thread that called the handler waits for the
result, so the overlap lock, its heartbeat, the lease watchdog and the run's record work as
for any handler."""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
from collections.abc import Awaitable
from typing import Any

__all__ = ["resolve"]

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_pid: int | None = None


def resolve(value: Any) -> Any:
    """``value``, or what it gives once awaited when it is awaitable (an ``async def``
    handler's coroutine), run on the process's cron-bridge event loop."""
    if not inspect.isawaitable(value):
        return value
    return asyncio.run_coroutine_threadsafe(_coroutine(value), _the_loop()).result()


async def _coroutine(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _the_loop() -> asyncio.AbstractEventLoop:
    """The loop, started on first use (and again in a forked child, which has no threads)."""
    global _loop, _pid
    with _lock:
        if _loop is None or _pid != os.getpid():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="cron-bridge-asyncio", daemon=True
            )
            thread.start()
            _loop, _pid = loop, os.getpid()
        return _loop
