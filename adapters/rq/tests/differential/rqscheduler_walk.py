"""rq-scheduler's side of test_rqscheduler.py (beside it), run with the floor venv's
interpreter (the only one with rq-scheduler: its ``crontab`` module cannot live beside
django-celery-beat's). Reads one JSON request a line, ``{"cron", "zone", "start", "end",
"local"}``, and answers one JSON line: the Unix times rq-scheduler's own
``get_next_scheduled_time`` makes it send that job at, from ``start`` to ``end``, its host's
local zone ``zone`` (``TZ``, ``time.tzset``). ``{"interval", "url", "first", "poll", "end"}``
asks for the sends of an interval job, made and sent by rq-scheduler's own ``Scheduler`` in
the Redis at ``url`` (see ``sends``).

rq-scheduler sends a cron job when its poll (every 60 s by default) finds the job's score
passed, then scores the next run with ``get_next_scheduled_time`` read at that moment
(``datetime.now()``): the walk reads it at each send, a poll on time; a score already past
is sent at the next poll.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from datetime import datetime

from redis import Redis
from rq_scheduler import Scheduler, scheduler, utils
from rq_scheduler.utils import get_next_scheduled_time, to_unix

POLL = 60  # rqscheduler's default --interval
MAX_FIRES = 60_000


class _Clock(datetime):
    """``datetime`` for rq-scheduler's module, whose ``now()`` is the walk's moment."""

    moment = 0.0

    @classmethod
    def now(cls, tz=None):  # type: ignore[no-untyped-def,override]
        return datetime.fromtimestamp(cls.moment, tz)

    @classmethod
    def utcnow(cls):  # type: ignore[no-untyped-def,override]
        return datetime.utcfromtimestamp(cls.moment)


def walk(cron: str, zone: str, start: float, end: float, local: bool) -> list[float]:
    os.environ["TZ"] = zone
    time.tzset()
    fires = []
    at = start
    while len(fires) < MAX_FIRES:
        _Clock.moment = at
        score = to_unix(get_next_scheduled_time(cron, use_local_timezone=local))
        at = score if score > at else at + POLL
        if at > end:
            break
        fires.append(at)
    return fires


def sends(url: str, interval: int, first: float, poll: float, end: float) -> list[float]:
    """When rqscheduler, polling every ``poll`` seconds from ``first``, sends a job made with
    ``schedule(first, interval=interval)``: its own ``enqueue_jobs`` at each poll, which
    scores the next run ``interval`` after the poll that sent it."""
    connection = Redis.from_url(url)
    connection.flushdb()
    found = Scheduler(connection=connection)
    found.schedule(
        datetime.utcfromtimestamp(first),
        "tests.apps.rq_scheduler_tasks.tell",
        args=["interval"],
        interval=interval,
    )
    sent, at = [], first
    while at <= end:
        _Clock.moment = at
        queued = connection.llen("rq:queue:default")
        found.enqueue_jobs()
        if connection.llen("rq:queue:default") > queued:
            sent.append(at)
        at += poll
    connection.flushdb()
    return sent


def main() -> None:
    warnings.simplefilter("ignore", FutureWarning)  # crontab's warning about naive now()
    utils.datetime = _Clock  # type: ignore[misc]
    scheduler.datetime = _Clock  # type: ignore[attr-defined]
    for line in sys.stdin:
        asked = json.loads(line)
        if "interval" in asked:
            answer = sends(
                asked["url"], asked["interval"], asked["first"], asked["poll"], asked["end"]
            )
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()
            continue
        try:
            answer: object = walk(
                asked["cron"],
                asked["zone"],
                asked["start"],
                asked["end"],
                asked.get("local", False),
            )
        # crontab refuses a bad string with ValueError; one that never fires makes
        # get_next_scheduled_time fail on None (rq-scheduler's cron() fails the same way).
        except (ValueError, AttributeError) as exc:
            answer = {"refused": str(exc)}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
