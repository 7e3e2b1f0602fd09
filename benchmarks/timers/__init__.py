"""Durable timers in real time, and what ``sleep``, ``start`` + ``wait`` and ``send`` + ``receive`` cost.

1. **Timer lateness** — *actual − due* per timer, where *due* is the sleep's memoized due time
   (read from its memo) and *actual* the wall clock when the step after the sleep ran
   (recorded by that step's body), on SQLite (+ SqliteQueue), moto (DynamoDB + SQS) and
   Azurite (Tables + Queue). Workers are ``idemflow worker`` processes, as deployed
   (:mod:`benchmarks.timers.lateness`). Two scenarios:

   - *under load*: ``--requests`` timers submitted evenly over ``--window`` seconds by 4
     client threads, each ``sleep(s)`` with ``s`` uniform in ``--sleep``, while
     ``--background-rate`` requests/s that never sleep (a checkpoint, a step) keep the workers
     busy;
   - *worker killed at the due time*: ``--batches`` batches of ``--per-batch`` timers, each
     batch due at one instant (``sleep_until``); as soon as a worker finished the batch's first
     timer, every worker process is SIGKILLed and new ones started. What a killed worker held
     comes back after the queue's visibility timeout (``--kill-visibility``), so its lateness
     includes it.

   Also reported: the lateness of the request's end (its run record's ``finished_at``).
2. **Calls** per ``sleep(1)``, ``start`` + ``wait`` and ``send`` + ``receive`` against a plain step
   (:mod:`benchmarks.timers.calls`).

Run: ``python -m benchmarks timers [--stores sqlite,moto,azurite] [--quick]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.backends import LABELS
from benchmarks.common.report import Report
from benchmarks.common.stats import RESULTS, percentile
from benchmarks.timers.calls import OPERATIONS, count
from benchmarks.timers.flows import KINDS, backend_spec
from benchmarks.timers.lateness import ROOT, Outcome, killed, library_snapshot, under_load

SCENARIOS = ("under load", "worker killed at due")


def _parser(quick: bool, out: Path) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks timers", description=__doc__)
    add = parser.add_argument
    add("--stores", default=",".join(KINDS))
    add("--requests", type=int, default=20 if quick else 200, help="timers under load")
    add("--window", type=float, default=5.0 if quick else 60.0, help="seconds the timers are submitted over")
    add("--sleep", type=float, nargs=2, default=(1.0, 2.0) if quick else (2.0, 6.0), metavar=("MIN", "MAX"))
    add("--background-rate", type=float, default=2.0, help="requests/s that never sleep")
    add("--workers", type=int, default=2, help="worker processes")
    add("--concurrency", type=int, default=4, help="threads per worker process")
    add("--visibility", type=float, default=30.0, help="visibility timeout under load (s)")
    add("--batches", type=int, default=1 if quick else 4, help="kills, one per batch of timers")
    add("--per-batch", type=int, default=6 if quick else 25, help="timers due at each kill")
    add("--kill-visibility", type=float, default=3.0 if quick else 10.0, help="visibility timeout (s)")
    add("--kill-lead", type=float, default=4.0 if quick else 8.0, help="seconds from start to batch 1")
    add("--samples", type=int, default=2 if quick else 5, help="requests per workflow counted")
    add("--skip", default="", help="comma-separated parts to leave out: load, killed, calls")
    add("--out", type=Path, default=out, help="results folder")
    return parser


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Report:
    args = _parser(quick, out).parse_args(argv)
    stores = [kind for kind in args.stores.split(",") if kind in KINDS]
    skip = set(args.skip.split(",")) - {""}
    params: dict[str, Any] = {
        "stores": stores,
        "under load": {
            "timers": args.requests,
            "window s": args.window,
            "sleep s": list(args.sleep),
            "background requests/s": args.background_rate,
            "visibility timeout s": args.visibility,
        },
        "killed": {
            "batches": args.batches,
            "timers per batch": args.per_batch,
            "visibility timeout s": args.kill_visibility,
        },
        "worker processes": args.workers,
        "threads per worker": args.concurrency,
        "calls: requests per workflow": args.samples,
    }
    lateness: dict[str, dict[str, Outcome]] = {}
    calls: dict[str, dict[str, Any]] = {}
    with library_snapshot() as (cwd, digest):
        params["idemflow"] = _library(digest)
        report = Report(
            "timers", "Durable timers: lateness, and the calls of start, send and sleep", params, args.out
        )
        for kind in stores:
            with backend_spec(kind) as spec:
                found = lateness.setdefault(kind, {})
                if "load" not in skip:
                    print(f"  timers {kind}: {args.requests} timers under load", flush=True)
                    found[SCENARIOS[0]] = under_load(
                        spec, "tload", requests=args.requests, window=args.window, sleeps=tuple(args.sleep),
                        background_rate=args.background_rate, workers=args.workers,
                        concurrency=args.concurrency, visibility_timeout=args.visibility, cwd=cwd,
                    )  # fmt: skip
                    _print(kind, SCENARIOS[0], found[SCENARIOS[0]])
                if "killed" not in skip:
                    print(f"  timers {kind}: {args.batches} kills at due times", flush=True)
                    found[SCENARIOS[1]] = killed(
                        spec, "tkill", batches=args.batches, per_batch=args.per_batch, workers=args.workers,
                        concurrency=args.concurrency, visibility_timeout=args.kill_visibility,
                        lead=args.kill_lead, cwd=cwd,
                    )  # fmt: skip
                    _print(kind, SCENARIOS[1], found[SCENARIOS[1]])
                if "calls" not in skip:
                    print(f"  timers {kind}: calls, {args.samples} requests per workflow", flush=True)
                    calls[kind] = count(spec, "tcalls", args.samples)
    from benchmarks.timers.report import write

    write(report, lateness, calls, args.kill_visibility, args.visibility)
    print(_side_by_side(calls), flush=True)
    return report


def _library(digest: str) -> str:
    """Which idemflow the workers ran: HEAD, the files the work tree changes, the copy's digest."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False)
        return done.stdout.strip()

    changed = len(git("status", "--porcelain", "--", "idemflow").splitlines())
    return (
        f"the work tree at {git('rev-parse', '--short=12', 'HEAD')}, {changed} files changed (copy {digest})"
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.0f}"


def spread(values: Sequence[float]) -> tuple[float, float, float, float]:
    """p50, p99, max and min."""
    return (statistics.median(values), percentile(values, 99), max(values), min(values))


def _print(kind: str, scenario: str, outcome: Outcome) -> None:
    p50, p99, top, low = spread([t.late for t in outcome.timers])
    print(
        f"  timers {kind} {scenario}: lateness p50 {_ms(p50)} ms, p99 {_ms(p99)} ms, max {_ms(top)} ms, "
        f"min {_ms(low)} ms ({len(outcome.timers)} timers, {outcome.seconds:.0f} s)",
        flush=True,
    )


def _side_by_side(calls: dict[str, dict[str, Any]]) -> str:
    """Store calls + queue sends per operation, a column each, a row per backend."""
    lines = [
        "",
        "backend calls (store + queue sends) per operation:",
        f"{'':32}" + "".join(f"{o:>18}" for o in OPERATIONS),
    ]
    for kind, found in calls.items():
        cells = [f"{found[o]['round_trips']:.1f} + {found[o]['sends']:.1f}" for o in OPERATIONS]
        lines.append(f"{LABELS[kind]:32}" + "".join(f"{cell:>18}" for cell in cells))
    return "\n".join(lines)
