"""Who runs something: the replica id a beat or a worker writes into the store, every run
record, log line and span."""

from __future__ import annotations

import os
import socket
import uuid

from cron_bridge.errors import ConfigError

__all__ = ["REPLICA_ID_MAX", "check_replica_id", "make_replica_id"]

REPLICA_ID_MAX = 200  # bytes: what every record, the replicas list and a log line can carry


def check_replica_id(replica_id: str) -> str:
    """``replica_id``, once it is a name: printable, no spaces or line breaks (it goes into
    every log line, where a newline would forge one), at most ``REPLICA_ID_MAX`` bytes.

    Raises:
        ConfigError: naming the option and the value (cut).
    """
    fits = isinstance(replica_id, str) and 0 < len(replica_id.encode()) <= REPLICA_ID_MAX
    if not fits or not all(ch.isprintable() and not ch.isspace() for ch in replica_id):
        shown = replica_id[:60] if isinstance(replica_id, str) else replica_id
        raise ConfigError(
            f"expected a name of 1 to {REPLICA_ID_MAX} bytes, printable, without spaces "
            "(a pod's name, say)",
            option="replica_id",
            value=shown,
        )
    return replica_id


def make_replica_id() -> str:
    """``$HOSTNAME`` (else the host name), the pid and a random suffix."""
    host = os.environ.get("HOSTNAME") or socket.gethostname()
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:4]}"
