"""``idemflow worker``: its options, and a worker run on threads, on an event loop
(``--asyncio``) or as a pool of processes (``--processes``, :mod:`idemflow.cli.pool`).

The worker command has the most options and the only long-running loop of the command line, with
its own logging and progress lines, so it has a module of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from idemflow.cli import pool as _pool_cli
from idemflow.cli.loading import load_object, load_schedules, load_workflows
from idemflow.core.policy import RetryPolicy
from idemflow.core.step_retry import StepRetry
from idemflow.keys import check_duration
from idemflow.running.workflows import Workflow
from idemflow.scheduling.definition import Schedule, check_schedules
from idemflow.scheduling.scheduler import AsyncScheduler, Scheduler
from idemflow.stores import Store
from idemflow.stores._opening import open_async_store
from idemflow.worker import AsyncWorker, Worker, open_async_queue, open_queue

if TYPE_CHECKING:
    from idemflow.worker import WorkerStats


def add_worker_parser(commands: Any) -> None:
    """``idemflow worker``'s parser, with the pool's options (:mod:`idemflow.cli.pool`)."""
    worker = commands.add_parser("worker", help="finish checkpointed workflows from a queue")
    worker.add_argument(
        "workflows",
        nargs="+",
        help="MODULE:ATTR naming an iterable of @workflow functions (MODULE may be in the current "
        "directory); several may be given, e.g. the old and new versions during a deploy",
    )
    worker.add_argument("--store", required=True)
    worker.add_argument(
        "--queue",
        required=True,
        help="queue URL, e.g. sqs:jobs?region=eu-west-1 (&lanes=true: priority lanes)",
    )
    worker.add_argument("--concurrency", type=int, default=1, help="threads, or tasks with --asyncio")
    worker.add_argument(
        "--asyncio",
        action="store_true",
        help="run on an event loop: the stores' and queues' asynchronous clients, concurrency as tasks",
    )
    worker.add_argument("--idle-timeout", type=float, default=None, help="exit after this many idle seconds")
    worker.add_argument(
        "--log-steps",
        action="store_true",
        help="also log every run and step the engine executes (DEBUG events of the idemflow.engine logger)",
    )
    worker.add_argument(
        "--max-deliveries",
        type=int,
        default=5,
        help="deliveries of a message no worker here can run before its request fails (poison messages)",
    )
    worker.add_argument(
        "--retry-for",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long a step that raises is retried when neither it nor its workflow names a policy "
        "(default: a day, at most every 5 minutes)",
    )
    worker.add_argument(
        "--version-wait",
        type=float,
        default=30.0,
        help="seconds before a request this worker cannot run returns",
    )
    worker.add_argument("--relay-every", type=float, default=10.0, help="seconds between outbox relay passes")
    worker.add_argument(
        "--retention",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long rows are kept for requests that carry no retention of their own (children, "
        "requests submitted before 1.0); others keep the one submit stored (default: 7 days)",
    )
    worker.add_argument(
        "--schedules",
        action="append",
        metavar="MODULE:ATTR",
        help="also fire these schedules' ticks (one Schedule or a list; repeatable): every worker may, "
        "each tick is one request",
    )
    worker.add_argument(
        "--schedule-every",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="seconds between scheduler passes",
    )
    _pool_cli.add_pool_options(worker)


def run_worker_command(
    args: argparse.Namespace, store: Store, parse: Callable[[list[str]], argparse.Namespace]
) -> int:
    """Run the worker until ``--idle-timeout`` or a signal; ``parse`` parses a command line as
    ``idemflow`` does (a pool checks what its workers will be given)."""
    if args.processes is not None:
        load = lambda spec: load_object(spec, "workflows or a policy")  # noqa: E731
        return _pool_cli.run_pool(args, args.argv, load, parse)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    for sdk in ("azure", "botocore", "boto3", "urllib3"):  # their INFO is one line per HTTP call
        logging.getLogger(sdk).setLevel(logging.WARNING)
    if args.log_steps:
        logging.getLogger("idemflow.engine").setLevel(logging.DEBUG)
    workflows = [flow for spec in args.workflows for flow in load_workflows(spec)]
    options: dict[str, Any] = {
        "concurrency": args.concurrency,
        "max_deliveries": args.max_deliveries,
        "version_wait": args.version_wait,
        "step_retry": None if args.retry_for is None else StepRetry(expiry=args.retry_for),
        "relay_every": args.relay_every,
    }
    if args.retention is not None:
        options["policy"] = RetryPolicy(retention=check_duration(args.retention, "--retention"))

    def progress(stats: WorkerStats) -> None:
        elapsed = max(time.monotonic() - stats.started, 1e-9)
        print(
            f"{stats.finished} finished ({stats.finished / elapsed:.1f}/s), {stats.aborted} aborted, "
            f"{stats.retried} retried, {stats.dead_lettered} dead-lettered",
            file=sys.stderr,
            flush=True,
        )

    timed = [schedule for spec in args.schedules or () for schedule in load_schedules(spec)]
    every = check_duration(args.schedule_every, "--schedule-every")
    if args.asyncio:
        stats = asyncio.run(
            _async_worker(args, workflows, options, progress, (check_schedules(timed), every))
        )
    else:
        queue = open_queue(args.queue)
        scheduler = Scheduler(timed, store=store, queue=queue, every=every) if timed else None
        try:
            if scheduler is not None:
                scheduler.start()
            worker = Worker(workflows, store=store, queue=queue, **options)
            stats = worker.run(idle_timeout=args.idle_timeout, on_progress=progress)
        finally:
            if scheduler is not None:
                scheduler.stop()
            queue.close()
    progress(stats)
    return 0


async def _async_worker(
    args: argparse.Namespace,
    workflows: list[Workflow[Any, Any]],
    options: dict[str, Any],
    progress: Callable[[WorkerStats], None],
    timed: tuple[tuple[Schedule, ...], float],
) -> WorkerStats:
    """``idemflow worker --asyncio``: the store and queue on their asynchronous clients, and the
    scheduler's passes (``--schedules``) as a task beside the worker."""

    store = open_async_store(args.store)
    queue = open_async_queue(args.queue)
    schedules, every = timed
    scheduler = AsyncScheduler(schedules, store=store, queue=queue, every=every) if schedules else None
    passes = None if scheduler is None else asyncio.create_task(scheduler.run())
    try:
        worker = AsyncWorker(workflows, store=store, queue=queue, **options)
        return await worker.run(idle_timeout=args.idle_timeout, on_progress=progress)
    finally:
        if scheduler is not None and passes is not None:
            scheduler.stop()
            await passes
        await queue.close()
        await store.close()
