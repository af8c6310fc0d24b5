"""``cron-bridge import SOURCE``: move another scheduler's stored jobs into stored schedules.

The sources come from the installed adapters (entry point group ``cron_bridge.importers``):
``rq-scheduler`` from the RQ adapter. Each says what it would move first, and moves with
``--apply``."""

from __future__ import annotations

import click

from cron_bridge.cli.main import IMPORTERS_GROUP, Commands

__all__ = ["import_"]


class Importers(Commands):
    entry_point_group = IMPORTERS_GROUP


@click.group("import", cls=Importers)
def import_() -> None:
    """Move another scheduler's jobs into stored schedules (dry run first, then --apply)."""
