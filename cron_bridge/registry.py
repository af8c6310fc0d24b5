"""Where declared jobs are kept, and ``@cluster_task``, which declares them."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, TypeVar, Unpack

from cron_bridge.errors import ConfigError
from cron_bridge.jobs import Job, declare
from cron_bridge.options import JobOptions, check_names
from cron_bridge.queues.installed import find_adapter
from cron_bridge.storable import agree

__all__ = ["Registry", "cluster_task", "default_registry"]

T = TypeVar("T")


class Registry:
    """Jobs by name. A name is declared once; declaring it again from elsewhere is an error."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, tuple[Job, str | None]] = {}

    def add(self, job: Job, *, origin: str | None = None) -> None:
        """Register ``job``.

        Args:
            job: the job.
            origin: where it was declared (``module:qualname``). The same origin declaring the
                same name again (a module reload) replaces the job instead of failing.

        Raises:
            ConfigError: the name is taken by another declaration.
        """
        with self._lock:
            known = self._jobs.get(job.name)
            if known is not None and (origin is None or known[1] != origin):
                raise ConfigError(
                    f"the name is already declared by {known[1] or 'another job'}",
                    job=job.name,
                    option="name",
                    value=job.name,
                )
            self._jobs[job.name] = (job, origin)

    def remove(self, name: str) -> Job | None:
        """Forget the job called ``name``; returns it, or None when there was none."""
        with self._lock:
            entry = self._jobs.pop(name, None)
        return None if entry is None else entry[0]

    def get(self, name: str) -> Job | None:
        entry = self._jobs.get(name)
        return None if entry is None else entry[0]

    def jobs(self) -> list[Job]:
        with self._lock:
            return [job for job, _ in self._jobs.values()]

    def clear(self) -> None:
        with self._lock:
            self._jobs.clear()

    def __iter__(self) -> Iterator[Job]:
        return iter(self.jobs())

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, name: object) -> bool:
        return name in self._jobs


default_registry = Registry()


def cluster_task(
    *,
    name: str | None = None,
    queue: Any = None,
    registry: Registry | None = None,
    **options: Unpack[JobOptions],
) -> Callable[[T], T]:
    """Declare a scheduled job on top of a queue library's task, or on a plain function.

    Put it above ``@app.task``, ``@shared_task`` or ``@dramatiq.actor``; above a plain
    function with ``queue=`` for RQ; or above a plain function with ``target="inline"`` to
    run it in the beat itself. Every option and its default is described in "Jobs and
    schedules" (docs/jobs.md).

    Args:
        name: the job's name (default: the task's, or the function's module and name).
        queue: the queue to send to (default: the task's); for RQ an ``rq.Queue`` or a name.
        registry: where the job is kept (default: ``default_registry``).
        **options: the job's options (``cron_bridge.options.JobOptions``).

    Raises:
        ConfigError: at import, naming the job, the option and the value.
        TypeError: an option there is none of.
    """
    check_names(options, JobOptions, caller="cluster_task")  # now, not once decorating
    target = options.pop("target", "queue")
    rest: dict[str, Any] = dict(options)  # without the target, which each path sets
    jobs = default_registry if registry is None else registry

    def decorate(obj: T) -> T:
        if target == "inline":
            origin = _origin(obj)
            job_name = origin.replace(":", ".") if name is None else name
            job = declare(
                job_name, target="inline", handler=_callable(obj, job_name), queue=queue, **rest
            )
            jobs.add(job, origin=origin)
            return obj
        shown = name or getattr(obj, "__name__", None) or type(obj).__name__
        if target != "queue":
            raise ConfigError(
                'expected "queue" or "inline"', job=shown, option="target", value=target
            )
        adapter = find_adapter(obj, queue, job=shown)
        ref = adapter.describe(obj, queue)
        _check_home(
            obj, ref.home, caller=sys._getframe(1).f_globals.get("__name__"), job=name or ref.name
        )
        job = declare(
            ref.name if name is None else name,
            target="queue",
            queue=ref.queue,
            adapter=adapter.name,
            task=ref.task,
            **rest,
        )
        wrapped: T = adapter.wrap(obj, job)
        agree(adapter.name, ref.task)  # stored schedules may name a task declared in code
        jobs.add(
            replace(job, handler=_callable(wrapped, job.name)), origin=f"{adapter.name}:{ref.task}"
        )
        return wrapped

    return decorate


def _check_home(obj: object, home: tuple[str, str] | None, *, caller: str | None, job: str) -> None:
    """Refuse to decorate a task that was imported into another module: its worker imports it
    from its own module, where it is not decorated, and would run it without the guard.

    Told apart from a decorator applied where the task is defined by the module's own
    attribute: under ``@cluster_task`` the name is bound only once the decorator returns.

    Raises:
        ConfigError: naming the job, where the task lives and how to declare it.
    """
    if home is None or caller is None:
        return
    module_name, attribute = home
    module = sys.modules.get(module_name)
    if caller == module_name or module is None or getattr(module, attribute, None) is not obj:
        return
    raise ConfigError(
        f"{module_name}.{attribute} is decorated in {caller}, but a worker imports it from "
        f"{module_name}, where it is not: it would run without the guard and without ctx. "
        f"Put @cluster_task(...) above its definition in {module_name} (an rq cron config runs "
        "unchanged with `cron-bridge rq-cron CONFIG`)",
        job=job,
        option="target",
        value=f"{module_name}.{attribute}",
    )


def _origin(obj: object) -> str:
    module = getattr(obj, "__module__", None) or "?"
    qualname = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{module}:{qualname}"


def _callable(obj: object, job: str) -> Callable[..., Any]:
    if not callable(obj):
        raise ConfigError("expected a callable", job=job, option="target", value=obj)
    return obj
