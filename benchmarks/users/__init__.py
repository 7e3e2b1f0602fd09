"""Throughput and latency against concurrent users: the paper's figures.

For each backend (SQLite, DynamoDB on moto, Azure Tables on Azurite), each
workload (survey, auction) and each number of concurrent users, three
variants run interleaved, round after round, in this process:

- **baseline**: the hand-written SDK code of :mod:`benchmarks.common.workloads`,
  same business logic and data, no idempotence;
- **sync**: the idemflow workflow under :func:`idemflow.run`;
- **async**: the same workflow under :func:`~idemflow.client.submit`
  (the client is answered at the checkpoint) with a :class:`Worker` finishing
  it from the backend's queue (SqliteQueue, SQS on its own moto server,
  Azure Queue) while the clients keep sending.

Users are threads, each sending its requests back to back. Latency is what
the client waits for one request; throughput is requests completed per
second of a round, *completed* meaning every effect done (for async: the
workers drained the queue; for sync: off-path completion writes flushed).
Ratios are taken per round between variants of the same round, then
summarized (median, IQR).

Run: ``python -m benchmarks users [--stores sqlite,moto,azurite] [--quick]``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common.backends import DEFAULT_KINDS, LABELS, open_backend
from benchmarks.common.report import Report
from benchmarks.common.stats import RESULTS
from benchmarks.common.workloads import WORKLOADS
from benchmarks.users.report import plot_backend, report_backend
from benchmarks.users.rounds import FULL, QUICK, Cell, Sizes, measure


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Report:
    parser = argparse.ArgumentParser(prog="python -m benchmarks users", description=__doc__)
    parser.add_argument(
        "--stores", default=",".join(DEFAULT_KINDS), help="comma-separated: sqlite,moto,azurite"
    )
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--users", default=None, help="comma-separated user counts")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--min-requests", type=int, default=None)
    args = parser.parse_args(argv)
    base = QUICK if quick else FULL
    sizes = Sizes(
        users=tuple(int(u) for u in args.users.split(",")) if args.users else base.users,
        rounds=args.rounds or base.rounds,
        min_requests=args.min_requests or base.min_requests,
        per_user=base.per_user,
        workers=base.workers,
        warmup=base.warmup,
    )
    stores = [s for s in args.stores.split(",") if s]
    workloads = [w for w in args.workloads.split(",") if w]
    report = Report(
        "users",
        "Throughput and latency against concurrent users",
        {
            "stores": stores,
            "workloads": workloads,
            "users": list(sizes.users),
            "rounds": sizes.rounds,
            "requests per variant per round": f"max({sizes.min_requests}, {sizes.per_user} × users)",
            "async workers": f"1 Worker, concurrency {sizes.workers}",
            "SQLite warm-up per variant and user count": sizes.warmup,
        },
        out,
    )
    report.add(
        "Variants interleaved round by round (order rotated); each user a thread sending requests back",
        "to back. *completed/s* counts a request when all its effects are done (async: workers drained;",
        "sync: off-path completion writes flushed). See README.md for the workloads and baselines.",
        "",
    )
    try:
        for kind in stores:
            report.add(f"## {LABELS[kind]}", "")
            per_workload: dict[str, dict[int, dict[str, Cell]]] = {}
            with open_backend(kind) as backend:
                for name in workloads:
                    per_workload[name] = measure(backend, WORKLOADS[name], sizes)
                    report_backend(report, kind, name, per_workload[name])
            plot = plot_backend(out, kind, per_workload)
            report.add(f"![{kind}]({plot.name})", "")
    finally:
        report.write()  # what was measured is kept even if a later store fails
    return report
