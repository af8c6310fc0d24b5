"""Plain functions an ``rq cron`` config registers (tests/apps/rq_cron_config.py)."""

from __future__ import annotations


def cleanup() -> str:
    return "cleaned"


def send_report(kind: str, *, to: str = "ops@example.com") -> str:
    return f"{kind} report to {to}"


def sync_accounts(region: str, batch: int = 100) -> str:
    return f"synced {region} in batches of {batch}"
