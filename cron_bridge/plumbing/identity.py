"""Who runs something: the replica id a beat or a worker writes into the store, every run
record, log line and span."""

from __future__ import annotations

import os
import socket
import uuid

__all__ = ["make_replica_id"]


def make_replica_id() -> str:
    """``$HOSTNAME`` (else the host name), the pid and a random suffix."""
    host = os.environ.get("HOSTNAME") or socket.gethostname()
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:4]}"
