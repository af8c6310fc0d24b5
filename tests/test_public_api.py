"""The public face: what ``cron_bridge`` exports is what ``__all__`` says."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import cron_bridge
import cron_bridge.adapters
import cron_bridge.commands
import cron_bridge.stores

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.extras  # each store's driver, for the names made on first use
def test_all_lists_exactly_the_public_names() -> None:
    """Every public attribute is in ``__all__`` and every name in it exists."""
    for module in (cron_bridge, cron_bridge.stores, cron_bridge.adapters, cron_bridge.commands):
        public = {
            name
            for name in vars(module)
            if not name.startswith("_") and not isinstance(getattr(module, name), type(cron_bridge))
        }
        public -= {"annotations"}
        # Names a module makes on first use (stores whose drivers are optional) are public too.
        lazy = set(module.__all__) - public
        assert all(getattr(module, name) is not None for name in lazy), module.__name__
        assert lazy <= {"RedisStore", "PostgresStore"}, module.__name__
        assert public <= set(module.__all__), module.__name__


def test_the_error_hierarchy_has_one_root() -> None:
    """Every error cron-bridge raises on purpose is a CronBridgeError."""
    for error in (cron_bridge.ConfigError, cron_bridge.StoreUnavailable, cron_bridge.Aborted):
        assert issubclass(error, cron_bridge.CronBridgeError)
    assert issubclass(cron_bridge.ConfigError, ValueError)


def test_the_core_and_its_adapters_are_versioned_in_lockstep() -> None:
    """Each adapter pins the core it ships with, and the core's extras pin the adapters, all
    at one version: the interface between them (cron_bridge.adapters) is not versioned apart."""
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    core = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    version = core["version"]
    for library in ("celery", "rq", "dramatiq"):
        adapter = tomllib.loads((root / "adapters" / library / "pyproject.toml").read_text())
        assert adapter["project"]["version"] == version, library
        assert f"cron-bridge=={version}" in adapter["project"]["dependencies"], library
        extra = core["optional-dependencies"][library]
        assert extra == [f"cron-bridge-{library}=={version}"], extra


def test_the_adapters_interfaces_hold_what_the_adapters_import() -> None:
    """``cron_bridge.adapters`` and ``cron_bridge.commands`` export what the three adapter
    distributions import from them, no more: a name none of them uses is not part of the
    interface (a fourth library's adapter asks for it, and it is added then)."""
    for module in (cron_bridge.adapters, cron_bridge.commands):
        used = {
            alias.name
            for path in (REPO / "adapters").rglob("*.py")
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and node.module == module.__name__
            for alias in node.names
        }
        assert used == set(module.__all__), module.__name__
