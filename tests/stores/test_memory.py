"""The memory store: one warning, and no cluster jobs on it in production unless allowed."""

from __future__ import annotations

import logging

import pytest

from cron_bridge import ConfigError
from cron_bridge.stores import MemoryStore


def test_it_logs_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    """Building it warns once that other processes see none of its claims."""
    with caplog.at_level(logging.WARNING, logger="cron_bridge"):
        store = MemoryStore()
        store.ping()
        store.claim_many([], "me")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "this process only" in warnings[0].getMessage()


def test_cluster_jobs_refuse_it_in_production(monkeypatch: pytest.MonkeyPatch) -> None:
    """With CRON_BRIDGE_ENV=production it refuses, unless allow_local_cluster=True."""
    monkeypatch.setenv("CRON_BRIDGE_ENV", "production")
    with pytest.raises(ConfigError, match="allow_local_cluster"):
        MemoryStore().ensure_cluster_capable()
    MemoryStore(allow_local_cluster=True).ensure_cluster_capable()
    monkeypatch.setenv("CRON_BRIDGE_ENV", "development")
    MemoryStore().ensure_cluster_capable()
