"""How the core finds the installed adapters: the entry point group ``cron_bridge.adapters``
(and ``register``, for one that is not installed as a distribution).

The core never imports Celery, RQ or Dramatiq. Each adapter distribution registers an
``Adapter`` under the entry point group; the core asks each one in turn whether it accepts a
decorated object, so a fourth queue library needs no change here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from importlib.metadata import entry_points

from cron_bridge.errors import ConfigError
from cron_bridge.queues.adapter import Adapter

__all__ = [
    "ENTRY_POINT_GROUP",
    "find_adapter",
    "get_adapter",
    "installed_adapters",
    "register",
]

ENTRY_POINT_GROUP = "cron_bridge.adapters"

log = logging.getLogger(__name__)


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
                wrong = _not_an_adapter(adapter)
                if wrong is not None:
                    log.warning("cannot load the cron-bridge adapter %r: %s", point.name, wrong)
                    continue
                _adapters.append(adapter)
        return tuple(_adapters)


def register(adapter: Adapter) -> None:
    """Add an adapter that is not installed as a distribution (tests, embedded setups).

    Raises:
        TypeError: ``adapter`` is not an ``Adapter`` with a name.
    """
    global _adapters
    wrong = _not_an_adapter(adapter)
    if wrong is not None:
        raise TypeError(wrong)
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
