"""The core's side of the seam with the queue libraries: how it finds the installed adapters
(the entry point group ``cron_bridge.adapters``) and what it hands them. Adapter
distributions import ``cron_bridge.adapters``, which re-exports what they need of this.

The core never imports Celery, RQ or Dramatiq. Each adapter distribution registers an
``Adapter`` under the entry point group ``cron_bridge.adapters``; the core asks each one in
turn whether it accepts a decorated object, so a fourth queue library needs no change here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from cron_bridge.errors import ConfigError

if TYPE_CHECKING:
    from cron_bridge.context import Trigger
    from cron_bridge.jobs import Job, Occurrence

__all__ = [
    "ENTRY_POINT_GROUP",
    "SENDERS",
    "SPLIT_MIN",
    "Adapter",
    "Dispatch",
    "Sender",
    "Senders",
    "TaskRef",
    "find_adapter",
    "get_adapter",
    "installed_adapters",
    "refuses_copies",
    "register",
]

ENTRY_POINT_GROUP = "cron_bridge.adapters"

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskRef:
    """How an adapter will find a task again without importing it in the beat.

    Attributes:
        task: the name it is enqueued by (Celery task name, dotted path, actor name).
        name: the job name to use when the declaration gives none.
        queue: the queue it goes to, when the task or the declaration says.
        home: the module and attribute a worker imports the task from, when known.
    """

    task: str
    name: str
    queue: str | None = None
    # Where a worker finds the task (module, attribute): it imports that module, so the task
    # runs under the guard only when it is decorated there. None when it cannot be told.
    home: tuple[str, str] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Dispatch:
    """One claimed occurrence on its way to a queue."""

    job: Job
    occurrence: Occurrence
    trigger: Trigger
    replica: str
    trace: Mapping[str, str] | None = None  # the W3C trace context of the beat's span
    # Sent before without an answer (a broker error, a timeout): the message may have landed
    # anyway. An adapter whose duplicate check costs a round trip per message (RQ's
    # unique=True) makes that check for these sends only.
    again: bool = False

    def meta(self) -> dict[str, Any]:
        """What travels in the message, as JSON-ready values (never pickled)."""
        meta: dict[str, Any] = {
            "job": self.job.name,
            "occurrence_id": self.occurrence.id,
            "scheduled_at": self.occurrence.scheduled_at.isoformat(),
            "trigger": self.trigger,
            "replica": self.replica,
            "attempts": self.job.attempts,
        }
        if self.trace:
            meta["trace"] = dict(self.trace)
        return meta


@runtime_checkable
class Adapter(Protocol):
    """What a queue library's adapter provides to the core."""

    name: str

    def accepts(self, obj: object, queue: object | None) -> bool:
        """Whether ``obj`` (with the declaration's ``queue=``) is this library's task."""

    def describe(self, obj: object, queue: object | None) -> TaskRef:
        """Name the task for the job; raises ``ConfigError`` when it cannot be named."""

    def wrap(self, obj: Any, job: Job) -> Any:
        """What ``@cluster_task`` returns for ``obj``: the task, now running under the guard."""

    # Optional: ``refuses_copies`` (default True), whether a second copy of one of its
    # messages is refused, by the guard on the worker (the completion mark, the overlap lock)
    # or the queue's own dedup (RQ's unique job ids). Where nothing would refuse it, a failed
    # send is not sent again: it may have reached the broker (a lost answer), and the broker
    # library's own retries (redis-py's, kombu's) can hide that behind a later error.

    # Optional: ``check_send(options)``, raising ``ConfigError`` (option and value) for a
    # ``Job.send`` it cannot hand its library; without it a job may send no such options.

    # Optional: ``declared_in(modules) -> list[Job]``, the jobs the library's own schedule
    # declarations in those imported modules make (Celery's ``beat_schedule``), for listings;
    # with ``declared_as`` (what they are called) and ``runs_with`` (the command that runs them).
    # And ``as_listed(store, jobs) -> dict[name, Job | str]``: how ``cron-bridge list`` shows
    # some of those jobs, given the store (or None): a job to read NEXT from (an ``rq cron``
    # interval anchored where the store keeps it), or the text NEXT says instead.

    def enqueue_many(self, dispatches: Sequence[Dispatch]) -> list[Exception | None]:
        """Send each dispatch to its job's queue, by name, over one connection.

        Returns one entry per dispatch: None when it was sent, else the broker's error (the
        beat retries those within the job's ``misfire_grace``).
        """


