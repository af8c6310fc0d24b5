"""The Dramatiq adapter of cron-bridge, and ``BeatMiddleware``: the beat in a ``dramatiq``
process tree.

``BeatMiddleware`` (``cron_bridge_dramatiq.beat``) is imported on first use: a worker that
imports this package for the adapter alone loads no beat.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cron_bridge_dramatiq.adapter import DramatiqAdapter

if TYPE_CHECKING:
    from cron_bridge_dramatiq.beat import BeatMiddleware

__all__ = ["BeatMiddleware", "DramatiqAdapter"]


def __getattr__(name: str) -> Any:
    if name == "BeatMiddleware":
        from cron_bridge_dramatiq.beat import BeatMiddleware

        return BeatMiddleware
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
