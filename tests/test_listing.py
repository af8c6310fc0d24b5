"""``cron-bridge list``'s names: a page of the jobs the modules declare and the stored
schedules, merged by name, read without the names past it (``listing._names``)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from cron_bridge.cli.listing import _names
from cron_bridge.control.schedules import GROUP
from cron_bridge.stores import store_from_url

_name = st.text(alphabet="abz.-é日", min_size=1, max_size=4)


@settings(max_examples=200, deadline=None, database=None)
@given(
    declared=st.sets(_name, max_size=6),
    stored=st.sets(_name, max_size=12),
    first=st.one_of(st.none(), st.integers(0, 20)),
)
def test_a_page_of_names_is_the_slice_of_every_name_each_once(
    declared: set[str], stored: set[str], first: int | None
) -> None:
    """The first ``first`` names (or all) are the slice of the sorted union, a name both
    declared and stored listed once, and the count is the union's size: whichever names
    the store holds past the page, and whichever of them the modules declare too."""
    store = store_from_url("memory://")
    store.put_controls(GROUP, {name: json.dumps({"name": name}) for name in stored})
    names = sorted(declared | stored)
    assert _names(declared, store, first) == (names if first is None else names[:first], len(names))
    assert _names(declared, None, first) == (
        sorted(declared) if first is None else sorted(declared)[:first],
        len(declared),
    )
