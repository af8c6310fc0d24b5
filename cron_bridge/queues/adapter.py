"""``Adapter``, the one base class of every queue library's adapter, and the values the core
hands it (``TaskRef``, ``Dispatch``).

Every member an adapter may have is on ``Adapter``, the optional ones with the default a
library without the feature wants, so the core never asks an adapter whether it has one. What
an adapter *is* (its name, whether a copy of its messages is refused, whether jobs are declared
on it, its stored-schedule task) is given as class keywords, which Python and mypy check by
name::

    class RQAdapter(Adapter, name="rq", stored_task="cron_bridge_rq.stored.run_stored"):

What it does, and what it finds in the imported modules (which can depend on what they
declare), are methods and properties, each marked ``@override`` where an adapter overrides
it: with mypy's ``explicit-override`` on, a misspelt member is an error either way.
"""

from __future__ import annotations

import difflib
import sys
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from cron_bridge.errors import ConfigError

if TYPE_CHECKING:
    from cron_bridge.context import Trigger
    from cron_bridge.jobs import Job, Occurrence
    from cron_bridge.stores import Store

__all__ = ["Adapter", "Dispatch", "TaskRef", "override"]

_F = TypeVar("_F", bound=Callable[..., Any])

if TYPE_CHECKING:
    # What mypy checks; typing_extensions is only read by it here, never needed at run time.
    from typing_extensions import override
elif sys.version_info >= (3, 12):
    from typing import override
else:

    def override(method: _F) -> _F:
        """``typing.override`` (Python 3.12) on 3.11: marks an override for mypy, does nothing."""
        return method


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
    # This send's own name: of the copies of one occurrence's message (the claimer's, and a
    # takeover's or a resend's that may have landed beside it), the worker runs the first
    # that begins, and refuses the others (``keys.began_key``).
    copy: str = field(default_factory=lambda: uuid.uuid4().hex[:16])

    def meta(self) -> dict[str, Any]:
        """What travels in the message, as JSON-ready values (never pickled)."""
        meta: dict[str, Any] = {
            "job": self.job.name,
            "occurrence_id": self.occurrence.id,
            "scheduled_at": self.occurrence.scheduled_at.isoformat(),
            "trigger": self.trigger,
            "replica": self.replica,
            "attempts": self.job.attempts,
            "copy": self.copy,
        }
        if self.trace:
            meta["trace"] = dict(self.trace)
        return meta


class Adapter(ABC):
    """What a queue library's adapter provides to the core.

    Class keywords (each left out keeps the default, or what a base adapter said):

    - ``name``: the adapter's name, what ``Job.adapter`` holds (required).
    - ``refuses_copies`` (True): whether a second copy of one of its messages is refused, by
      the guard on the worker (the completion mark, the overlap lock) or the queue's own dedup
      (RQ's unique job ids). Where nothing would refuse it, a failed send is not sent again: it
      may have reached the broker (a lost answer), and the broker library's own retries
      (redis-py's, kombu's) can hide that behind a later error.
    - ``declares`` (True): whether jobs are declared on it with ``@cluster_task``; False for a
      drop-in sender, left out of the adapters an error about a declaration lists.
    - ``stored_task`` (None): the task stored schedules of this library are sent to, by name;
      None when the adapter cannot run stored schedules.
    - ``own`` (none): public names of the adapter's own that are near one of the interface's
      (else refused when the class is made, as a misspelling of it).
    """

    name: ClassVar[str] = ""
    refuses_copies: ClassVar[bool] = True
    declares: ClassVar[bool] = True
    stored_task: ClassVar[str | None] = None

    @override
    def __init_subclass__(
        cls,
        *,
        name: str | None = None,
        refuses_copies: bool | None = None,
        declares: bool | None = None,
        stored_task: str | None = None,
        own: Sequence[str] = (),
    ) -> None:
        super().__init_subclass__()
        _refuse_misspelt(cls, own)
        if name is not None:
            cls.name = name
        if refuses_copies is not None:
            cls.refuses_copies = refuses_copies
        if declares is not None:
            cls.declares = declares
        if stored_task is not None:
            cls.stored_task = stored_task

    @abstractmethod
    def accepts(self, obj: object, queue: object | None) -> bool:
        """Whether ``obj`` (with the declaration's ``queue=``) is this library's task."""

    @abstractmethod
    def describe(self, obj: object, queue: object | None) -> TaskRef:
        """Name the task for the job; raises ``ConfigError`` when it cannot be named."""

    @abstractmethod
    def wrap(self, obj: Any, job: Job) -> Any:
        """What ``@cluster_task`` returns for ``obj``: the task, now running under the guard."""

    @abstractmethod
    def enqueue_many(self, dispatches: Sequence[Dispatch]) -> list[Exception | None]:
        """Send each dispatch to its job's queue, by name, over one connection.

        Returns one entry per dispatch: None when it was sent, else the broker's error (the
        beat retries those within the job's ``misfire_grace``).
        """

    def check_send(self, options: Mapping[str, Any]) -> None:
        """Refuse a ``Job.send`` (what a stored schedule hands the library with each message)
        that the library cannot take.

        By default the library takes none: any option is refused.

        Raises:
            ConfigError: naming the option and the value.
        """
        if options:
            raise ConfigError(
                f"the {self.name} adapter takes no send options",
                option="send",
                value=dict(options),
            )

    def declared_in(self, modules: Sequence[ModuleType]) -> list[Job]:
        """The jobs the library's own schedule declarations in ``modules`` (imported) make, for
        listings (Celery's ``beat_schedule``, ``rq cron`` registrations); none by default."""
        return []

    @property
    def declared_as(self) -> str:
        """What ``declared_in``'s jobs are called, for listings (the adapter's name by default)."""
        return self.name

    @property
    def runs_with(self) -> str:
        """The command that runs ``declared_in``'s jobs, ``{modules}`` standing for the modules
        given; empty by default (none to name)."""
        return ""

    def as_listed(self, store: Store | None, jobs: Sequence[Job]) -> dict[str, Job | str]:
        """How ``cron-bridge list`` shows some of ``jobs``, by name, given the store (or None):
        a job to read NEXT from (an ``rq cron`` interval anchored where the store keeps it), or
        the text NEXT says instead. None of them by default."""
        return {}


def _refuse_misspelt(cls: type, own: Sequence[str]) -> None:
    """Raise ``TypeError`` for a public name ``cls`` defines that is nearly, but not, one of
    the interface's of the same kind (a trait for a trait, a method or property for one):
    ``refuse_copies = False``, or an optional member misspelt without ``@override``, would
    otherwise keep the default and turn a feature off silently. A name of the adapter's own
    that happens to be near one is listed in the class keyword ``own``."""
    interface = [base for base in cls.__mro__[1:] if base.__module__.startswith("cron_bridge.")]
    known = {n: v for base in interface for n, v in vars(base).items() if not n.startswith("_")}
    inherited = {n for base in cls.__mro__[1:] for n in vars(base)}
    for name, value in vars(cls).items():
        if name.startswith("_") or name in inherited or name in own:
            continue
        alike = [n for n, v in known.items() if _is_member(v) == _is_member(value)]
        near = difflib.get_close_matches(name, alike, n=1, cutoff=0.8)
        if near:
            raise TypeError(
                f"{cls.__qualname__}.{name} is no member of the adapter interface: did you "
                f"mean {near[0]!r}? (a name of its own goes in the class keyword own=)"
            )


def _is_member(value: object) -> bool:
    """A method or property, as against a trait (a plain class attribute)."""
    return callable(value) or isinstance(value, property | classmethod | staticmethod)
