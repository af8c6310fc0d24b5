"""The formats cron-bridge writes in one place and reads in another, each defined once: the
keys claimed and locked in every store, and the owner an overlap lock holds.

Wire formats: a change here is a change every replica and worker of a cluster must agree on.
"""

from __future__ import annotations

__all__ = [
    "began_key",
    "catch_up_key",
    "claim_key",
    "done_key",
    "lock_key",
    "lock_owner",
    "parse_claim_key",
    "parse_lock_owner",
]


def claim_key(job: str, epoch_ms: int) -> str:
    """The occurrence claim: ``occ:<job>:<epoch ms>``, created once and never released."""
    return f"occ:{job}:{epoch_ms}"


def parse_claim_key(key: str) -> tuple[str, int] | None:
    """The job and epoch milliseconds a claim key names; None for anything else (a pending
    claim's key is store data: whoever wrote it)."""
    if len(key) > 2000 or not key.startswith("occ:"):
        return None
    job, _, ms = key[4:].rpartition(":")
    if not job or not ms.isascii() or not ms.isdigit() or len(ms) > 15:
        return None
    return job, int(ms)


def lock_key(job: str) -> str:
    """A job's overlap lock: ``active:<job>``."""
    return f"active:{job}"


def done_key(job: str, epoch_ms: int) -> str:
    """An occurrence's completion mark: ``done:<job>:<epoch ms>``, written when a run completes
    so that a second delivery of the same message finds it (``skipped-completed``)."""
    return f"done:{job}:{epoch_ms}"


def began_key(job: str, epoch_ms: int) -> str:
    """Which copy of an occurrence's message began its run: ``began:<job>:<epoch ms>``,
    holding the copy's name (``Dispatch.copy``), so that another copy (a takeover's, a resend
    after a send that failed but landed) is refused once one began, whatever its run did."""
    return f"began:{job}:{epoch_ms}"


DONE = "completed"  # what a completion mark holds; any other value marks nothing
NONCE = 8  # hex digits after ``<copy>|`` in a began mark: one per try of the copy


def began_mark(copy: str, nonce: str) -> str:
    """A began mark's value for one try of ``copy``: ``<copy>|<nonce>``."""
    return f"{copy}|{nonce}"


def began_by(mark: str, copy: str) -> bool:
    """Whether the began mark ``mark`` is one a try of ``copy`` wrote: ``<copy>|`` and
    ``NONCE`` lowercase hex digits, nothing else (``lua/admit.lua`` asks the same)."""
    nonce = mark[len(copy) + 1 :]
    return (
        mark.startswith(copy + "|")
        and len(nonce) == NONCE
        and all(c in "0123456789abcdef" for c in nonce)
    )


def catch_up_key(job: str, epoch_ms: int) -> str:
    """The claim of the one catch-up run of a paused occurrence: ``catchup:<job>:<epoch ms>``."""
    return f"catchup:{job}:{epoch_ms}"


def lock_owner(replica: str, occurrence_id: str, nonce: str) -> str:
    """What an overlap lock holds: ``<replica>|<occurrence id>|<nonce>``, so that a refused run
    can say who holds it and the dashboard can show what runs."""
    return f"{replica}|{occurrence_id}|{nonce}"


def parse_lock_owner(owner: str | None) -> tuple[str, str] | None:
    """The replica and occurrence id an owner names; None for anything else (a lock is store
    data: whoever wrote it)."""
    if not owner or len(owner) > 2000 or owner.count("|") != 2:
        return None
    replica, occurrence_id, _ = owner.split("|")
    return (replica, occurrence_id) if replica and occurrence_id else None
