"""``cron-bridge list --limit/--offset`` against every shared store: each page is the slice of
the full listing, whatever the names, and whatever numbers a user gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cron_bridge.cli.main import main
from cron_bridge.control.schedules import GROUP, StoredSchedules
from tests.conftest import StoreKit, make_kit
from tests.stores import test_hostile_bytes as hostile_bytes

pytestmark = pytest.mark.extras

APP = "tests.apps.cli_app"  # declares billing.broken, cache.warm, reports.minutely
# Case, punctuation and a declared job's own name among the stored schedules: code-point
# order puts "B" before "_" before "a", whatever a database's collation says.
STORED = ["Billing.z", "billing.a", "cache.warm", "cache.Warm", "a-b", "a.b", "a_b", "A0", "z.9"]


def _listed(url: str, *extra: str) -> list[str]:
    done = CliRunner().invoke(main, ["list", "-A", APP, "--store", url, "--json", *extra])
    assert done.exit_code == 0, done.output[-800:]
    return [row["name"] for row in json.loads(done.output)]


@pytest.fixture
def stored(shared_kit: StoreKit, monkeypatch: pytest.MonkeyPatch) -> StoreKit:
    monkeypatch.setenv("CRON_BRIDGE_STORED_TASKS", "proj.*")
    store = shared_kit.open()
    StoredSchedules(store).add_many(
        [{"name": n, "library": "rq", "task": "proj.x", "every": "1h"} for n in STORED]
    )
    return shared_kit


def test_every_page_of_a_listing_is_the_slice_of_the_whole_listing(stored: StoreKit) -> None:
    whole = _listed(stored.url)
    assert whole == sorted(whole) and len(whole) == len(set(whole)) == len(STORED) + 2
    for limit in (1, 2, 3, 5, 20):
        for offset in range(len(whole) + 2):
            page = _listed(stored.url, "--limit", str(limit), "--offset", str(offset))
            assert page == whole[offset : offset + limit], (limit, offset)


@pytest.mark.parametrize(
    "extra",
    [
        ["--limit", str(10**20)],
        ["--limit", "3", "--offset", str(10**20)],
        ["--limit", str(2**63), "--offset", str(2**63)],
    ],
)
def test_a_page_past_any_store_s_integers_is_listed_not_a_traceback(
    stored: StoreKit, extra: list[str]
) -> None:
    """A limit or offset no store's integers hold (SQLite's and PostgreSQL's 64 bits, the
    numbers of a Redis script) pages as any other: the listing's slice."""
    whole = _listed(stored.url)
    limit = int(extra[1])
    offset = int(extra[3]) if len(extra) > 2 else 0
    assert _listed(stored.url, *extra) == whole[offset : offset + limit]


@pytest.mark.parametrize("kind", ["sqlite", "redis", "postgres", "nats"])
def test_a_name_no_store_can_read_costs_no_other_name_its_page(
    kind: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Names written past the store that no reader takes (more than 1,000 bytes, bytes that
    are not UTF-8) sort among the first: each page is still the slice of the whole listing,
    so no readable schedule falls between two pages."""
    monkeypatch.setenv("CRON_BRIDGE_STORED_TASKS", "proj.*")
    kit = make_kit(kind, request, tmp_path)
    try:
        store = kit.open()
        StoredSchedules(store).add_many(
            [{"name": f"a.{n}", "library": "rq", "task": "proj.x", "every": "1h"} for n in range(6)]
        )
        raw = hostile_bytes.Raw(kit, store)
        hostile = [b"a.0" + b"x" * 1000, b"a.2" + b"y" * 2000]
        if kind != "postgres":  # its text is UTF-8, whatever a peer writes
            hostile.append(b"a.1\xff")
        for key in hostile:
            raw.write(hostile_bytes.Write(GROUP, key, b"{}", hostile_bytes.PAGE))
        whole = _listed(kit.url)
        assert whole[:6] == [f"a.{n}" for n in range(6)]
        for limit in (1, 2, 3, 4):
            for offset in range(len(whole) + 1):
                page = _listed(kit.url, "--limit", str(limit), "--offset", str(offset))
                assert page == whole[offset : offset + limit], (limit, offset)
    finally:
        kit.close()
