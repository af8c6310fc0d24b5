"""RQ job ids made from occurrences: the same occurrence always gets the same id, so RQ can
refuse a second send of it (``unique=True``)."""

from __future__ import annotations

import hashlib
import re

from cron_bridge.adapters import Occurrence

__all__ = ["rq_job_id"]

_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_-]")


def rq_job_id(occurrence: Occurrence) -> str:
    """An RQ job id for an occurrence: only ``[A-Za-z0-9_-]``, one per occurrence.

    The job name is shown with other characters replaced, plus a short digest of the real
    name, so ``a.b`` and ``a_b`` never share an id.
    """
    digest = hashlib.sha1(occurrence.job.encode(), usedforsecurity=False).hexdigest()[:8]
    return f"cb-{_NOT_ALLOWED.sub('_', occurrence.job)}-{digest}-{occurrence.epoch_ms}"
