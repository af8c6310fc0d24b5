"""The beat: one timer loop that claims due occurrences and hands them to their targets.

Every replica runs the same loop over the same jobs. At each wake it claims every due
occurrence in one batch; the occurrences it wins go to their targets (inline runs in a
bounded thread pool, queue targets through their adapter), and every outcome is recorded in
one batch. Nothing here holds a lock between replicas: the claims are the coordination.
"""

from __future__ import annotations

import logging
import signal as signals
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta
from functools import partial
from types import FrameType
from typing import Any, TypeVar, Unpack

from cron_bridge import refusals
from cron_bridge.beat.claiming import Claimer, Unanswered
from cron_bridge.beat.clocksync import StoreClock
from cron_bridge.beat.enqueue import TAKE_OVER, takes_over
from cron_bridge.beat.in_flight import InFlight
from cron_bridge.beat.on_demand import RunResult, Triggers
from cron_bridge.beat.planning import Planned, catch_up, plan, plan_one
from cron_bridge.beat.store_health import Records, StoreHealth
from cron_bridge.beat.stored_sync import StoredSync
from cron_bridge.beat.takeover import TakeOver
from cron_bridge.beat.timers import Timers
from cron_bridge.clock import Clock, SystemClock
from cron_bridge.control import pause as control
from cron_bridge.control.catalog import Publisher
from cron_bridge.control.lost_claims import Ledger
from cron_bridge.errors import ConfigError, StoreUnavailable
from cron_bridge.jobs import Job, declare
from cron_bridge.options import CommonOptions, check_names
from cron_bridge.plumbing.identity import check_replica_id, make_replica_id
from cron_bridge.registry import Registry, default_registry
from cron_bridge.schedules import parse_duration
from cron_bridge.stores import Store, store_from_url

__all__ = ["Beat", "RunResult"]

log = logging.getLogger(__name__)
CATALOG_WAIT = 5.0  # seconds a stopping beat waits for a catalog publish in flight
LOOP_START_WAIT = 10.0  # seconds a stop that came during start() waits for the loop to start


F = TypeVar("F", bound=Callable[..., Any])

FAILING_TICKS = 3  # ticks failed in a row (about a second apart) that make health fail
# How long a beat whose host calls run_pending (celery beat's loop) may go without a pass and
# still be running: a pass is due at least every heartbeat, so this is many missed ones.
HOSTED_STALE = 60.0


