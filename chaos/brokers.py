"""The broker under chaos: the Redis the queued jobs' library (``--queue rq``, ``celery`` or
``dramatiq``) sends through, with its own faults, each a seeded choice of the schedule's
``broker`` events:

- **crash**: SIGKILLed while the beats are sending, down 1 to 14 s (past the jobs'
  ``misfire_grace`` of 10 s at times), restarted on its append-only file (``fsync always``:
  what it acknowledged is kept);
- **pause**: SIGSTOPped for 3 to 14 s (a frozen VM, a stalled disk): connections stay open,
  every send waits for an answer that comes late or after the sender gave up on it (RQ's
  5 s socket timeout), so a send can land and still be taken for failed.

And how to see that the workers took every message (``drained``) before the run is judged.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time

from tests.servers import RedisServer

__all__ = ["FETCH_CUT", "QUEUES", "ChaosBroker"]

QUEUE = "chaos"  # the queue every queued job is sent to
# Where each library keeps the queue's waiting messages in Redis: a list (Dramatiq's under its
# namespace, chaos/app.py).
QUEUES = {
    "rq": f"rq:queue:{QUEUE}",
    "celery": QUEUE,
    "dramatiq": f"dramatiq-chaos:{QUEUE}",
}


# What becomes of a message a worker was taking when the broker crashed, the answer to its
# fetch lost: RQ (BLPOP) and Celery (kombu's BRPOP) take it with one pop, and it is gone;
# Dramatiq's fetch moves it to the worker's acknowledgement set, where it waits until that
# worker's heartbeat stops (a restart) and then runs: within the run only if one came.
FETCH_CUT = {"rq": "lost", "celery": "lost", "dramatiq": "held until the worker restarts"}


class ChaosBroker:
    """The queued jobs' Redis: started, faulted, removed."""

    def __init__(self, library: str) -> None:
        self.library = library
        self.server = RedisServer(extra=["--appendonly", "yes", "--appendfsync", "always"])
        self.crashed: list[float] = []  # when it was SIGKILLed (monotonic)

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> None:
        self.server.start()

    def remove(self) -> None:
        process = self.server.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)
        self.server.remove()

    def fault(self, rng: random.Random) -> str:
        """One of the broker's faults (bounded in time); what it did, for the log."""
        process = self.server.process
        assert process is not None
        if rng.random() < 0.5:
            down = rng.uniform(1.0, 14.0)
            self.crashed.append(time.monotonic())
            process.kill()
            process.wait()
            time.sleep(down)
            self.server.start()
            return f"broker SIGKILLed, down for {down:.1f} s, back from its AOF"
        pause = rng.uniform(3.0, 14.0)
        os.kill(process.pid, signal.SIGSTOP)
        time.sleep(pause)
        os.kill(process.pid, signal.SIGCONT)
        return f"broker SIGSTOPped for {pause:.1f} s"

    def waiting(self) -> int:
        """Messages still waiting in the queue, not yet taken by a worker."""
        import redis

        with redis.Redis.from_url(self.url, socket_timeout=5) as client:
            return int(client.llen(QUEUES[self.library]))
