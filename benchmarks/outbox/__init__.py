"""What the transactional outbox costs per ``submit``, against the previous release.

Two idemflow versions run the same workload side by side in one run:

- **baseline**: the library at a git revision (``--baseline``; by default
  :data:`PREVIOUS_RELEASE`, the last commit before the outbox), extracted
  with ``git archive`` into a temporary folder;
- **candidate**: the work tree, its ``idemflow/`` copied into a temporary
  folder when the run starts (edits made meanwhile do not mix in), or a
  revision given by ``--candidate``.

Each runs in its own subprocess (:mod:`benchmarks.outbox.child`) with its
idemflow first on ``sys.path``, on its own fresh tables of the same backend
(one SQLite folder; one moto server for DynamoDB and one for SQS; one
Azurite), driven round by round by this process: baseline, candidate,
candidate, baseline, ... (the order rotates), so the machine's drift hits
both alike. Only one subprocess works at a time.

The workload is ``tests.support.async_workflows.survey`` with a checkpoint after step
1, submitted with a new request id each time: ``submit`` runs step 1 and
hands the rest to the queue. Per round, each variant times ``per-round``
submits back to back (the round's sample is their median), then flushes the
store's background writes and lets a worker finish the requests, untimed.
Latency ratios are candidate / baseline per round, summarized by their
median and IQR. On moto and Azurite a third variant runs in the rotation:
the candidate with each submit's background write awaited (untimed) before
the next submit, to tell the critical path's own cost from the contention
of that write with the next submit (moto serves one request at a time).

Counted per submit: backend calls on the client's critical path (the store's
own count, :func:`benchmarks.common.counting.backend_calls`, minus its cache writes,
+ the queue send), the store API calls behind them (reads, commits), rows and
logical bytes written, the message body, and off the critical path the ``commit_cache`` writes (the
candidate's deletion of the outbox entry: a background thread on DynamoDB and
Azure, on the caller's thread, un-fsynced, on SQLite — so there it is inside
the measured latency). Also what the worker does to finish the request and
what one pass of the candidate's outbox relay costs (every worker runs one
every ``relay_every`` seconds).

Run: ``python -m benchmarks outbox [--stores sqlite,moto,azurite] [--quick]``, or
``python -m benchmarks.outbox --baseline REV [--candidate REV] ...`` for other versions.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common.backends import DEFAULT_KINDS
from benchmarks.common.report import Report
from benchmarks.common.stats import RESULTS
from benchmarks.outbox.report import write
from benchmarks.outbox.rounds import Variant, measure
from benchmarks.outbox.trees import candidate_tree, revision_tree

PREVIOUS_RELEASE = "5bd1831"
"""The last commit before the transactional outbox (10ccdb1, "Continuations keep the promise")."""


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Report:
    parser = argparse.ArgumentParser(prog="python -m benchmarks outbox", description=__doc__)
    parser.add_argument("--stores", default="sqlite" if quick else ",".join(DEFAULT_KINDS))
    parser.add_argument(
        "--baseline", default=PREVIOUS_RELEASE, help="git revision measured as the previous release"
    )
    parser.add_argument("--candidate", default=None, help="git revision measured instead of the work tree")
    parser.add_argument("--rounds", type=int, default=4 if quick else 16)
    parser.add_argument("--per-round", type=int, default=None, help="submits per variant per round")
    parser.add_argument("--warmup", type=int, default=None, help="untimed submits per variant first")
    parser.add_argument("--out", type=Path, default=out, help="results folder")
    args = parser.parse_args(argv)
    out = args.out
    stores = [s for s in args.stores.split(",") if s]

    def per_round(kind: str) -> int:
        if args.per_round is not None:
            return int(args.per_round)
        return 10 if quick else (50 if kind == "sqlite" else 20)

    def warmup(kind: str) -> int:
        if args.warmup is not None:
            return int(args.warmup)
        return (20 if quick else 250) if kind == "sqlite" else (3 if quick else 20)

    with (
        revision_tree(args.baseline) as (baseline_root, commit),
        candidate_tree(args.candidate, commit) as (candidate_root, candidate),
    ):
        roots = {"baseline": baseline_root, "candidate": candidate_root}
        report = Report(
            "outbox",
            "Transactional outbox: submit against the previous release",
            {
                "baseline": f"{args.baseline} = {commit[:12]}",
                "candidate": candidate,
                "stores": stores,
                "rounds": args.rounds,
                "submits per variant per round": {kind: per_round(kind) for kind in stores},
                "untimed warm-up submits": {kind: warmup(kind) for kind in stores},
            },
            out,
        )
        print(f"  outbox: baseline {commit[:12]}, candidate {candidate}", flush=True)
        measured: dict[str, dict[str, Variant]] = {}
        for kind in stores:
            print(f"  outbox {kind}: {args.rounds} rounds of {per_round(kind)} submits", flush=True)
            measured[kind] = measure(kind, roots, args.rounds, per_round(kind), warmup(kind))
    write(report, measured, commit, candidate, out)
    return report
