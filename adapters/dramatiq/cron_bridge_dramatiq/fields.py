"""Cron fields written from the values another scheduler expanded: the drop-ins read a
periodiq ``CronSpec`` or an APScheduler ``CronTrigger`` for the values each matches, never
its text, so that a spec means here what it meant there."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from cron_bridge.adapters import ConfigError

__all__ = ["cron_field"]


def cron_field(values: Iterable[int], low: int, high: int) -> str:
    """One cron field matching exactly ``values`` (those outside ``low``-``high`` left out),
    written short: ``*`` (every value from ``low`` to ``high``), ``*/15``, ``1-5``, ``0,30``.

    Raises:
        ConfigError: no value between ``low`` and ``high`` (the field never matches).
    """
    found = sorted({value for value in values if low <= value <= high})
    if not found:
        raise ConfigError(f"never fires: no value of the field is within {low}-{high}")
    if found == list(range(low, high + 1)):
        return "*"
    steps = {b - a for a, b in itertools.pairwise(found)}
    if len(found) > 2 and len(steps) == 1 and (step := steps.pop()) > 1:
        if found[0] == low and found[-1] + step > high:
            return f"*/{step}"
        return f"{found[0]}-{found[-1]}/{step}"
    runs: list[list[int]] = []
    for value in found:
        if runs and value == runs[-1][-1] + 1:
            runs[-1].append(value)
        else:
            runs.append([value])
    return ",".join(
        f"{run[0]}-{run[-1]}" if len(run) > 2 else ",".join(map(str, run)) for run in runs
    )
