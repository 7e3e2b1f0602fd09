"""No request fails under contention (issue #20): throughput, latency, failures and retries
of a read-modify-write workflow as concurrent users pile onto one row, against the minimal
exactly-once version written by hand under the same load and the same conflicts.

Why: idemflow retries a step until a deadline (30 s) instead of a fixed number of times, so
on a hot row requests should queue up and finish at the row's serial rate, never reach the
caller as an error, and cost no more than the hand-written version (target: idemflow /
minimal throughput ≥ 0.9). This measures it, and checks exactly-once while doing so.

The workload, a 2-step survey vote:

1. record the vote in table ``responses``, partition = survey, key ``r:<voter>`` (a second
   vote of the same voter is refused: the step aborts);
2. read-modify-write the survey's one summary row (``summaries/<survey>``, key ``counts``,
   a dict option -> count): read it, add one, write it back; the answer is the option's
   new count (each vote's rank: distinct per option if the updates were serial).

Each request id is sent **twice**: by default (``--duplicates same-user``) its user sends it
again as soon as it has the answer (a client retrying a request whose answer it lost); with
``next-user`` the second copy comes from the next user, in the same position of its own
sequence, so with several users it usually races the original (a client retrying through
another server while the first attempt still runs): twice the executions on the hot row.
Both sends must get the same answer, and the duplicate must change nothing. Users are threads
(kept for a whole cell) sending back to back: 1, 8, 32, 64, 128; placement **hot** (every user
votes in one survey: one summary row) or **spread** (a survey per user).

Variants, interleaved round by round in this process (order alternating), each on fresh
tables per cell:

- **idemflow**: a ``@workflow`` under :func:`idemflow.run`;
- **minimal**: the hand-written minimal exactly-once version (:mod:`benchmarks.common.exactly_once`):
  each step one transactional write with its data change, conditioned on what it read, and a
  memo row (request id, step) inserted if absent; a duplicate answered from the memo;
  conflicts retried with jittered exponential backoff until a 30 s deadline (idemflow's own
  waits and deadline).

Stores: SQLite, DynamoDB Local (AWS's own engine) with
:class:`idemflow.testing.conflicts.DynamoDBConflicts` on both variants' clients (the service's
transaction-conflict rules, plus ``--phantom-rate`` conflicts injected at random: 0.05), and
Azure Tables on Azurite.

Reported per store × placement × users × variant: throughput (sends per second, both sends
counted, until every effect is done: idemflow's off-path completion writes flushed), p50/p95
latency of answered sends, failed sends (any exception reaching the caller; the goal is 0),
write attempts beyond a conflict-free execution's per request id (p50/p99: idemflow's commits
counted by a :class:`~idemflow.stores.base.StoreWrapper`, the baseline's own attempts; the
conflict-free number is measured on each cell's fresh tables before the load), the per-round
idemflow / minimal throughput ratio, and the exactly-once check: every survey's final counts
equal its distinct voters, both sends of a request got one answer, and no rank was given
twice. Violations are printed loudly and listed on the page.

Run: ``python -m benchmarks contention [--quick] [--stores sqlite,dynamodb-local,azurite]``
(or ``python -m benchmarks.contention --help`` for sizes). Writes ``contention.md``,
``contention.json`` and ``contention.png`` into ``benchmarks/results/`` (``--quick``:
``results-quick/``). The full run takes about 10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.backends import open_backend
from benchmarks.common.report import Report
from benchmarks.common.stats import RESULTS
from benchmarks.contention.cells import measure_store
from benchmarks.contention.params import FULL, PHANTOM_RATE, PLACEMENTS, QUICK, STORES, Sizes
from benchmarks.contention.report import headlines, plot, report_store
from benchmarks.contention.results import Results


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Report:
    parser = argparse.ArgumentParser(prog="python -m benchmarks contention", description=__doc__)
    parser.add_argument("--stores", default=",".join(STORES), help="comma-separated: " + ",".join(STORES))
    parser.add_argument("--users", default=None, help="comma-separated user counts")
    parser.add_argument("--placements", default=",".join(PLACEMENTS))
    parser.add_argument("--rounds", type=int, default=None, help="rounds per cell, every store")
    parser.add_argument(
        "--requests", type=int, default=None, help="requests per variant per round, every store"
    )
    parser.add_argument("--phantom-rate", type=float, default=PHANTOM_RATE, help="DynamoDB emulator")
    parser.add_argument(
        "--duplicates",
        choices=("same-user", "next-user"),
        default="same-user",
        help="who sends a request's second copy: its user right after the answer, or the next user (racing)",
    )
    parser.add_argument("--out", type=Path, default=None, help="results folder")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    args = parser.parse_args(argv)
    quick = quick or args.quick
    out = args.out or out
    base = QUICK if quick else FULL
    sizes = Sizes(
        users=tuple(int(u) for u in args.users.split(",")) if args.users else base.users,
        rounds={"default": args.rounds} if args.rounds else base.rounds,
        requests={"default": args.requests} if args.requests else base.requests,
        warmup=base.warmup,
    )
    stores = [s for s in args.stores.split(",") if s]
    placements = [p for p in args.placements.split(",") if p]
    report = Report(
        "contention",
        "Under contention: a read-modify-write workflow, idemflow against minimal exactly-once",
        {
            "stores": stores,
            "placements": placements,
            "users": list(sizes.users),
            "rounds": sizes.rounds,
            "requests per variant per round": f"max(users, {sizes.requests}), each sent twice",
            "duplicates": args.duplicates,
            "DynamoDB phantom conflict rate": args.phantom_rate,
            "untimed warm-up requests per variant and cell": sizes.warmup,
            "retry deadline (s)": 30,
        },
        out,
    )
    report.add(
        "A 2-step vote: record the vote (refused if the voter voted), then read-modify-write the",
        "survey's one summary row. Each request id is sent twice (*duplicates* `same-user`: again by",
        "its user once answered; `next-user`: by the next user, racing the original). *hot*: every",
        "user votes in one survey (one summary row); *spread*: a survey per user. *minimal*:",
        "hand-written, each step one conditioned transactional write with a memo row, conflicts",
        "retried with idemflow's waits (by kind: data conflict or transient) until 30 s.",
        "Variants interleaved round by round on fresh tables per cell. *sends/s* counts both sends,",
        "until idemflow's off-path writes are flushed; latencies are of answered sends; *failed*",
        "counts sends that raised; *retries/request*: write attempts (idemflow: store commits)",
        "beyond the conflict-free execution's (*writes, conflict-free*: measured before the load on",
        "each cell's tables, a request and its duplicate one after the other); *retried*: retries",
        "over the cell after a failed condition on data (re-read) / after a transient error (a",
        "concurrent transaction, throttling, busy: both variants re-read and run the step again;",
        "idemflow's retries on one partition take turns inside the process); *emulated conflicts*:",
        "transactions the DynamoDB conflict emulator cancelled (overlaps and phantoms). *exactly",
        "once*: final counts equal the distinct voters, both sends of a request got one answer, no",
        "rank answered twice. See the module docstring of `benchmarks/contention.py`.",
        "",
    )
    per_store: dict[str, Results] = {}
    record: dict[str, Any] = {}
    try:
        for kind in stores:
            print(f"  contention on {kind} ...", flush=True)
            with open_backend(kind) as backend:
                per_store[kind] = measure_store(
                    backend, sizes, placements, args.phantom_rate, args.duplicates
                )
            record[kind] = report_store(report, kind, per_store[kind])
            headlines(report, kind, per_store[kind])
        if per_store:
            image = plot(out, per_store)
            report.add(f"![throughput against users]({image.name})", "")
    finally:
        report.data["results"] = record
        report.write()  # what was measured is kept even if a later store fails
    violations = sum(
        len(result.violations)
        for results in per_store.values()
        for by_users in results.values()
        for cell in by_users.values()
        for result in cell.values()
    )
    if violations:
        print(f"!!! {violations} EXACTLY-ONCE VIOLATIONS: see {out / 'contention.md'}", file=sys.stderr)
    return report
