"""Storable tasks: the allow-list of what a stored schedule may name. It fails closed.

A stored schedule is data in the store, and whoever can write there (the HTTP API with the
secret, the CLI, any process with the store's credentials) must not be able to run code the
team did not agree to run that way. A task is agreed to when, in the process that checks:

- it is declared with ``@cluster_task`` (the team wrote it to run on a schedule), or
- it is marked ``@storable`` (written to be run from stored schedules), or
- ``CRON_BRIDGE_STORED_TASKS`` names it: a comma-separated list of task names, and of module
  prefixes ending in ``.*`` (``proj.reports.*`` agrees to every task of ``proj.reports`` and
  its submodules). A bare ``*`` is not honoured: it would agree to everything.

Workers check every delivery before they import or call anything (an RQ worker imports a
module only when it is already loaded or the environment names it); the HTTP API, the CLI and
``StoredSchedules.add`` check the name when it is added, where that process knows the tasks.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TypeVar

from cron_bridge.queues.installed import find_adapter

__all__ = ["ENV", "HANDLER_ATTR", "agree", "agreed", "listed", "refusal", "storable"]

log = logging.getLogger(__name__)

ENV = "CRON_BRIDGE_STORED_TASKS"
HANDLER_ATTR = "__cron_bridge_handler__"
"""Set by an adapter on the wrapper it installs: the task's own function, which takes ``ctx``
first. A stored schedule naming a ``@cluster_task`` task calls that, under its own guard."""

T = TypeVar("T")

_lock = threading.Lock()
_agreed: set[tuple[str, str]] = set()  # (library, task name)
_warned: set[str] = set()


def agree(library: str, task: str) -> None:
    """Agree to stored schedules naming ``task`` of ``library`` in this process."""
    with _lock:
        _agreed.add((library, task))


def storable(obj: T) -> T:
    """Mark a task as one stored schedules may name: ``@storable`` above ``@app.task``,
    ``@dramatiq.actor`` or an RQ function (below ``@cluster_task`` when it has both).

    Raises:
        ConfigError: no installed adapter takes ``obj``.
    """
    shown = getattr(obj, "__name__", None) or type(obj).__name__
    # An RQ task is a plain function; the queue is the stored schedule's, so any name does.
    adapter = find_adapter(obj, "", job=str(shown))
    agree(adapter.name, adapter.describe(obj, "").task)
    return obj


def listed(task: str) -> bool:
    """Whether ``CRON_BRIDGE_STORED_TASKS`` names ``task`` or a module prefix of it."""
    for pattern in _patterns(os.environ.get(ENV, "")):
        if pattern.endswith(".*"):
            if task.startswith(pattern[:-1]):
                return True
        elif task == pattern:
            return True
    return False


def agreed(library: str, task: str) -> bool:
    """Whether a stored schedule may name ``task`` of ``library`` in this process."""
    with _lock:
        known = (library, task) in _agreed
    return known or listed(task)


def refusal(
    library: str, task: str, *, unloaded: Callable[[str], str | None] | None = None
) -> str | None:
    """Why a stored schedule naming ``task`` is refused here; None when it is agreed to.

    Args:
        library: the adapter's name.
        task: the task the schedule names.
        unloaded: asked only once the task is refused: how this worker would load the task
            when it has not loaded it (None when it has). A task whose module was never
            imported here cannot have said it is ``@cluster_task`` or ``@storable``, so the
            refusal says what is missing rather than how to declare it.
    """
    if agreed(library, task):
        return None
    missing = unloaded(task) if unloaded is not None else None
    if missing is not None:
        return (
            f"the {library} task {task!r:.200} is not loaded in this worker, so whether it is "
            f"declared with @cluster_task or marked @storable is not known here: {missing}"
        )
    return (
        f"the {library} task {task!r:.200} is not one stored schedules may name here: declare it "
        f"with @cluster_task, mark it @storable, or list it in {ENV}"
    )


def _patterns(text: str) -> list[str]:
    found = []
    for part in text.replace(" ", ",").split(","):
        pattern = part.strip()
        if not pattern:
            continue
        if pattern in ("*", ".*") or pattern.startswith("*"):
            with _lock:
                first = pattern not in _warned
                _warned.add(pattern)
            if first:
                log.warning("%s: %r is not honoured: it would agree to every task", ENV, pattern)
            continue
        found.append(pattern)
    return found