class Sender:
    """The base of an adapter that sends another scheduler's declarations as that scheduler
    sends them (celery beat's ``beat_schedule``, ``rq cron``, periodiq, dramatiq-crontab): no
    job is declared on it with ``@cluster_task``, so it accepts, describes and wraps nothing;
    a subclass names itself and implements ``enqueue_many``."""

    name: str
    declares = False  # left out of the adapters a job can be declared on
    what = "these declarations"  # what it sends, for the error if one is declared on it
    # The tasks it sends run unchanged on the workers, with no guard to refuse a second copy:
    # a failed send is not sent again (as the scheduler it replaces does). A sender whose
    # queue refuses a copy itself (the occurrence's job id, RQ's unique=True) says True.
    refuses_copies = False

    def accepts(self, obj: object, queue: object | None) -> bool:
        return False

    def describe(self, obj: object, queue: object | None) -> TaskRef:
        raise ConfigError(f"{self.what} are not declared with @cluster_task")

    def wrap(self, obj: Any, job: Job) -> Any:
        return obj

    def enqueue_many(self, dispatches: Sequence[Dispatch]) -> list[Exception | None]:
        raise NotImplementedError


def refuses_copies(adapter: object) -> bool:
    """Whether a second copy of what ``adapter`` sends is refused (see ``Adapter``)."""
    return bool(getattr(adapter, "refuses_copies", True))


SENDERS = 2  # threads a large batch is sent from
SPLIT_MIN = 50  # messages each sender gets at least, else one thread sends them all


class Senders:
    """Sends a large batch from ``SENDERS`` threads at once, for an adapter whose library
    waits for the broker's answer after each message (a round trip per send): one thread
    builds and sends its next message while another waits. The threads are kept for the
    life of the process: a broker library may hold a connection per thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def run(self, send: Callable[[Sequence[int]], None], count: int) -> None:
        """Call ``send`` with the indexes ``range(count)``: all at once for a small batch,
        else in ``SENDERS`` interleaved parts from as many threads; return when all are sent.
        """
        if count < SENDERS * SPLIT_MIN:
            send(range(count))
            return
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(SENDERS, thread_name_prefix="cron-bridge-send")
            pool = self._pool
        parts = [pool.submit(send, range(i, count, SENDERS)) for i in range(SENDERS)]
        for part in parts:
            part.result()


_lock = threading.Lock()
_adapters: list[Adapter] | None = None


def installed_adapters() -> Sequence[Adapter]:
    """The adapters registered under the entry point group (and by ``register``), once loaded."""
    global _adapters
    with _lock:
        if _adapters is None:
            _adapters = []
            for point in entry_points(group=ENTRY_POINT_GROUP):
                try:
                    factory = point.load()
                    adapter = factory()
                except Exception as exc:  # noqa: BLE001 - one broken adapter must not hide the others
                    log.warning("cannot load the cron-bridge adapter %r: %s", point.name, exc)
                    continue
                _adapters.append(adapter)
        return tuple(_adapters)


def register(adapter: Adapter) -> None:
    """Add an adapter that is not installed as a distribution (tests, embedded setups)."""
    global _adapters
    loaded = installed_adapters()
    with _lock:
        _adapters = [a for a in loaded if a.name != adapter.name] + [adapter]


def get_adapter(name: str) -> Adapter:
    """The installed adapter called ``name``.

    Raises:
        ConfigError: no adapter of that name is installed.
    """
    for adapter in installed_adapters():
        if adapter.name == name:
            return adapter
    raise ConfigError(
        f"no installed adapter is called {name!r} (installed: {_names()})",
        option="adapter",
        value=name,
    )


def find_adapter(obj: object, queue: object | None, *, job: str) -> Adapter:
    """The adapter that accepts ``obj``.

    Raises:
        ConfigError: naming the installed adapters, when none accepts it.
    """
    for adapter in installed_adapters():
        if adapter.accepts(obj, queue):
            return adapter
    missing = _distribution_for(obj, queue)
    if missing is not None:
        raise ConfigError(
            f"this is a {missing[0]} task, and the {missing[0]} adapter is not installed: "
            f"pip install {missing[1]} (installed: {_names(declaring=True)})",
            job=job,
            option="target",
            value="queue",
        )
    raise ConfigError(
        f"no installed adapter accepts {obj!r} (installed: {_names(declaring=True)}); decorate a "
        'Celery task, a Dramatiq actor or a function with an RQ queue=, or use target="inline"',
        job=job,
        option="target",
        value="queue",
    )


# The adapter distribution for a task (or an RQ queue=) of each library, by the top module of
# its type: what to install when no installed adapter accepts it.
_DISTRIBUTIONS = {
    "celery": ("Celery", "cron-bridge-celery"),
    "dramatiq": ("Dramatiq", "cron-bridge-dramatiq"),
    "rq": ("RQ", "cron-bridge-rq"),
}


def _distribution_for(obj: object, queue: object | None) -> tuple[str, str] | None:
    for value in (obj, queue):
        top = (type(value).__module__ or "").partition(".")[0]
        if top in _DISTRIBUTIONS:
            return _DISTRIBUTIONS[top]
    return None


def _names(*, declaring: bool = False) -> str:
    """The installed adapters' names; ``declaring``: only those a job can be declared on (not
    the senders a beat registers for itself, such as celery beat's schedule entries)."""
    found = [a for a in installed_adapters() if not declaring or getattr(a, "declares", True)]
    return ", ".join(sorted(a.name for a in found)) or "none"
