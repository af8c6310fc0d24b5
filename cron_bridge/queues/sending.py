"""What adapters share for sending: ``DropInSender``, the base of the adapters that send another
scheduler's declarations as it does, and ``SendThreads``, which sends a large batch from two
threads."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, ClassVar

from cron_bridge.errors import ConfigError
from cron_bridge.queues.adapter import Adapter, TaskRef, override

if TYPE_CHECKING:
    from cron_bridge.jobs import Job

__all__ = ["SPLIT_MIN", "THREADS", "DropInSender", "SendThreads"]


class DropInSender(Adapter, declares=False, refuses_copies=False):
    """The base of an adapter that sends another scheduler's declarations as that scheduler
    sends them (celery beat's ``beat_schedule``, ``rq cron``, periodiq, dramatiq-crontab).

    No job is declared on it with ``@cluster_task`` (``declares`` is False), so it accepts,
    describes and wraps nothing; a subclass gives its ``name`` and ``what`` it sends (for the
    error if a job is declared on it) as class keywords, and implements ``enqueue_many``. The
    tasks it sends run unchanged on the workers, with no guard to refuse a second copy: a
    failed send is not sent again (as the scheduler it replaces does). A sender whose queue
    refuses a copy itself (the occurrence's job id, RQ's unique=True) says
    ``refuses_copies=True``.
    """

    what: ClassVar[str] = "these declarations"

    @override
    def __init_subclass__(
        cls,
        *,
        name: str | None = None,
        what: str | None = None,
        refuses_copies: bool | None = None,
    ) -> None:
        super().__init_subclass__(name=name, refuses_copies=refuses_copies)
        if what is not None:
            cls.what = what

    @override
    def accepts(self, obj: object, queue: object | None) -> bool:
        return False

    @override
    def describe(self, obj: object, queue: object | None) -> TaskRef:
        raise ConfigError(f"{self.what} are not declared with @cluster_task")

    @override
    def wrap(self, obj: Any, job: Job) -> Any:
        return obj


THREADS = 2  # threads a large batch is sent from
SPLIT_MIN = 50  # messages each thread gets at least, else one thread sends them all


class SendThreads:
    """Sends a large batch from ``THREADS`` threads at once, for an adapter whose library
    waits for the broker's answer after each message (a round trip per send): one thread
    builds and sends its next message while another waits. The threads are kept for the
    life of the process: a broker library may hold a connection per thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def run(self, send: Callable[[Sequence[int]], None], count: int) -> None:
        """Call ``send`` with the indexes ``range(count)``: all at once for a small batch,
        else in ``THREADS`` interleaved parts from as many threads; return when all are sent.
        """
        if count < THREADS * SPLIT_MIN:
            send(range(count))
            return
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(THREADS, thread_name_prefix="cron-bridge-send")
            pool = self._pool
        parts = [pool.submit(send, range(i, count, THREADS)) for i in range(THREADS)]
        for part in parts:
            part.result()
