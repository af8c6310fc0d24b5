"""The Dramatiq adapter of cron-bridge."""

from cron_bridge_dramatiq.adapter import DramatiqAdapter

__all__ = ["DramatiqAdapter"]
