"""``idemflow queue stats`` and ``idemflow worker --processes MIN:MAX``: their options and glue.

Kept out of :mod:`idemflow.cli` so that module only wires commands: the
pool's options are stripped from the worker command line and the rest is
what each worker process the supervisor starts runs, so every worker option
(present or added later) reaches the workers unchanged.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from idemflow.async_worklist.pool.policy import BacklogPolicy, ScalingPolicy
from idemflow.async_worklist.pool.supervisor import (
    POOL_WORKER_ENV,
    STOP_GRACE,
    Pool,
    check_stop_grace,
    parse_processes,
)
from idemflow.core.backlog import queue_stats
from idemflow.errors import InvalidInputError
from idemflow.worker import open_queue

_POOL_OPTIONS = (
    "--processes",
    "--scale-per-thread",
    "--scale-lag",
    "--scale-cooldown",
    "--scale-every",
    "--scaling",
    "--pool-status",
    "--stop-grace",
)
"""The pool's own options (each takes a value): never passed on to the worker processes."""


def add_pool_options(worker: argparse.ArgumentParser) -> None:
    """The ``worker`` command's pool options."""
    pool = worker.add_argument_group("worker pool (--processes)")
    pool.add_argument(
        "--processes",
        metavar="MIN:MAX",
        help="run a supervisor that keeps MIN to MAX worker processes (each with --concurrency threads), "
        "growing with the queue's backlog and lag and shrinking when it is quiet",
    )
    pool.add_argument(
        "--scale-per-thread",
        type=float,
        default=1.0,
        metavar="N",
        help="messages (visible or in flight) per worker thread before the pool grows (default 1)",
    )
    pool.add_argument(
        "--scale-lag",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="grow by one more process while the oldest visible message waited longer (default 10; "
        "SQLite, memory and Azure report lag, SQS does not)",
    )
    pool.add_argument(
        "--scale-cooldown",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="shrink only after this long wanting fewer processes (default 30)",
    )
    pool.add_argument(
        "--scale-every",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="seconds between samples (default 2)",
    )
    pool.add_argument(
        "--scaling",
        metavar="MODULE:ATTR",
        help="your own policy: a callable taking an idemflow.worker.PoolView, returning a Scaling",
    )
    pool.add_argument("--pool-status", metavar="PATH", help="keep the pool's state in this JSON file")
    pool.add_argument(
        "--stop-grace",
        type=float,
        default=STOP_GRACE,
        metavar="SECONDS",
        help="seconds a worker told to stop (SIGTERM) may take to finish what it holds before the pool "
        f"SIGKILLs it (default {STOP_GRACE:g}); a second SIGTERM or Ctrl-C to the pool kills at once",
    )


def worker_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` without the pool's options: what each worker process runs.

    >>> worker_argv(["worker", "app:flows", "--processes", "1:4", "--scale-lag=5", "--concurrency", "8"])
    ['worker', 'app:flows', '--concurrency', '8']
    """
    kept: list[str] = []
    skip = False
    for token in argv:
        if skip:
            skip = False
        elif token in _POOL_OPTIONS:
            skip = True
        elif token.partition("=")[0] not in _POOL_OPTIONS:
            kept.append(token)
    return kept


def run_pool(
    args: argparse.Namespace,
    argv: Sequence[str],
    load: Callable[[str], Any],
    parse: Callable[[list[str]], argparse.Namespace],
) -> int:
    """``idemflow worker --processes``: check everything, then supervise until SIGTERM/SIGINT.

    ``load`` imports a ``MODULE:ATTR``; ``parse`` parses a command line as ``idemflow`` does
    (to check what the workers will be given)."""

    if os.environ.get(POOL_WORKER_ENV):
        raise InvalidInputError("--processes: this worker was started by a pool; it cannot start another")
    if args.idle_timeout is not None:
        raise InvalidInputError(
            "--processes and --idle-timeout do not mix: the pool replaces exiting workers"
        )
    minimum, maximum = parse_processes(args.processes)
    stop_grace = check_stop_grace(args.stop_grace)
    command = worker_argv(argv)
    if parse(command).processes is not None:  # abbreviated (--proc): the workers would see it too
        raise InvalidInputError(
            "write --processes in full: the pool passes every other option on to its workers"
        )
    for spec in args.workflows:
        load(spec)  # a bad MODULE:ATTR fails here, once, not in every worker process
    policy: ScalingPolicy
    if args.scaling is not None:
        policy = load(args.scaling)
        if not callable(policy):
            raise InvalidInputError(f"--scaling {args.scaling!r} is not callable")
    else:
        lag = args.scale_lag if args.scale_lag > 0 else None
        policy = BacklogPolicy(per_thread=args.scale_per_thread, lag=lag, cooldown=args.scale_cooldown)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    queue = open_queue(args.queue)
    try:
        pool = Pool(
            [sys.executable, "-m", "idemflow", *command],
            minimum=minimum,
            maximum=maximum,
            concurrency=args.concurrency,
            read_stats=lambda: queue_stats(queue),
            policy=policy,
            sample_every=args.scale_every,
            status_path=args.pool_status,
            stop_grace=stop_grace,
        )
        pool.run()
    finally:
        queue.close()
    return 0


def add_queue_parser(commands: Any) -> None:
    """``idemflow queue stats``."""
    queue = commands.add_parser("queue", help="a queue's backlog")
    actions = queue.add_subparsers(dest="action", required=True)
    stats = actions.add_parser("stats", help="messages visible, delayed and in flight, and the queue's lag")
    stats.add_argument("--queue", required=True, help="queue URL, as for worker")
    stats.add_argument("--json", action="store_true", help="one JSON object")


def queue_command(args: argparse.Namespace) -> int:
    """Print one reading of the queue's :class:`~idemflow.worker.QueueStats`."""

    queue = open_queue(args.queue, create=False)  # read-only: a mistyped path creates nothing
    try:
        stats = queue_stats(queue)
    finally:
        queue.close()
    if args.json:
        print(json.dumps(stats.to_json()))
        return 0

    def shown(value: int | None) -> str:
        return "?" if value is None else str(value)

    if stats.lag is not None:
        lag = f"lag {stats.lag:.1f}s ({stats.lag_source})"
    elif stats.lag_source == "cloudwatch":
        lag = "lag unknown (in CloudWatch: ApproximateAgeOfOldestMessage)"
    elif stats.lag_source == "none":
        lag = "lag unknown"
    else:
        lag = "no lag (nothing visible)"
    kind = "exact" if stats.exact else "approximate"
    print(
        f"{stats.queue}: {shown(stats.visible)} visible, {shown(stats.delayed)} delayed, "
        f"{shown(stats.in_flight)} in flight ({stats.total} in all, {kind}); {lag}"
    )
    return 0
