"""Eight inline jobs every second pinging CB_TEST_PING_URL (a peer that trickles its answer),
and one job every second with no monitor: the pings must hold up neither."""

from __future__ import annotations

import os

from cron_bridge import JobContext, Ping, cluster_task
from tests.apps import journal

PINGED = 8


def ran(ctx: JobContext) -> None:
    journal.write("ran", ctx)


for number in range(PINGED):
    cluster_task(
        every="1s",
        name=f"pinged.{number}",
        target="inline",
        monitor=Ping(os.environ["CB_TEST_PING_URL"], timeout=2),
    )(ran)
cluster_task(every="1s", name="plain.job", target="inline")(ran)