class Beat:
    """A cluster-safe beat replica. Run as many as you like against one store.

    Args:
        store: a ``Store`` (borrowed, left open) or a store URL (closed on ``stop()``).
        jobs: the jobs to schedule: a ``Registry`` or jobs; the default registry when
            omitted (what ``@cluster_task`` fills).
        replica_id: this replica's name in the store, records and logs.
        shutdown_timeout: how long ``stop()`` waits for runs in flight before aborting them.
        handle_signals: stop on SIGTERM and SIGINT (never exits the process itself).
        clock: the time source (a ``cron_bridge.testing.FakeClock`` in tests).
        max_workers: threads for inline runs and enqueues.
        heartbeat_interval: how often the replica says it is alive in the store.
        stored_schedules: also run the schedules stored at run time
            (``cron_bridge.StoredSchedules``), following their changes within about a second.
        take_over: which occurrences a replica sends in place of one that claimed them and
            died before it could: ``"refused"`` (those whose second copy the worker refuses,
            docs/guarantee.md), or ``"all"``, every cluster job's, a drop-in's plain task and
            an ``overlap="allow"`` job's too (at least once: a copy the dead replica did send
            runs twice), whose failed sends are then sent again as well.
    """

    def __init__(
        self,
        store: Store | str,
        jobs: Registry | Iterable[Job] | None = None,
        *,
        replica_id: str | None = None,
        shutdown_timeout: str | float | timedelta = "25s",
        handle_signals: bool = False,
        clock: Clock | None = None,
        max_workers: int = 8,
        heartbeat_interval: str | float | timedelta = "5s",
        stored_schedules: bool = True,
        take_over: str = "refused",
    ) -> None:
        if take_over not in TAKE_OVER:
            raise ConfigError(
                f"expected one of {', '.join(TAKE_OVER)}", option="take_over", value=take_over
            )
        self.take_over = take_over
        chosen = partial(takes_over, unrefused=take_over == "all")
        self._owns_store = isinstance(store, str)
        self.store = store_from_url(store) if isinstance(store, str) else store
        self.replica_id = check_replica_id(replica_id) if replica_id else make_replica_id()
        self.shutdown_timeout = parse_duration(shutdown_timeout, option="shutdown_timeout")
        self.heartbeat_interval = parse_duration(heartbeat_interval, option="heartbeat_interval")
        # The replica's clock, corrected to the store's at every heartbeat.
        self.clock = StoreClock(clock or SystemClock())
        self.handle_signals = handle_signals
        self._timers = Timers(default_registry if jobs is None else jobs)
        self._lock = threading.RLock()  # starting and arming, once
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._loop_started = threading.Event()  # the loop's thread has been started
        self._thread: threading.Thread | None = None
        # Whether the store answers, told by every part that asks it; the run records.
        self._health = StoreHealth()
        self._records = Records(self.store, self._health, replica=self.replica_id, clock=self.clock)
        self._dispatcher = InFlight(
            self.store,
            self.replica_id,
            clock=self.clock,
            max_workers=max_workers,
            records=self._records,
            health=self._health,
            resend_all=take_over == "all",
        )
        unanswered = Unanswered()  # claims whose answer was lost, shared by both
        self._triggers = Triggers(
            self.store,
            self.replica_id,
            clock=self.clock,
            dispatcher=self._dispatcher,
            records=self._records,
            forget=unanswered.forget,
        )
        # Where the claims this replica lost are noted (cron_bridge.control.lost_claims).
        self._ledger = Ledger(self.replica_id, self._swept, self.clock.now)
        self._health.when_down(self._ledger.interrupt)
        self._health.when_up(self._resume_ledger)
        self._claimer = Claimer(
            self.store,
            self.replica_id,
            dispatcher=self._dispatcher,
            records=self._records,
            health=self._health,
            ledger=self._ledger,
            unanswered=unanswered,
            takes_over=chosen,
        )
        self.claim_stats = self._claimer.stats
        # What other replicas claimed and died before sending (cron_bridge.beat.takeover).
        self._takeover = TakeOver(
            self.store,
            self.replica_id,
            jobs=self._timers.get,
            dispatcher=self._dispatcher,
            records=self._records,
            health=self._health,
            clock=self.clock,
            takes_over=chosen,
        )
        # The schedules kept in the store (control.schedules), followed through their feed.
        self._stored = StoredSync(self.store) if stored_schedules else None
        self._from_store: set[str] = set()
        self._needs_catch_up = True
        self._next_heartbeat: datetime | None = None
        # The jobs, for dashboards of other processes, each first declared on this clock.
        self._catalog = Publisher(self.store, started=self.clock.now())
        self._failed_ticks = 0  # in a row; health fails from FAILING_TICKS on
        self._last_pass: float | None = None  # monotonic time of the last run_pending
        self._last_failure = ""

    # -- jobs ---------------------------------------------------------------------------

    def jobs(self) -> list[Job]:
        return self._timers.jobs()

    def job(self, name: str) -> Job | None:
        """The job ``name`` this beat schedules, if it does."""
        return self._timers.get(name)

    @property
    def stored_jobs(self) -> frozenset[str]:
        """The names of the jobs this beat runs from stored schedules (``StoredSchedules``)."""
        return frozenset(self._from_store)

    def _swept(self) -> list[str]:
        """The jobs this replica claims on their schedules (its ledger's job set)."""
        return [job.name for job in self.jobs() if job.is_cluster and not job.on_demand]

    def add(self, job: Job, *, since: datetime | None = None) -> None:
        """Schedule ``job`` from its next occurrence on (also while running); with ``since``,
        from its first occurrence after that time (one already past comes due at once, under
        the misfire rules)."""
        self._timers.add(job, since=since, now=self.clock.now())
        self._jobs_changed(job.name)

    def replace(self, job: Job, *, since: datetime | None = None) -> None:
        """Swap the job of ``job.name`` for ``job`` (a changed schedule or option), or add it:
        the new schedule takes over where the old one stopped (``Timers.replace``), so a
        change racing an occurrence neither fires it twice on this replica nor skips it.
        ``since`` arms from that time instead."""
        self._timers.replace(job, since=since, now=self.clock.now())
        self._jobs_changed(job.name)

    def remove(self, name: str) -> Job | None:
        """Stop scheduling the job called ``name``; runs in flight go on."""
        job = self._timers.remove(name)
        self._jobs_changed(name)
        return job

    def _jobs_changed(self, name: str) -> None:
        self._catalog.changed(name, at=self.clock.now())
        self._ledger.jobs_changed(self.clock.now())
        self._wake.set()

    def cron(
        self, expr: str, *, name: str | None = None, **options: Unpack[CommonOptions]
    ) -> Callable[[F], F]:
        """Declare an inline job on this beat: ``@beat.cron("*/5 * * * *")`` above a function
        that takes ``ctx``. Options are those of ``@cluster_task`` but the kind of schedule
        and the target (``tz="UTC"`` by default, as everywhere).

        Raises:
            ConfigError: naming the job, the option and the value.
            TypeError: an option there is none of.
        """
        check_names(options, CommonOptions, caller="Beat.cron")
        return self._inline(name, {"cron": expr, **options})

    def every(
        self,
        interval: str | float | timedelta,
        *,
        name: str | None = None,
        **options: Unpack[CommonOptions],
    ) -> Callable[[F], F]:
        """Declare an inline job on this beat: ``@beat.every("30s")``. See ``cron``."""
        check_names(options, CommonOptions, caller="Beat.every")
        return self._inline(name, {"every": interval, **options})

    def _inline(self, name: str | None, options: dict[str, Any]) -> Callable[[F], F]:
        def decorate(func: F) -> F:
            job_name = name or f"{func.__module__}.{func.__qualname__}"
            self.add(declare(job_name, target="inline", handler=func, **options))
            return func

        return decorate

    # -- lifecycle ----------------------------------------------------------------------

    def _prepare(self) -> None:
        """Check the store and arm every job, once."""
        if self._timers.armed:
            return
        if any(job.is_cluster for job in self.jobs()):
            self.store.ensure_cluster_capable()
        # Read the store's clock before planning anything on ours: a replica whose clock is
        # ahead would otherwise catch up on occurrences not yet due, and run them early.
        self._beat_now()
        now = self.clock.now()
        self._timers.arm_all(now)
        self._ledger.resume(now)

    def start(self) -> None:
        """Start the timer loop in a background thread and return."""
        with self._lock:
            if self._thread is not None:
                return
            self._prepare()
            self._thread = threading.Thread(target=self._loop, name="cron-bridge-beat", daemon=True)
        if self.handle_signals:
            self._install_signal_handlers()
        if self._stored is not None:
            self._stored.listen(self._wake.set)
        count = len(self.jobs())
        log.info(
            "beat %s started with %d job%s on %s",
            self.replica_id,
            count,
            "" if count == 1 else "s",
            self.store.url,
        )
        self._thread.start()
        self._loop_started.set()

    def run_forever(self) -> None:
        """Start, and return once stopped (by ``stop()`` or, with handle_signals, a signal)."""
        self.start()
        # Signal handlers run even while this waits (the wait resumes after them).
        while not self._stopped.wait(5):
            pass

    def stop(self) -> None:
        """Stop arming timers, drain what is in flight, abort it at ``shutdown_timeout``.

        Overlap locks of aborted runs are released; claims stay, so no other replica runs
        the same occurrences again.
        """
        if self._stopping.is_set():
            self._stopped.wait()
            return
        self._stopping.set()
        self._wake.set()
        if self._stored is not None:
            self._stored.stop()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            # A signal can come while start() runs, between the handlers' install and the
            # loop's start (the stop runs on a thread of its own): the loop, about to start,
            # is waited for, then joined (it sees _stopping at once). Joined before it started,
            # the stop died there and the beat ran on for ever.
            self._loop_started.wait(LOOP_START_WAIT)
            if thread.ident is not None:
                thread.join()
        self._dispatcher.drain(self.shutdown_timeout)
        self._catalog.wait(CATALOG_WAIT)
        self._ledger.interrupt()
        try:
            self._ledger.flush(self.store, force=True)
        except StoreUnavailable as exc:
            log.warning("the ledger of the claims this replica lost is not written: %s", exc)
        if self._owns_store:
            self.store.close()
        stats = self.claim_stats
        log.info(
            "beat %s stopped; it asked for %d claim(s), won %d, in %d store round trip(s)",
            self.replica_id,
            stats.asked,
            stats.won,
            stats.round_trips,
        )
        self._stopped.set()

    @property
    def started(self) -> bool:
        """Whether this beat runs its timers (``start()``, or a host calling ``run_pending()``);
        a beat never started only serves the dashboard and the trigger (a web app's panel)."""
        return self._timers.armed

    def health(self) -> dict[str, Any]:
        """Whether the timer loop runs (and has not failed its last ``FAILING_TICKS`` ticks),
        or its host's loop called ``run_pending`` within ``HOSTED_STALE`` seconds; whether
        the store answered last time it was asked; and so whether it claims."""
        thread = self._thread
        if thread is not None:
            alive = thread.is_alive()
        else:  # hosted: celery beat's loop (or a host's own) calls run_pending
            last = self._last_pass
            alive = last is not None and time.monotonic() - last < HOSTED_STALE
        alive = alive and not self._stopping.is_set()
        failing = self._failed_ticks >= FAILING_TICKS
        running = alive and not failing
        found: dict[str, Any] = {
            "replica": self.replica_id,
            "running": running,
            "store_reachable": not self._health.down,
            "claiming": running and not self._health.down,
            "clock_offset_ms": self.clock.offset_ms,
        }
        if failing:
            found["failing"] = (
                f"the loop failed {self._failed_ticks} ticks in a row "
                f"({self._last_failure}); see the beat's log"
            )
        # Declarations this process read and does not run (still healthy: it runs the rest).
        if not_run := refusals.refused():
            found["refused"] = [refusal.to_json() for refusal in not_run]
        return found

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            log.warning("handle_signals needs the main thread; signals are left alone")
            return

        def on_signal(number: int, frame: FrameType | None) -> None:
            log.info("received %s, stopping", signals.Signals(number).name)
            threading.Thread(target=self.stop, name="cron-bridge-stop").start()

        for number in (signals.SIGTERM, signals.SIGINT):
            signals.signal(number, on_signal)

    # -- the timer loop -----------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self._tick()
            except Exception as exc:  # the loop must outlive any single bad tick
                self._failed_ticks += 1
                self._last_failure = type(exc).__name__  # health is public: no message
                if self._failed_ticks == 1 or self._failed_ticks % 60 == 0:
                    log.exception(
                        "the beat loop failed %d tick(s) in a row; going on", self._failed_ticks
                    )
                self._stopping.wait(1.0)
            else:
                if self._failed_ticks:
                    log.warning(
                        "the beat loop runs again after %d failed tick(s)", self._failed_ticks
                    )
                self._failed_ticks = 0

    def _tick(self) -> None:
        wake_at = self.run_pending()
        if wake_at is None:
            return
        self.clock.sleep_until(wake_at, self._wake)
        self._wake.clear()

    def run_pending(self) -> datetime | None:
        """Do what is due now, without sleeping: for hosts that run their own loop.

        Heartbeats, catches up, claims and dispatches every due occurrence. Returns when to
        call again, or None when something was due (call again at once).
        """
        self._last_pass = time.monotonic()
        with self._lock:
            self._prepare()
        now = self.clock.now()
        if self._next_heartbeat is None or now >= self._next_heartbeat or self._health.down:
            # While the store is down, every tick asks again: the first thing done when it is
            # back is reading its clock, before claiming what came due meanwhile.
            now = self._beat_now()
        if self._stored is not None and self._stored.due(time.monotonic()):
            self._sync_stored()
        self._catalog.maybe_publish(self.jobs)
        if self._needs_catch_up:
            self._catch_up(now)
        elif self._claimer.unclaimed:
            self._retry_unclaimed(now)
        self._takeover.maybe_scan()
        due = self._timers.pop_due(now)
        if due:
            self._fire(due, now)
            return None
        heartbeat = self._next_heartbeat
        assert heartbeat is not None  # set by _prepare
        if self._stored is not None:  # wake to follow the stored schedules
            heartbeat = min(heartbeat, now + timedelta(seconds=StoredSync.INTERVAL))
        upcoming = self._timers.next_fire()
        return heartbeat if upcoming is None else min(upcoming, heartbeat)

    def _sync_stored(self) -> None:
        """Schedule what was stored or changed since the last look, drop what was removed.
        A stored schedule named like a job declared in code is left out, with a warning."""
        assert self._stored is not None
        try:
            found = self._stored.poll(time.monotonic())
        except StoreUnavailable as exc:
            self._health.failed(exc)
            return
        if found is not None:
            self._from_store = self._stored.apply(
                *found,
                self._from_store,
                declared=self._timers.__contains__,
                replace=self.replace,
                remove=self.remove,
            )

    def _fire(self, due: list[tuple[Job, datetime]], now: datetime) -> None:
        planned: list[Planned] = []
        arms: list[tuple[Job, datetime, datetime | None]] = []
        for job, scheduled in due:
            following = job.schedule.next_after(scheduled)
            arm: tuple[Job, datetime, datetime | None]
            if job.fire_at(following) > now:  # the one occurrence due: what a burst is made of
                decided = plan_one(job, scheduled, now)
                arm = (job, scheduled, following)
            else:  # the loop fell behind: every occurrence that came due since
                handled = [scheduled]  # the latest handed to plan (lazily: may be many)
                decided = plan(job, self._due_since(job, scheduled, now, handled), now)
                arm = (job, handled[0], None)
            if decided.dropped:
                log.warning(
                    "%s missed %d more occurrences than are recorded", job.name, decided.dropped
                )
            planned.extend(decided.items)
            arms.append(arm)
        self._timers.rearm(arms)
        self._claimer.execute(planned)

    @staticmethod
    def _due_since(
        job: Job, scheduled: datetime, now: datetime, handled: list[datetime]
    ) -> Iterator[datetime]:
        """``scheduled``, then those that came due after it (the loop fell behind), up to the
        first whose jittered time has not come; ``handled[0]`` follows the latest given."""
        yield scheduled
        for at in job.schedule.occurrences(scheduled, now):
            if job.fire_at(at) > now:
                return
            handled[0] = at
            yield at

    def _catch_up(self, now: datetime) -> None:
        jobs = [job for job in self.jobs() if job.is_cluster and not job.on_demand]
        try:
            last = self.store.last_claimed([job.name for job in jobs]) if jobs else {}
        except StoreUnavailable as exc:
            self._health.failed(exc)
            return
        self._needs_catch_up = False
        planned = [item for decided in catch_up(jobs, last, now) for item in decided.items]
        if planned:
            log.info(
                "catching up on %d occurrence(s) missed while no replica could claim them",
                len(planned),
            )
            self._claimer.execute(planned)

    def _retry_unclaimed(self, now: datetime) -> None:
        waiting = self._claimer.unclaimed.take()
        planned = [item for job, times in waiting for item in plan(job, times, now).items]
        self._claimer.execute(planned)

    def _beat_now(self) -> datetime:
        """Heartbeat (which reads the store's clock); the corrected time after it."""
        self._heartbeat()
        now = self.clock.now()
        self._next_heartbeat = now + self.heartbeat_interval
        if not self._health.down:
            try:
                self._ledger.flush(self.store, moved=True)  # where the open span reached
                self._ledger.maybe_prune(self.store)
            except StoreUnavailable as exc:
                # Bookkeeping, as after a claim: a ledger not written (an outage, or a key of
                # the wrong type that takes no write) is written at a later flush. Whether the
                # store is down is for the heartbeat and the claims to say: never paused jobs.
                log.debug("ledger not written yet: %s", exc)
        return now

    def _heartbeat(self) -> None:
        try:
            self.clock.heartbeat(self.store, self.replica_id, self.heartbeat_interval * 3)
        except StoreUnavailable as exc:
            self._health.failed(exc)
        else:
            self._health.ok()

    def _resume_ledger(self) -> None:
        if self._timers.armed:
            self._ledger.resume(self.clock.now())

    # -- manual runs (cron_bridge.beat.on_demand) ----------------------------------------

    def trigger(self, name: str, force: bool = False) -> RunResult:
        """Run a job now, through the normal claim (CLI, HTTP, dashboard).

        Without ``force`` it claims the occurrence the schedule is at, so two triggers for
        the same scheduled time (a CronJob firing twice) run it once. With ``force`` it runs
        a fresh occurrence at the current time.

        Raises:
            ConfigError: no job of that name.
            StoreUnavailable: the store could not be reached to claim it (it did not run).
        """
        return self._triggers.trigger(self._job(name), force=force)

    def catch_up_paused(self, pause: control.Pause) -> RunResult | None:
        """Run the latest occurrence that ``pause`` held back, once across the cluster
        (``resume --catch-up``), with trigger ``misfire``; None when it held none back.

        Raises:
            ConfigError: no job of that name.
            StoreUnavailable: the store could not be reached (it did not run).
        """
        return self._triggers.catch_up_paused(self._job(pause.job), pause)

    def resume(
        self, name: str, *, by: str, catch_up: bool = False
    ) -> tuple[control.Pause | None, RunResult | None]:
        """Resume ``name`` on every replica: the pause it ended (None when it was not paused)
        and, with ``catch_up``, the run of the latest occurrence the pause held back, made
        first, while still paused, so that the job's next occurrences do not meet it.

        Raises:
            ConfigError: ``catch_up`` for a job this beat does not have.
            StoreUnavailable: the store could not be reached.
        """
        ran = None
        if catch_up:
            current = control.pause_of(self.store, name)
            ran = self.catch_up_paused(current) if current else None
        return control.resume(self.store, name, by=by), ran

    def _job(self, name: str) -> Job:
        job = self._timers.get(name)
        if job is None:
            raise ConfigError("no such job", job=name, option="name", value=name)
        return job
