"""The RQ adapter of cron-bridge."""

from cron_bridge_rq.adapter import RQAdapter

__all__ = ["RQAdapter"]
