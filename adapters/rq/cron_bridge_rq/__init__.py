"""The RQ adapter of cron-bridge, and ``rq worker -w cron_bridge_rq.BeatWorker``.

The worker classes that carry a beat (``cron_bridge_rq.beat_worker``) are imported on first
use: a worker that imports this package for the adapter alone loads no beat.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cron_bridge_rq.adapter import RQAdapter

if TYPE_CHECKING:
    from cron_bridge_rq.beat_worker import BeatSimpleWorker, BeatSpawnWorker, BeatWorker

__all__ = ["BeatSimpleWorker", "BeatSpawnWorker", "BeatWorker", "RQAdapter"]

_WORKERS = ("BeatSimpleWorker", "BeatSpawnWorker", "BeatWorker")


def __getattr__(name: str) -> Any:
    if name in _WORKERS:
        from cron_bridge_rq import beat_worker

        return getattr(beat_worker, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
