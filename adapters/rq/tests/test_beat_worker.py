"""``cron_bridge_rq.BeatWorker``: what a work horse keeps of the beat its worker carries (the
worker itself, through a SIGKILL, is in tests/e2e/test_embedded_beat.py)."""

from __future__ import annotations

import os
from typing import Any

import rq

from cron_bridge_rq import BeatSimpleWorker, BeatSpawnWorker, BeatWorker
from cron_bridge_rq.beat_worker import CarriesBeat, _forget_in_children


class Holder(CarriesBeat):
    pass


def test_a_forked_child_drops_the_beat_its_parent_carries() -> None:
    """RQ forks a work horse per job from the worker's main process: the horse's copy of the
    worker holds no beat (so none of its connections is used there); the parent's still does."""
    holder = Holder()
    carried: Any = object()
    holder._hosted = carried
    _forget_in_children(holder)
    pid = os.fork()
    if pid == 0:  # the horse
        os._exit(0 if holder._hosted is None else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert holder._hosted is carried


def test_each_of_rqs_worker_classes_has_one_that_carries_the_beat() -> None:
    assert issubclass(BeatWorker, rq.Worker) and issubclass(BeatWorker, CarriesBeat)
    assert issubclass(BeatSimpleWorker, rq.SimpleWorker)
    assert issubclass(BeatSpawnWorker, rq.SpawnWorker)
    assert BeatWorker.__mro__.index(CarriesBeat) < BeatWorker.__mro__.index(rq.Worker)
