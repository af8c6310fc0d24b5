"""How the core finds the installed adapters: the entry point group ``cron_bridge.adapters``
(and ``register``, for one that is not installed as a distribution).

The core never imports Celery, RQ or Dramatiq. Each adapter distribution registers an
``Adapter`` under the entry point group; the core asks each one in turn whether it accepts a
decorated object, so a fourth queue library needs no change here.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, entry_points

from cron_bridge.errors import ConfigError
from cron_bridge.queues.adapter import Adapter

__all__ = [
    "ENTRY_POINT_GROUP",
    "find_adapter",
    "get_adapter",
    "imported_adapters",
    "installed_adapters",
    "register",
]

ENTRY_POINT_GROUP = "cron_bridge.adapters"

log = logging.getLogger(__name__)


_lock = threading.Lock()
_points: tuple[EntryPoint, ...] | None = None  # the group's entry points, read once
_loaded: dict[str, Adapter | None] = {}  # by entry point name, each loaded once (None: broken)
_registered: dict[str, Adapter] = {}  # by ``register``, by name: they win over the installed


def _load(point: EntryPoint) -> Adapter | None:
    """The adapter an entry point names, loaded once (under ``_lock``); None, said once, when
    it cannot be."""
    if point.name not in _loaded:
        adapter: Adapter | None = None
        try:
            factory = point.load()
            made = factory()
        except Exception as exc:  # noqa: BLE001 - one broken adapter must not hide the others
            log.warning("cannot load the cron-bridge adapter %r: %s", point.name, exc)
        else:
            wrong = _not_an_adapter(made)
            if wrong is not None:
                log.warning("cannot load the cron-bridge adapter %r: %s", point.name, wrong)
            else:
                adapter = made
        _loaded[point.name] = adapter
    return _loaded[point.name]


def _adapters(wanted: Callable[[str], bool]) -> tuple[Adapter, ...]:
    global _points
    with _lock:
        if _points is None:  # reading the installed distributions' metadata takes a while
            _points = tuple(entry_points(group=ENTRY_POINT_GROUP))
        found = [
            adapter
            for point in _points
            if wanted(point.name) and (adapter := _load(point)) is not None
        ]
        found = [a for a in found if a.name not in _registered]
        return (*found, *_registered.values())


def installed_adapters() -> Sequence[Adapter]:
    """The adapters registered under the entry point group (and by ``register``), once loaded."""
    return _adapters(lambda _: True)


def imported_adapters() -> Sequence[Adapter]:
    """The installed adapters whose queue library this process has imported already (an
    adapter's entry point is named after its library), and those registered: the ones that
    can find a declaration among the loaded modules. The others are not loaded: importing
    Celery, RQ or Dramatiq for nothing is most of a short command's start."""
    return _adapters(lambda name: name in sys.modules)


def register(adapter: Adapter) -> None:
    """Add an adapter that is not installed as a distribution (tests, embedded setups).

    Raises:
        TypeError: ``adapter`` is not an ``Adapter`` with a name.
    """
    wrong = _not_an_adapter(adapter)
    if wrong is not None:
        raise TypeError(wrong)
    with _lock:
        _registered.pop(adapter.name, None)
        _registered[adapter.name] = adapter


def get_adapter(name: str) -> Adapter:
    """The installed adapter called ``name``.

    Raises:
        ConfigError: no adapter of that name is installed.
    """
    with _lock:
        if name in _registered:
            return _registered[name]
        known = _loaded.get(name)
    if known is not None and known.name == name:  # asked for each stored schedule: at once
        return known
    for adapter in _adapters(lambda point: point == name):  # its own entry point, if named so
        if adapter.name == name:
            return adapter
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


def _not_an_adapter(adapter: object) -> str | None:
    """Why ``adapter`` cannot be one (the core reads every member ``Adapter`` has), or None."""
    if not isinstance(adapter, Adapter):
        return f"{adapter!r:.200} is not a subclass of cron_bridge.adapters.Adapter"
    if not adapter.name:
        kind = type(adapter).__qualname__
        return f"{kind} has no name: give it as a class keyword, class {kind}(Adapter, name=...)"
    return None


def _names(*, declaring: bool = False) -> str:
    """The installed adapters' names; ``declaring``: only those a job can be declared on (not
    the senders a beat registers for itself, such as celery beat's schedule entries)."""
    found = [a for a in installed_adapters() if not declaring or a.declares]
    return ", ".join(sorted(a.name for a in found)) or "none"
