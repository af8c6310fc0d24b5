"""docs/benchmarks.md from bench/results.json: the numbers, the targets, and what they say."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CORES = 2  # the replicas that can enqueue at once on this machine


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _ms(value: float) -> str:
    return f"{value:,.0f}" if value == value else "-"  # NaN: nothing arrived


def _measured(results: dict[str, Any], name: str) -> str:
    run = results.get("measured", {}).get(name)
    if not run:
        return ""
    return f"Measured by `{run['command']}`, started {run['started'][:16]} UTC."


def write_report(results: dict[str, Any], path: Path) -> None:
    machine = results["machine"]
    parts = [
        "# Benchmarks",
        "",
        "Measured side by side on one machine with `make bench` (`bench/run.py`), on loopback "
        f"Redis {machine['redis-server']}. Each section says which run measured it.",
        "",
        f"- Machine: {machine['cpu']}, {machine['memory']}, {machine['os']}, "
        f"Python {machine['python']}",
        f"- Versions: {machine['versions']}",
        "- Stores and brokers are two separate throwaway `redis-server` processes, so the store's",
        "  `INFO commandstats` and the broker's queues never mix.",
        "- A message's enqueue time is when it appears in the broker's queue (the queue length",
        "  polled every millisecond); lag is that time minus the occurrence's scheduled time.",
        "",
    ]
    bare = results.get("bare_us")
    if bare:
        parts += [
            "## The floor: the libraries' own enqueue",
            "",
            _measured(results, "bare_us"),
            "",
            "One process, one connection, the library's own enqueue (Celery `send_task` in a "
            "loop, RQ `enqueue_many` in one pipeline, Dramatiq `broker.enqueue` in a loop); "
            "`rq-call` is RQ's `enqueue_call(..., unique=True)` one by one, which is what the "
            "adapter does (RQ's `enqueue_many` has no `unique`). The floors below use the first "
            "three.",
            "",
            _table(["library", "µs per message"], [[lib, f"{us:.0f}"] for lib, us in bare.items()]),
            "",
        ]
    burst = results.get("burst")
    if burst:
        rows = []
        for r in burst:
            floor = r["jobs"] * bare[r["library"]] / 1000 / min(r["replicas"], CORES)
            share = r["jobs"] / r["replicas"]
            spread = [w / share for w in r["won"]] if share else []
            rows.append(
                [
                    r["library"],
                    f"{r['jobs']:,}",
                    r["replicas"],
                    _ms(r["p50_ms"]),
                    _ms(r["p99_ms"]),
                    _ms(r["max_ms"]),
                    _ms(floor),
                    f"{r['p99_ms'] / floor:.2f}" if floor else "-",
                    " / ".join(f"{s:.2f}" for s in spread),
                    " / ".join(str(t) for t in r["claim_round_trips"]),
                    " / ".join(str(c) for c in r["cpu_s"]),
                    f"{max(r['peak_rss_mb']):.0f}",
                    "" if r["complete"] and not r["late_start"] else "incomplete",
                ]
            )
        parts += [
            "## Burst: N jobs due at the same second",
            "",
            _measured(results, "burst"),
            "",
            "Lag from the scheduled second to the message in the queue. The floor is N × the "
            f"library's bare cost ÷ the replicas that can enqueue at once (at most {CORES} on "
            f"{CORES} cores); the target is p99 ≤ 1.25 × floor. Share: what each replica "
            "enqueued ÷ its fair share (target 0.5 to 1.5). Claim round trips per replica "
            "(target ≤ 5), beat CPU seconds per replica (whole run, import included), peak RSS "
            "of the largest replica.",
            "",
            _table(
                [
                    "library",
                    "N",
                    "R",
                    "p50 ms",
                    "p99 ms",
                    "max ms",
                    "floor ms",
                    "p99 ÷ floor",
                    "share per replica",
                    "claim round trips",
                    "CPU s",
                    "RSS MB",
                    "",
                ],
                rows,
            ),
            "",
        ]
    peers = results.get("peers")
    if peers:
        rows = [
            [
                p["scheduler"],
                f"{p['jobs']:,}",
                p["replicas"],
                _ms(p["p50_ms"]),
                _ms(p["p99_ms"]),
                _ms(p["max_ms"]),
                " / ".join(str(c) for c in p["cpu_s"]),
                f"{max(p['peak_rss_mb']):.0f}",
                "" if p["complete"] else f"only {p['sent']:,} sent in 120 s; lags of those",
            ]
            for p in peers
        ]
        parts += [
            "## The same burst from `beat_schedule`: celery beat and RedBeat",
            "",
            _measured(results, "peers"),
            "",
            "N `crontab` entries due at the same minute, sent to the same Redis broker.",
            "",
            _table(
                ["scheduler", "N", "R", "p50 ms", "p99 ms", "max ms", "CPU s", "RSS MB", ""], rows
            ),
            "",
        ]
        ratio_rows = []
        for p in peers:
            if p["scheduler"] != "celery.beat:PersistentScheduler":
                continue
            ours = [r for r in burst or [] if r["library"] == "celery" and r["jobs"] == p["jobs"]]
            for r in ours:
                ratio_rows.append(
                    [f"{p['jobs']:,}", r["replicas"], f"{r['p99_ms'] / p['p99_ms']:.2f}"]
                )
        if ratio_rows:
            parts += [
                "p99 lag of cron-bridge (Celery target) ÷ p99 lag of celery beat for the same N:",
                "",
                _table(["N", "cron-bridge replicas", "ratio"], ratio_rows),
                "",
            ]
    failover = results.get("failover")
    if failover:
        rows = [
            [
                f["kind"] + (f" (lock timeout {f['lock_timeout']} s)" if f["lock_timeout"] else ""),
                f"{f['gap_s']:.2f}",
                f["lost"],
                f["window_s"],
            ]
            for f in failover
        ]
        parts += [
            "## Failover: SIGKILL the beat that is sending",
            "",
            _measured(results, "failover"),
            "",
            "A job every second; the replica that sent the latest occurrence is SIGKILLed. Gap: "
            "the longest silence between two messages from 2 s before the kill to the end of the "
            "window (1 s when nothing is lost; the window's length when nothing came after the "
            "kill); lost: seconds of the window after the kill with no message (target: 0). "
            "RedBeat by default: lock timeout 5 × `beat_max_loop_interval` (300 s), and standby "
            "replicas ask for the lock every `beat_max_loop_interval`; tuned: lock timeout 3 s, "
            "`beat_max_loop_interval` 1 s.",
            "",
            _table(["scheduler", "gap s", "lost", "window s"], rows),
            "",
        ]
    idle = results.get("idle")
    if idle:
        parts += [
            "## Idle cost: one beat with 100 hourly jobs",
            "",
            _measured(results, "idle"),
            "",
            _table(
                ["beat", "CPU s per minute", "peak RSS MB"],
                [[i["kind"], i["cpu_s_per_min"], i["peak_rss_mb"]] for i in idle],
            ),
            "",
        ]
    guard = results.get("guard")
    if guard:
        parts += [
            "## Guard overhead on a warm worker",
            "",
            _measured(results, "guard"),
            "",
            "The same task bare and under `@cluster_task` (overlap lock with its heartbeat "
            "thread, context, run record in the Redis store), run one at a time: Celery solo, "
            "RQ's SimpleWorker, Dramatiq with one thread. Target: under 2 ms per task.",
            "",
            _table(
                ["library", "bare ms per task", "guarded ms per task", "overhead ms"],
                [[g["library"], g["bare_ms"], g["guarded_ms"], g["overhead_ms"]] for g in guard],
            ),
            "",
        ]
    wait = results.get("wait")
    if wait:
        parts += [
            "## Claims that wait for replicas (`wait_replicas`)",
            "",
            _measured(results, "wait"),
            "",
            "One claim batch (`claim_many`, as a beat sends per burst slice) against a "
            "Sentinel-managed primary with two replicas on loopback, with `wait_replicas` 0 "
            "(the primary alone), 1 and 2 (`WAIT` in the same pipeline). What it buys is in "
            "[the guarantee](guarantee.md#redis-failover).",
            "",
            _table(
                ["occurrences per batch", "wait_replicas", "batches", "median ms", "p99 ms"],
                [
                    [w["batch"], w["wait_replicas"], w["batches"], w["median_ms"], w["p99_ms"]]
                    for w in wait
                ],
            ),
            "",
        ]
    notes = Path(__file__).with_name("NOTES.md")
    if notes.exists():
        parts += [notes.read_text().strip(), ""]
    path.write_text("\n".join(parts))
