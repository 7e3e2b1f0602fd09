"""Bank transfers from several processes on one SQLite file, SIGKILLed at random.

What ``make demo`` runs (``python -m samples.transfer.demo --help``). It is
the paper's claim made visible: with no coordinator, no lock held across
steps and nothing that must expire before a retry, duplicated requests,
racing workers and processes killed mid-commit still leave the tables as if
every request had run exactly once.

1. Open ``--accounts`` accounts on a fresh :class:`~idemflow.stores.SqliteStore`.
2. Make ``--requests`` transfer requests (random accounts and amounts; one in
   twenty to an account that does not exist, so it aborts after its debit and
   the debit is refunded; one in twelve too large, so it aborts at once) and
   submit each 2-3 times under the same request id, copies close together so
   duplicates race on different workers.
3. Worker *processes* (``spawn``; each opens its own ``SqliteStore`` on the
   file) run what the parent hands them. A request counts as done only when
   its answer reached the parent, as a client would see it.
4. The parent SIGKILLs a random busy worker at random moments and starts a
   replacement that is handed the killed worker's unanswered requests.
5. Finally :func:`~samples.transfer.workflows.check` verifies conservation of
   money, one audit row per completed request, every balance against a
   single-process replay of the completed transfers, one refund per
   compensated request, and that every copy of a request got the same answer.

The harness is importable (:func:`run_harness`) so the crash tests run it
with a fixed seed and smaller sizes.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence
from pathlib import Path

from samples.transfer.demo_requests import Settings, Submission, make_requests, make_submissions
from samples.transfer.demo_run import Report, reset, run_harness

DB_NAME = "transfer.sqlite3"


def parse(argv: Sequence[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(
        prog="python -m samples.transfer.demo",
        description="Bank transfers from worker processes on one SQLite file, SIGKILLed at random; "
        "then check that every request took effect exactly once.",
    )
    parser.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    parser.add_argument("--requests", type=int, default=300, help="distinct transfer requests (default 300)")
    parser.add_argument("--accounts", type=int, default=8, help="accounts (default 8)")
    parser.add_argument("--balance", type=int, default=1000, help="opening balance of each (default 1000)")
    parser.add_argument("--kills", type=int, default=12, help="workers to SIGKILL (default 12)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: a new one, printed)")
    parser.add_argument("--data", type=Path, default=Path("demo-data"), help="directory of the SQLite file")
    parser.add_argument(
        "--unkeyed",
        action="store_true",
        help="give every copy its own request id, as code without idempotence keys would (expect FAIL)",
    )
    args = parser.parse_args(argv)
    if args.workers < 1 or args.requests < 1 or args.accounts < 2 or args.kills < 0 or args.balance < 1:
        parser.error("need --workers >= 1, --requests >= 1, --accounts >= 2, --balance >= 1, --kills >= 0")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    return Settings(
        path=args.data / DB_NAME,
        workers=args.workers,
        requests=args.requests,
        accounts=args.accounts,
        balance=args.balance,
        kills=args.kills,
        unkeyed=args.unkeyed,
        seed=seed,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo, print the report; exit status 0 on PASS, 1 on FAIL."""
    settings = parse(argv)
    print(
        f"running {settings.requests} transfers (with duplicates) on {settings.workers} worker processes, "
        f"killing {settings.kills} of them ...",
        flush=True,
    )
    report = run_harness(settings)
    print(report.render(), flush=True)
    return 0 if report.ok else 1


__all__ = [
    "Report",
    "Settings",
    "Submission",
    "main",
    "make_requests",
    "make_submissions",
    "reset",
    "run_harness",
]

if __name__ == "__main__":
    sys.exit(main())
