"""``make chaos``: beat replicas and workers of a queue library (``--queue rq``, ``celery`` or
``dramatiq``) on a store (``--store redis``, ``postgres`` or ``nats``) through a seeded
schedule of SIGKILLs and restarts of replicas and workers, SIGSTOPs of 3 to 10 s, the store's
own faults (``chaos/stores.py``: Redis restarted from its append-only file, Postgres crashed or
its connections cut, NATS killed and restarted on its JetStream files) and the broker's
(``chaos/brokers.py``: its Redis SIGKILLed and restarted, or SIGSTOPped), with two replicas'
clocks set off by ``--skew`` seconds (libfaketime); then a check of what the handlers wrote
against what the store kept.

    python -m chaos.run --seed 7 --duration 120 --replicas 5 --store postgres --queue celery

Exits 1 on any duplicate run, any overlap of two runs of one job, or any lost occurrence the
guarantee (docs/guarantee.md) does not allow. Loopback only, bounded in time.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from chaos.brokers import FETCH_CUT, QUEUE, ChaosBroker
from chaos.check import Findings, check
from chaos.stores import STORES, ChaosStore, open_store
from cron_bridge.stores import store_from_url
from tests.e2e.processes import BeatProcess, Service, Worker, command_env

WARM_UP = 8.0  # seconds before the window: every replica up
COOL_DOWN = 8.0  # seconds after the window before the replicas stop (queues drain)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.run", description=__doc__)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--store",
        choices=sorted(STORES),
        default="redis",
        help="the store under chaos, with its own faults",
    )
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--replicas", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=12, help="inline jobs, every second")
    parser.add_argument(
        "--queue",
        choices=["rq", "celery", "dramatiq"],
        default="rq",
        help="the queue library of the queued jobs and their workers",
    )
    parser.add_argument("--queued", type=int, default=3, help="queued jobs, every second (0-4)")
    parser.add_argument("--workers", type=int, default=2, help="workers of the queue library")
    parser.add_argument(
        "--skew",
        type=float,
        default=3.0,
        help="seconds two replicas' clocks are off (one ahead, one behind)",
    )
    args = parser.parse_args(argv)
    if not 0 <= args.queued <= 4:
        parser.error("--queued: from 0 to 4")
    rng = random.Random(args.seed)
    folder = Path(tempfile.mkdtemp(prefix="cron-bridge-chaos-"))
    journal = folder / "journal.jsonl"
    server = open_store(args.store, args.seed)
    broker = ChaosBroker(args.queue)
    server.start()
    broker.start()
    url = server.url
    base = {
        "CHAOS_JOURNAL": str(journal),
        "CHAOS_JOBS": str(args.jobs),
        "CHAOS_QUEUED": str(args.queued),
        "CHAOS_QUEUE": args.queue,
        "CHAOS_BROKER": broker.url,
        "RQ_REDIS_URL": broker.url,
        "CRON_BRIDGE_STORE": url,
    }
    beats = [
        BeatProcess(
            f"beat{i}",
            folder,
            command_env(**base, **skewed(i, args.skew)),
            app="chaos.app",
            store_url=url,
        )
        for i in range(args.replicas)
    ]
    workers = [
        Worker(
            f"worker{i}",
            folder,
            command_env(**base),
            library=args.queue,
            queue=QUEUE,
            broker=broker.url,
            app="chaos.app",
        )
        for i in range(args.workers if args.queued else 0)
    ]
    disrupted: set[str] = set()
    killed: dict[str, float] = {}
    faults = Faults()
    print(
        f"chaos: seed {args.seed}, {args.store} store, {args.replicas} replicas "
        f"({skew_note(args)}), {args.jobs} inline and {args.queued} {LIBRARIES[args.queue]} "
        f"jobs every second on {len(workers)} workers, {args.duration:.0f} s; "
        f"logs in {folder}"
    )
    watch = Supervisor(beats, workers, killed, disrupted)
    try:
        for beat in beats:
            beat.start()
        for worker in workers:
            start_worker(worker)
        time.sleep(WARM_UP)
        start = time.time()
        end = start + args.duration
        while time.time() < end - 5:
            watch.sleep(rng.uniform(2.0, 6.0))
            disrupted |= disrupt(rng, beats, workers, (server, broker), killed, faults)
        watch.sleep(max(0.0, end - time.time()) + COOL_DOWN)
        watch.beats = []  # stopped on purpose from here
        for beat in beats:
            if beat.process is not None and beat.process.poll() is None:
                beat.process.send_signal(signal.SIGCONT)
                beat.terminate()
        drain(broker, workers, watch)
    finally:
        for service in [*beats, *workers]:
            if service.process is not None and service.process.poll() is None:
                service.process.send_signal(signal.SIGCONT)
                service.terminate()
    store = store_from_url(url)
    try:
        jobs = [f"chaos.job{n:02d}" for n in range(args.jobs)]
        jobs += [f"chaos.queued{n:02d}" for n in range(args.queued)]
        found = check(
            journal,
            store,
            jobs,
            start,
            end,
            disrupted=disrupted,
            killed=killed,
            faults=faults.store,
            broker_faults=faults.broker,
            fetches_cut=broker.crashed,
        )
    finally:
        store.close()
        server.remove()
        broker.remove()
    report(found)
    for name in watch.beats_exited:
        print(f"  BEAT EXITED by itself: {name} (see its log)")
    if broker.crashed:
        print(
            f"  a {LIBRARIES[args.queue]} worker's fetch the broker's crash cut: "
            f"{FETCH_CUT[args.queue]} (docs/guarantee.md)"
        )
    return 0 if found.ok and not watch.beats_exited else 1


LIBRARIES = {"rq": "RQ", "celery": "Celery", "dramatiq": "Dramatiq"}


@dataclass
class Faults:
    """When the store and the broker failed (monotonic): each fault's start and end."""

    store: list[float] = field(default_factory=list)
    broker: list[float] = field(default_factory=list)


