"""The chaos run: the workloads repeated until the time is up, and the command line."""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from samples.chaos.children import serve_main, worker_main
from samples.chaos.coordination import coordination_killed
from samples.chaos.demos import auction_killed, auction_on_dynamodb, survey_killed, survey_on_dynamodb
from samples.chaos.deploy import transfer_deploy
from samples.chaos.limits import limits_killed
from samples.chaos.payments import payments_killed
from samples.chaos.reading import reading_killed
from samples.chaos.report import Options, Totals, render
from samples.chaos.transfer import transfer_faulty, transfer_killed

Workload = Callable[[Options, random.Random, int, Totals], None]
"""One round of a workload: ``(opts, rng, round_no, totals)``, adding what it did to ``totals``."""

WORKLOADS: list[tuple[str, Workload]] = [
    ("transfer: SIGKILLed worker processes (samples/transfer harness)", transfer_killed),
    (
        "transfer, run and submit: lost answers, transient errors, conflicts, crashes (FaultyStore), "
        "oversize inputs",
        transfer_faulty,
    ),
    (
        "transfer, deploy v1 to v2 in flight (async, worker processes): SIGKILLed and exiting workers, "
        "faulty stores, oversize inputs",
        transfer_deploy,
    ),
    ("survey (async demo): SIGKILLed servers and workers, exits after commits, faulty stores", survey_killed),
    (
        "auction (async demo): SIGKILLed servers and workers, exits after commits, faulty stores",
        auction_killed,
    ),
    (
        "survey on DynamoDB Local, the service's transaction conflicts: as 4, every process meeting them",
        survey_on_dynamodb,
    ),
    (
        "auction on DynamoDB Local, the service's transaction conflicts: as 5, every process meeting them",
        auction_on_dynamodb,
    ),
    (
        "coordination (async, worker processes): timers, children, messages; SIGKILLed and exiting "
        "workers, faulty stores",
        coordination_killed,
    ),
    (
        "payments (async, worker processes): a booking saga charging through an outside provider that "
        "goes down, declines and answers late; SIGKILLs at effect boundaries, operators' aborts",
        payments_killed,
    ),
    (
        "flow control (async, worker processes): concurrency=2 on a workflow and on a supplier's "
        "call (an effect's limit group) across 3 processes x 8 threads, slot holders SIGKILLed, "
        "checked continuously",
        limits_killed,
    ),
    (
        "reading and together (async, worker processes): events and streams read while workers are "
        "SIGKILLed, all_of calls at an outside provider, any_of of a message and a sleep, cancels "
        "with children",
        reading_killed,
    ),
]
ON_DYNAMODB = {survey_on_dynamodb, auction_on_dynamodb}


def run_chaos(opts: Options) -> list[Totals]:
    """Repeat the workloads (those of ``opts.only``) until ``opts.seconds`` passed (each at least once)."""
    rng = random.Random(opts.seed)
    opts.workdir.mkdir(parents=True, exist_ok=True)
    chosen = [(name, work) for name, work in WORKLOADS if not opts.only or name.startswith(opts.only)]
    totals = [Totals(name) for name, _ in chosen]
    deadline = time.monotonic() + opts.seconds
    round_no = 0
    while round_no == 0 or time.monotonic() < deadline:
        for (_name, workload), total in zip(chosen, totals, strict=True):
            if round_no > 0 and time.monotonic() >= deadline:
                break
            if workload in ON_DYNAMODB and opts.dynamodb is None:
                continue
            started = time.monotonic()
            workload(opts, rng, round_no, total)
            total.rounds += 1
            print(
                f"[chaos] {total.workload}: round {round_no} done in {time.monotonic() - started:.1f} s, "
                f"{total.kills} kills, {len(total.anomalies)} anomalies",
                flush=True,
            )
        round_no += 1
    return totals


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; exit status 0 when no anomaly was found."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["worker"]:
        return worker_main(args_list[1:])
    if args_list[:1] == ["serve"]:
        return serve_main(args_list[1:])
    parser = argparse.ArgumentParser(
        prog="python -m samples.chaos",
        description="The chaos suite: the samples under sustained load while processes are killed "
        "and commits misbehave.",
    )
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=float, help="how long to run (default 10)")
    length.add_argument("--seconds", type=float, help="how long to run, in seconds")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: a new one, printed)")
    parser.add_argument("--quick", action="store_true", help="smaller rounds (the test suite's short run)")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only the workloads whose names start with NAME (repeatable), e.g. --only coordination",
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/chaos.md"), help="summary file")
    parser.add_argument(
        "--workdir", type=Path, default=Path("demo-data/chaos"), help="where the SQLite files go"
    )
    parser.add_argument(
        "--no-dynamodb-local",
        action="store_true",
        help="skip the workloads on DynamoDB Local (by default started from .tools, see make setup)",
    )
    args = parser.parse_args(args_list)
    seconds = args.seconds if args.seconds is not None else 60.0 * (args.minutes or 10.0)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    print(f"[chaos] {seconds:g} s, seed {seed}, files in {args.workdir}", flush=True)
    started = time.monotonic()
    only = tuple(args.only)
    on_dynamodb = any(work in ON_DYNAMODB for name, work in WORKLOADS if not only or name.startswith(only))
    with _dynamodb_local(on_dynamodb and not args.no_dynamodb_local) as endpoint:
        opts = Options(
            seconds=seconds,
            seed=seed,
            workdir=args.workdir,
            out=args.out,
            quick=args.quick,
            dynamodb=endpoint,
            only=only,
        )
        totals = run_chaos(opts)
    text = render(totals, opts, time.monotonic() - started)
    if opts.out is not None:
        opts.out.parent.mkdir(parents=True, exist_ok=True)
        opts.out.write_text(text)
    print(text, flush=True)
    return 1 if any(total.anomalies for total in totals) else 0


@contextlib.contextmanager
def _dynamodb_local(wanted: bool) -> Iterator[str | None]:
    """DynamoDB Local on a free loopback port for the run (the test suite's launcher: this is a
    tool of the repository), or None when not wanted."""
    if not wanted:
        yield None
        return
    from idemflow.testing.servers import dynamodb_local_server

    with dynamodb_local_server() as server:
        yield server.endpoint
