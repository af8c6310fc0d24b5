"""Claims across a PostgreSQL failover: a primary and a streaming replica on loopback, the
primary crashed and the replica promoted, the replicas of cron-bridge on a multi-host URL
(``target_session_attrs=read-write``) that finds the new primary by itself.

Streaming replication is asynchronous by default: a claim the primary committed and answered
can be missing on the standby it never reached, and a replica that asks after the promotion
wins the same occurrence again. With a synchronous standby (``synchronous_standby_names``,
``synchronous_commit=on``) a commit is answered only once the standby has it, so a claim
survives the promotion.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cron_bridge.errors import StoreUnavailable
from cron_bridge.jobs import Occurrence
from cron_bridge.stores import Store, store_from_url
from tests.apps import journal
from tests.conftest import unavailable
from tests.e2e.processes import BeatProcess, command_env
from tests.servers import PostgresServer, PostgresStandby, ServerUnavailable
from tests.waiting import retried, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
# What every commit waits for: the write-ahead log on disk, and, with a synchronous standby,
# the standby's answer that it has it.
DURABLE = {"fsync": "on", "synchronous_commit": "on"}


class Pair:
    """A primary and its streaming replica, and the URL that finds whichever is primary."""

    def __init__(self, synchronous: bool) -> None:
        sync = {"synchronous_standby_names": "*"} if synchronous else {}
        self.primary = PostgresServer(settings={**DURABLE, **sync})
        self.standby = PostgresStandby(self.primary, settings=DURABLE)

    def url(self, schema: str) -> str:
        hosts = f"127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
        return (
            f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"
            f"&connect_timeout=1&schema={schema}"
        )

    def fail_over(self) -> None:
        """The primary crashes; the standby is promoted."""
        self.primary.crash()
        self.standby.promote()


@pytest.fixture(params=[False, True], ids=["async", "sync"])
def pair(request: pytest.FixtureRequest) -> Iterator[Pair]:
    made = Pair(synchronous=request.param)
    try:
        made.primary.start()
        made.standby.start()
        made.standby.wait_caught_up()
    except ServerUnavailable as exc:
        made.standby.remove()
        made.primary.remove()
        unavailable("a PostgreSQL primary with a streaming standby", exc)
    yield made
    made.standby.remove()
    made.primary.remove()


def _claim_until(store: Store, occurrence: Occurrence, owner: str) -> bool:
    """Claim through the failover: ask again while no primary answers."""
    return retried(lambda: store.claim_many([occurrence], owner)[0], 30, errors=(StoreUnavailable,))


def test_a_claim_survives_a_promotion_only_with_a_synchronous_standby(pair: Pair) -> None:
    """Asynchronous: the standby is down when the claim commits, the primary crashes, the
    standby comes back and is promoted without it, and a second replica wins the occurrence
    again. Synchronous: the claim is answered once the standby has it; after the promotion
    the second replica loses, and the store names the first as the holder."""
    synchronous = "synchronous_standby_names" in pair.primary.settings
    url = pair.url("failover")
    first, second = store_from_url(url), store_from_url(url)
    occurrence = Occurrence(job="pay", scheduled_at=AT)
    try:
        first.claim_many([Occurrence(job="warm", scheduled_at=AT)], "beat-a")  # tables made
        pair.standby.wait_caught_up()  # it has the tables
        if not synchronous:
            pair.standby.stop()  # the claim lives on the primary alone
        assert first.claim_many([occurrence], "beat-a") == [True]
        pair.primary.crash()
        if not synchronous:
            pair.standby.start()
        pair.standby.promote()
        won = _claim_until(second, occurrence, "beat-b")
        if synchronous:
            assert won is False
            assert second.holder(occurrence.claim_key) == "beat-a"
        else:
            assert won is True  # the duplicate an asynchronous standby allows
    finally:
        first.close()
        second.close()


def test_beats_through_a_promotion_mid_burst(
    pair: Pair, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """3 beats, 10 jobs every second on the pair; one beat freezes, the standby falls behind
    (asynchronous: stopped while the primary goes on; synchronous: commits wait for it), the
    primary crashes and the standby is promoted. The frozen beat wakes with due occurrences
    and claims them on the new primary: with the asynchronous standby it wins some the others
    won on the dead primary and runs them again; with the synchronous one, never."""
    synchronous = "synchronous_standby_names" in pair.primary.settings
    path = tmp_path / "journal.jsonl"
    url = pair.url("burst")
    env = command_env(path, CB_TEST_JOBS="10")
    beats = [
        BeatProcess(f"beat{i}", tmp_path, env, app="tests.apps.failover", store_url=url)
        for i in range(3)
    ]
    try:
        for beat in beats:
            beat.start()
        wait_for(
            lambda: len({line["replica"] for line in journal.read(path)}) >= 2,
            30,
            "two replicas running jobs",
        )
        time.sleep(2)
        pair.standby.wait_caught_up()
        lagging = beats[2].process
        assert lagging is not None
        lagging.send_signal(signal.SIGSTOP)
        pair.standby.stop()
        time.sleep(2.5)  # asynchronous: claims made now live on the primary alone
        pair.primary.crash()
        pair.standby.start()
        pair.standby.promote()
        lagging.send_signal(signal.SIGCONT)
        after = time.time()
        wait_for(
            lambda: any(line["at"] > after + 3 for line in journal.read(path)),
            30,
            "runs after the failover",
        )
    finally:
        for beat in beats:
            if beat.process is not None and beat.process.poll() is None:
                beat.process.send_signal(signal.SIGCONT)
                beat.terminate()
    runs = Counter(line["occurrence_id"] for line in journal.read(path))
    twice = sorted(occurrence for occurrence, count in runs.items() if count > 1)
    record_property("occurrences run", len(runs))
    record_property("run twice", len(twice))
    if synchronous:
        assert twice == [], f"ran more than once: {twice}"
    else:
        # What a synchronous standby prevents: this scenario does make duplicates without it.
        assert twice, "the promotion made no duplicate: the test proves nothing"
    assert len(runs) >= 10 * 8, f"only {len(runs)} occurrences ran"