class Supervisor:
    """Restarts a worker that exits by itself, as Kubernetes or compose restarts a crashed
    container (RQ's worker quits on some broker connection errors); a beat that exits by
    itself is a bug, noted for the verdict."""

    def __init__(
        self,
        beats: list[BeatProcess],
        workers: list[Worker],
        killed: dict[str, float],
        disrupted: set[str],
    ) -> None:
        self.beats, self.workers = beats, workers
        self.killed, self.disrupted = killed, disrupted
        self.beats_exited: list[str] = []

    def sleep(self, seconds: float) -> None:
        """Sleep, looking every half second for a process that exited."""
        until = time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0:
            time.sleep(min(0.5, left))
            self.look()

    def look(self) -> None:
        for worker in self.workers:
            if worker.process is not None and worker.process.poll() is not None:
                name = f"{worker.name}-{worker.starts}"
                print(
                    f"  {time.strftime('%H:%M:%S')} {name} exited by itself "
                    f"({worker.process.returncode}), restarted"
                )
                self.killed[name] = time.monotonic()  # what it had taken died with it
                self.disrupted.add(name)
                start_worker(worker)
        for beat in self.beats:
            name = f"{beat.name}-{beat.starts}"
            if (
                beat.process is not None
                and beat.process.poll() is not None
                and name not in self.beats_exited
            ):
                print(f"  {time.strftime('%H:%M:%S')} BEAT EXITED by itself: {name}")
                self.beats_exited.append(name)


def drain(
    broker: ChaosBroker, workers: list[Worker], watch: Supervisor, timeout: float = 90.0
) -> None:
    """Let the workers finish what the beats enqueued (a backlog after a worker was killed,
    Dramatiq's messages of a killed worker, given back after its heartbeat), so what is still
    queued is not judged lost; bounded."""
    if not workers:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not broker.waiting():
            watch.sleep(2.0)  # the last jobs taken finish (each runs under half a second)
            return
        watch.sleep(0.5)
    print(f"  the queue did not drain in {timeout:.0f} s; what is left counts as lost")


