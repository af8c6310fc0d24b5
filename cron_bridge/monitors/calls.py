"""The monitors' outbound calls in flight: each on a daemon thread of its own, each with a
deadline, none waited on by the run that made it.

A check-in is handed here and the run goes on at once: the beat's dispatch pool, the overlap
lock and the handler never wait for a monitor's peer. Whoever must see the calls leave waits
with ``settle``, bounded by the calls' deadlines and by its own timeout: a worker's delivery
(RQ's work horse exits with ``os._exit`` right after the job, skipping ``atexit``), a stopping
beat (within its ``shutdown_timeout``), and the process's exit (``atexit``, at most
``EXIT_WAIT``). A call that was not done by then is abandoned on its daemon thread, which
never holds the process up.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["EXIT_WAIT", "MAX_IN_FLIGHT", "Call", "in_flight", "launch", "settle"]

log = logging.getLogger("cron_bridge.monitors")

MAX_IN_FLIGHT = 64  # calls at once in a process; more are dropped (their peers are stuck)
EXIT_WAIT = 5.0  # seconds an exiting process waits for its calls in flight, at most
WRAP_UP = 0.25  # seconds past its deadline a call may take to say it is over (its log line)


@dataclass(eq=False, kw_only=True, slots=True)
class Call:
    """One outbound call in flight.

    Attributes:
        deadline: ``time.monotonic()`` by which it is over, sent or given up.
        done: set once it is over.
    """

    deadline: float
    done: threading.Event = field(default_factory=threading.Event)

    def wait(self, until: float) -> bool:
        """Wait until it is over, at most until ``until`` or its deadline; whether it is."""
        ends = min(until, self.deadline + WRAP_UP)
        return self.done.wait(max(0.0, ends - time.monotonic()))


_lock = threading.Lock()
_calls: set[Call] = set()


def launch(
    work: Callable[[float], None],
    *,
    timeout: float,
    after: Call | None = None,
    name: str = "cron-bridge-check-in",
) -> Call | None:
    """Run ``work(deadline)`` on a daemon thread, in at most ``timeout`` seconds; None when
    ``MAX_IN_FLIGHT`` calls are already going (the caller says so, once).

    Args:
        work: does the call, ending by the monotonic deadline it is given; what it raises is
            logged here (it should log its own failures).
        timeout: the call's own time, counted from when it starts.
        after: a call to wait for first (an attempt's start before its end), at most until
            that one's deadline: the order a peer sees is the order they were made.
        name: the thread's name.
    """
    now = time.monotonic()
    call = Call(deadline=max(now, after.deadline if after else now) + timeout)
    with _lock:
        if len(_calls) >= MAX_IN_FLIGHT:
            return None
        _calls.add(call)

    def run() -> None:
        try:
            if after is not None:
                after.wait(after.deadline)
            work(min(call.deadline, time.monotonic() + timeout))
        except Exception:  # a monitor never fails anything: said, and over
            log.warning("a monitor's call failed", exc_info=True)
        finally:
            with _lock:
                _calls.discard(call)
            call.done.set()

    threading.Thread(target=run, name=name, daemon=True).start()
    return call


def in_flight() -> int:
    """How many calls are going now."""
    with _lock:
        return len(_calls)


def settle(timeout: float | None = None) -> bool:
    """Wait for the calls going now to be over, each at most until its deadline, and all at
    most ``timeout`` seconds (None: their deadlines only). Whether they all are."""
    until = float("inf") if timeout is None else time.monotonic() + max(0.0, timeout)
    with _lock:
        going = list(_calls)
    over = [call.wait(until) for call in going]  # each waited for, not up to the first late
    return all(over)


def _forget_in_child() -> None:
    """A forked child (a work horse, a prefork worker) has none of its parent's threads: its
    calls are not going here, and the lock may have been held when it forked."""
    global _lock
    _lock = threading.Lock()
    _calls.clear()


atexit.register(settle, EXIT_WAIT)
os.register_at_fork(after_in_child=_forget_in_child)
