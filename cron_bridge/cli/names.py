"""Job names given on the command line, checked against the jobs the cluster knows: a typo
gets one line with the closest names and exit 2, never a pause of a job that does not exist."""

from __future__ import annotations

import difflib
import sys

from cron_bridge.cli.common import fail, load_app
from cron_bridge.control import catalog
from cron_bridge.control import pause as control
from cron_bridge.control.schedules import StoredSchedules
from cron_bridge.queues.installed import imported_adapters
from cron_bridge.stores import Store

__all__ = ["check_name", "known_names"]

SHOWN = 10  # names listed when none is close


def known_names(store: Store, app: tuple[str, ...]) -> set[str]:
    """The jobs the cluster knows: those its replicas published (the catalog), the stored
    schedules, the paused ones, and the jobs of ``app`` when given."""
    known = (
        set(catalog.read(store)) | set(StoredSchedules(store).list()) | set(control.paused(store))
    )
    if app:
        known |= {job.name for job in load_app(app)}
        loaded = [sys.modules[name] for name in app if name in sys.modules]
        for adapter in imported_adapters():
            known |= {job.name for job in adapter.declared_in(loaded)}
    return known


_RECORDS_LOOKED_AT = 50


def _is_known(store: Store, name: str, app: tuple[str, ...]) -> bool:
    """Whether the cluster knows ``name``, in a few reads of it alone (every name is read
    only to suggest some for one it does not know)."""
    return (
        catalog.entry(store, name) is not None
        or StoredSchedules(store).get(name) is not None
        or control.pause_of(store, name) is not None
        or (bool(app) and name in {job.name for job in load_app(app)})
    )


def check_name(store: Store, name: str, app: tuple[str, ...], *, records: bool = False) -> None:
    """Exit 2 with one line unless ``name`` is a job the cluster knows (or, with ``records``,
    one the store has run records of: a job since removed from the code still has history).
    """
    if _is_known(store, name, app):
        return
    # Several records, not one: the newest may be one the store skips as unreadable.
    if records and store.history(name, _RECORDS_LOOKED_AT):
        return
    known = known_names(store, app)  # every name, for the suggestions
    if name in known:
        return
    if not known:
        fail(
            f"no job called {name!r} is known: no beat has published its jobs to this store "
            "yet; give the module that declares it with -A"
        )
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    if close:
        fail(f"no job called {name!r} (did you mean {', '.join(repr(c) for c in close)}?)")
    listed = sorted(known)
    more = f", and {len(listed) - SHOWN} more" if len(listed) > SHOWN else ""
    fail(f"no job called {name!r} (known: {', '.join(listed[:SHOWN])}{more})")