def skewed(index: int, skew: float) -> dict[str, str]:
    """Replica 1 runs ``skew`` seconds ahead, replica 2 behind; monotonic time stays true."""
    if not skew or index not in (1, 2):
        return {}
    spec = importlib.util.find_spec("libfaketime")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("chaos: --skew needs the libfaketime wheel (pip install libfaketime)")
    library = Path(next(iter(spec.submodule_search_locations)))
    preload = library / "vendor" / "libfaketime" / "src" / "libfaketime.so.1"
    return {
        "LD_PRELOAD": str(preload),
        "FAKETIME": f"{'+' if index == 1 else '-'}{skew:g}s",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_NO_CACHE": "1",
    }


def skew_note(args: argparse.Namespace) -> str:
    if not args.skew or args.replicas < 2:
        return "clocks true"
    return f"beat1 +{args.skew:g} s" + (f", beat2 -{args.skew:g} s" if args.replicas > 2 else "")


def start_worker(worker: Worker) -> None:
    """Start it with a host name of its own, so its guard's replica id says which start it is."""
    worker.env["HOSTNAME"] = f"{worker.name}-{worker.starts + 1}"
    worker.start()


def disrupt(
    rng: random.Random,
    beats: list[BeatProcess],
    workers: list[Worker],
    servers: tuple[ChaosStore, ChaosBroker],
    killed: dict[str, float],
    faults: Faults,
) -> set[str]:
    """One event of the schedule; the replicas and workers it touched (and when the killed
    ones died, and when the store or the broker failed, in monotonic time)."""
    kinds = ["kill", "kill", "stop", "stop", "store"] + (["worker", "broker"] if workers else [])
    kind = rng.choice(kinds)
    chosen: Service = rng.choice(workers if kind == "worker" else beats)
    name = f"{chosen.name}-{chosen.starts}"
    if kind in ("kill", "worker"):
        print(f"  {time.strftime('%H:%M:%S')} SIGKILL {name}, restart in 1-3 s")
        chosen.kill_all()
        killed[name] = time.monotonic()
        time.sleep(rng.uniform(1.0, 3.0))
        if isinstance(chosen, Worker):
            start_worker(chosen)
        else:
            chosen.start()
        return {name}
    if kind == "stop":
        pause = rng.uniform(3.0, 10.0)
        print(f"  {time.strftime('%H:%M:%S')} SIGSTOP {name} for {pause:.1f} s")
        assert chosen.process is not None
        os.kill(chosen.process.pid, signal.SIGSTOP)
        time.sleep(pause)
        os.kill(chosen.process.pid, signal.SIGCONT)
        return {name}
    began = time.strftime("%H:%M:%S")
    server = servers[0] if kind == "store" else servers[1]
    times = faults.store if kind == "store" else faults.broker
    times.append(time.monotonic())
    print(f"  {began} {server.fault(rng)}")
    times.append(time.monotonic())
    return set()


def report(found: Findings) -> None:
    print(
        f"occurrences {found.occurrences}, ran once {found.ran_once}, "
        f"duplicates {len(found.duplicates)}, overlaps {len(found.overlaps)}, "
        f"lost as the guarantee allows {len(found.allowed)}, "
        f"lost otherwise {len(found.not_allowed)}, "
        f"run again after their worker died in them {len(found.rerun)}, "
        f"taken over from a replica that died or froze first {found.taken_over}"
    )
    kinds: dict[str, int] = {}
    for why in found.allowed.values():
        kind = why.split(":")[0].split(" on ")[0].split(",")[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    for kind, count in sorted(kinds.items()):
        print(f"  allowed: {count} {kind}")
    for occurrence_id, why in list(found.allowed.items())[:: max(1, len(found.allowed) // 8)]:
        print(f"    e.g. {occurrence_id}: {why}")
    for occurrence_id, died in list(found.rerun.items())[:20]:
        print(f"  run again, its first run's worker killed in it ({died}): {occurrence_id}")
    for occurrence_id, count in list(found.duplicates.items())[:20]:
        print(f"  DUPLICATE {occurrence_id} ran {count} times")
    for first, second in found.overlaps[:20]:
        print(f"  OVERLAP {first} and {second}")
    for occurrence_id, why in list(found.not_allowed.items())[:20]:
        print(f"  LOST {occurrence_id}: {why}")


if __name__ == "__main__":
    sys.exit(main())
