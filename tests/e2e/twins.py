"""The one harness of the twin tests: the stock scheduler and three cron-bridge replicas on the
same declarations, started side by side, each sending into a namespace of its own, and watched
over one window of wall time. What reached each namespace in the window is what a test then
compares, field by field; the window is a span of time a scheduler needs to show what it does
(a minute boundary at least), so it is slept, while everything before it is waited for as a
condition.

The twin tests (celery beat, ``rq cron``, periodiq, ``manage.py crontab``, and Sentry's cron
monitoring under celery beat and django-celery-beat, which compares a whole minute's
check-ins instead of a window) are each the longest of their files, so ``make test`` starts
them first (tests/durations.json) and their windows run side by side on the pytest workers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from tests.e2e.processes import Service
from tests.waiting import wait_for

READY_WITHIN = 60.0  # seconds: four interpreters importing Celery or Django on a loaded machine
SETTLE = 2.0  # seconds between "all ready" and the window: the first sends of a start are left out


@dataclass(frozen=True)
class Window:
    """The wall-clock span (``time.time()``) both sides were watched over."""

    began: float
    ended: float

    def __contains__(self, at: float) -> bool:
        return self.began <= at <= self.ended


class Twins:
    """The processes of one twin test, running."""

    def __init__(
        self, stock: Service, ours: Sequence[Service], helpers: Sequence[Service] = ()
    ) -> None:
        self.stock = stock
        self.ours = list(ours)
        self.helpers = list(helpers)  # what both sides need beside them: their workers
        self.processes = [stock, *ours, *helpers]

    def watch(self, seconds: float, *, tail: float = 0.0) -> Window:
        """Let ``SETTLE`` seconds pass, then watch for ``seconds``; wait ``tail`` more for what
        was sent at the window's end to arrive. Every process must still be running."""
        time.sleep(SETTLE)
        began = time.time()
        time.sleep(seconds)
        ended = time.time()
        time.sleep(tail)
        dead = [p.name for p in self.processes if not (p.process and p.process.poll() is None)]
        assert not dead, (dead, self.logs())
        return Window(began, ended)

    def logs(self, last: int = 3000) -> str:
        return "\n".join(f"--- {p.name}\n{p.output()[-last:]}" for p in self.processes)


@contextmanager
def side_by_side(
    stock: Service,
    ours: Sequence[Service],
    *,
    ready: Callable[[Twins], object],
    what: str,
    helpers: Sequence[Service] = (),
) -> Iterator[Twins]:
    """Start ``stock``, ``ours`` and their ``helpers`` together and wait until ``ready`` holds
    (``what`` names it on a timeout); stop them all however the block ends."""
    twins = Twins(stock, ours, helpers)
    try:
        for process in twins.processes:
            process.start()
        wait_for(lambda: ready(twins), READY_WITHIN, what)
        yield twins
    finally:
        for process in twins.processes:
            process.ensure_stopped()


def logs_say(stock: str, ours: str) -> Callable[[Twins], bool]:
    """Readiness read from the logs: the stock scheduler has printed ``stock`` and every
    replica ``ours``."""
    return lambda twins: (
        stock in twins.stock.output() and all(ours in process.output() for process in twins.ours)
    )
