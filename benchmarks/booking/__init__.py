"""A booking saga on three backends: what copies of a request cost the workers, and how soon a
confirmation completes a booking.

Both measurements run on SQLite (+ SqliteQueue), DynamoDB Local (+ SQS on moto) and Azurite
(Tables + Queue), all started once; every round visits every backend, in an order that rotates
from round to round, so the machine's drift hits them alike. The workers are a
:class:`~idemflow.worker.Worker` with two threads in this process, beside the clients
(:mod:`benchmarks.booking.rounds`); the workflows are in :mod:`benchmarks.booking.flows`.

1. **Worker executions per request**, ``bench-book`` (hold a seat, charge the card as an
   ``effect`` with a refund, ``checkpoint()``, issue the ticket) submitted once, or in three
   copies (the second racing the first from another thread, the third after both), the variants
   alternating within each round. Counted two ways: the worker's own counters (``WorkerStats``:
   completed + aborted + duplicates + suspended + retried, every message that ran the request)
   and the number of times the workflow's code after its checkpoint started (a counter in the
   workflow). A copy of a submitted request enqueues nothing, so both should be 1.0 either way;
   the ratio copies / once is taken per round.
2. **Confirm → completed latency**, ``bench-book-confirm`` (the same, with
   ``receive("confirm", timeout=...)`` after the checkpoint): a steady ``--rate`` of requests
   for ``--window`` seconds per backend-round; each request is confirmed (``send_message``) as
   soon as it waits at its receive (its status says so), and the latency runs from the call to
   ``send_message`` to the ``finished_at`` of the request's completion record (one clock: one
   machine). p50 and p99 over all rounds, and each backend's p50 over SQLite's, paired by round.

Run: ``python -m benchmarks booking [--stores sqlite,dynamodb-local,azurite] [--quick]``.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.booking.rounds import (
    KINDS,
    LABELS,
    Executions,
    Latency,
    confirm_latency,
    executions,
    open_backends,
)
from benchmarks.common.report import Report, fmt_ratio
from benchmarks.common.stats import RESULTS, paired_ratio, percentile

VARIANTS = {"once": 1, "3 copies": 3}


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Report:
    parser = argparse.ArgumentParser(prog="python -m benchmarks booking", description=__doc__)
    add = parser.add_argument
    add("--stores", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    add("--rounds", type=int, default=1 if quick else 4)
    add("--requests", type=int, default=4 if quick else 25, help="bookings per variant per round")
    add("--rate", type=float, default=4.0 if quick else 3.0, help="bookings per second (latency)")
    add("--window", type=float, default=1.5 if quick else 20.0, help="seconds of load per backend-round")
    add("--out", type=Path, default=out, help="results folder")
    args = parser.parse_args(argv)
    kinds = [kind for kind in args.stores.split(",") if kind in KINDS]
    params: dict[str, Any] = {
        "stores": kinds,
        "rounds": args.rounds,
        "bookings per variant per round": args.requests,
        "load (bookings/s)": args.rate,
        "seconds of load per backend-round": args.window,
        "workers": "one Worker, concurrency=2, in the benchmark's process",
    }
    report = Report("booking", "Booking saga: copies, executions, confirm latency", params, args.out)
    counted: dict[str, dict[str, list[Executions]]] = {k: {v: [] for v in VARIANTS} for k in kinds}
    latency: dict[str, list[Latency]] = {kind: [] for kind in kinds}
    with open_backends(kinds) as backends:
        for r in range(args.rounds):
            order = kinds[r % len(kinds) :] + kinds[: r % len(kinds)]
            for kind in order:
                names = list(VARIANTS)[r % 2 :] + list(VARIANTS)[: r % 2]
                for variant in names:
                    tag = f"bk{r}{variant[0]}{kind[0]}"
                    got = executions(backends[kind], tag, args.requests, VARIANTS[variant])
                    counted[kind][variant].append(got)
                    print(f"  booking {kind} round {r} {variant}: {_per(got)} executions/request", flush=True)
                got_latency = confirm_latency(backends[kind], f"bl{r}{kind[0]}", args.rate, args.window)
                latency[kind].append(got_latency)
                print(f"  booking {kind} round {r}: {_spread(got_latency.seconds)}", flush=True)
    _write(report, counted, latency)
    return report


def _per(got: Executions) -> str:
    return f"{got.executions / got.requests:.2f} (counter {got.starts / got.requests:.2f})"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.0f}"


def _spread(values: list[float]) -> str:
    if not values:
        return "no completed request"
    p50, p99 = statistics.median(values), percentile(values, 99)
    return f"confirm -> completed p50 {_ms(p50)} ms, p99 {_ms(p99)} ms ({len(values)} bookings)"


def _write(
    report: Report, counted: dict[str, dict[str, list[Executions]]], latency: dict[str, list[Latency]]
) -> None:
    rows, lines = [], ["", "side by side:"]
    data: dict[str, Any] = {"executions": {}, "latency": {}}
    for kind, variants in counted.items():
        per = {name: [got.executions / got.requests for got in runs] for name, runs in variants.items()}
        starts = {name: [got.starts / got.requests for got in runs] for name, runs in variants.items()}
        ratio = paired_ratio(f"{kind} copies/once", per["3 copies"], per["once"])
        unfinished = sum(got.unfinished for runs in variants.values() for got in runs)
        rows.append(
            [LABELS[kind]]
            + [f"{statistics.mean(per[name]):.2f} ({statistics.mean(starts[name]):.2f})" for name in VARIANTS]
            + [fmt_ratio(ratio), str(unfinished)]
        )
        data["executions"][kind] = {name: [vars(got) for got in runs] for name, runs in variants.items()}
        report.headline(f"booking.{kind}.executions_per_request.once", statistics.mean(per["once"]))
        report.headline(
            f"booking.{kind}.executions_per_request.copies",
            statistics.mean(per["3 copies"]),
            note="3 copies of each request (two racing); WorkerStats",
        )
        lines.append(f"  {LABELS[kind]:34} executions/request once {statistics.mean(per['once']):.2f}, ")
        lines[-1] += f"3 copies {statistics.mean(per['3 copies']):.2f}, ratio {fmt_ratio(ratio)}"
    report.add(
        "## Worker executions per request",
        "",
        "Per request: WorkerStats (completed + aborted + duplicates + suspended + retried) and, in "
        "parentheses, how often the workflow's code after its checkpoint started; mean over the rounds. "
        "Ratio: 3 copies / once, paired by round (median, IQR).",
        "",
    )
    report.table(["backend", *(f"{name}" for name in VARIANTS), "3 copies / once", "unfinished"], rows)
    sqlite_p50 = [statistics.median(got.seconds) for got in latency.get("sqlite", []) if got.seconds]
    rows = []
    for kind, runs in latency.items():
        values = [value for got in runs for value in got.seconds]
        if not values:
            rows.append([LABELS[kind], "-", "-", "-", "-", "0", "-"])
            continue
        p50, p99 = statistics.median(values), percentile(values, 99)
        p50s = [statistics.median(got.seconds) for got in runs if got.seconds]
        over = "1.00" if kind == "sqlite" or len(p50s) != len(sqlite_p50) else None
        if over is None:
            over = fmt_ratio(paired_ratio(f"{kind} p50/sqlite", p50s, sqlite_p50))
        executed = sum(got.executions for got in runs) / max(1, sum(got.requests for got in runs))
        unfinished = sum(got.unfinished for got in runs)
        counts = [str(len(values)), f"{executed:.2f}", str(unfinished)]
        rows.append([LABELS[kind], _ms(p50), _ms(p99), _ms(max(values)), over, *counts])
        report.headline(f"booking.{kind}.confirm_p50_ms", p50 * 1e3)
        report.headline(f"booking.{kind}.confirm_p99_ms", p99 * 1e3)
        data["latency"][kind] = [{**vars(got), "seconds": got.seconds} for got in runs]
        lines.append(f"  {LABELS[kind]:34} {_spread(values)}, p50 / SQLite's {over}")
    report.add(
        "## Confirm → completed latency",
        "",
        'From the call to `send_message(..., "confirm", ...)` (made once the request waits at its '
        "receive) to the `finished_at` of its completion record, in ms; p50 / SQLite's paired by "
        "round. Executions/request: the worker's, over the two continuations each booking needs "
        "(to its receive, then from it).",
        "",
    )
    header = ["backend", "p50 ms", "p99 ms", "max ms", "p50 / SQLite", "bookings", "executions/request"]
    report.table([*header, "unfinished"], rows)
    report.data = data
    path = report.write()
    print("\n".join(lines), flush=True)
    print(f"  booking: {path}", flush=True)
