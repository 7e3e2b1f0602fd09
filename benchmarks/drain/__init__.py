"""Worker drain throughput on one database serving store and queue: ``python -m benchmarks.drain
[--requests N] [--processes 1 2 4] [--store URL --queue URL]`` (writes
benchmarks/results/drain.md and drain.json).

N requests are submitted (each answered at its checkpoint), then P ``idemflow worker`` processes (4
threads each) are started on the same store and queue, and the time from their start until every
request is completed is measured; requests per second for each P, the rounds alternating between
process counts. Without URLs it starts a PostgreSQL server of its own
(:mod:`idemflow.testing._postgres`, its WAL flushed as in production) and uses it for both: a
``PostgresStore`` and a ``PostgresQueue`` on one database. Drain time includes the workers'
start-up (about a second, the same for every P), so the figure is what an operator sees when a
backlog meets a pool.

Every batch is checked after it drained: each request ``completed``, and its effects applied
exactly once (each order's row counted 1, the batch's stock rows down by N, its ledger rows up by
the sum of the request numbers); a figure of a batch that lost or doubled a request is no figure,
so the benchmark raises instead. A worker that exits before the batch drained fails the round
with its error output, rather than leaving the submitter waiting for requests nobody runs.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from benchmarks.common.report import write_record
from benchmarks.common.stats import RESULTS, environment, write
from benchmarks.drain.flows import SHARDS, TABLES, drained
from idemflow import open_store
from idemflow.client import Pending, RunStatus, get, submit
from idemflow.stores import Store
from idemflow.testing._postgres import postgres_server
from idemflow.worker import open_queue

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 600.0
"""Seconds a batch may take to drain before the round fails."""


@contextlib.contextmanager
def _urls(store: str | None, queue: str | None) -> Iterator[tuple[str, str]]:
    """The store and queue URLs given; a PostgreSQL of its own for what is not (a queue without a
    store is refused by :func:`main`)."""
    if store and queue:
        yield store, queue
        return
    with postgres_server(fsync=True) as server:
        yield store or server.url(), server.url()


def _wait(pending: list[Pending], workers: list[subprocess.Popen[bytes]], logs: Sequence[IO[bytes]]) -> None:
    """Until every request of ``pending`` finished; raises if one did not end ``done``, if a worker
    exited first (with its error output), or after :data:`DEADLINE`."""
    deadline = time.monotonic() + DEADLINE
    for handle in pending:
        while True:
            try:
                answer = handle.result(timeout=1.0)
                break
            except TimeoutError:
                for worker, log in zip(workers, logs, strict=True):
                    if worker.poll() is not None:
                        log.seek(0)
                        tail = log.read().decode(errors="replace")[-2000:]
                        raise RuntimeError(f"a worker exited with {worker.returncode}:\n{tail}") from None
                if time.monotonic() > deadline:
                    raise
        if answer != "done":
            raise RuntimeError(f"{handle.request_id} ended as {handle.status().value}")


def check_once(store: Store, batch: str, requests: int) -> None:
    """Raise unless every request of ``batch`` completed and applied its effects exactly once."""
    orders = [get(store, "orders", f"{batch}-{i}", "n", 0) for i in range(requests)]
    wrong = {f"{batch}-{i}": n for i, n in enumerate(orders) if n != 1}
    stock = sum(get(store, "stock", f"{batch}-s{s}", "n", 0) for s in range(SHARDS))
    ledger = sum(get(store, "ledger", f"{batch}-l{s}", "n", 0) for s in range(SHARDS))
    if wrong or stock != -requests or ledger != sum(range(requests)):
        raise RuntimeError(
            f"{batch}: effects not applied exactly once: orders counted other than once {wrong}, "
            f"stock {stock} (expected {-requests}), ledger {ledger} (expected {sum(range(requests))})"
        )


def drain_seconds(store_url: str, queue_url: str, requests: int, processes: int) -> float:
    """Seconds ``processes`` workers took to complete ``requests`` submitted before they started."""
    store = open_store(store_url)
    store.create_tables(*TABLES)
    batch = f"drain{uuid.uuid4().hex[:8]}"
    named = f"{queue_url}&name={batch}" if "?" in queue_url else f"{queue_url}?name={batch}"
    queue = open_queue(named)
    pending = [
        submit(
            drained({"id": f"{batch}-{i}", "n": i, "batch": batch}),
            request_id=f"{batch}-{i}",
            store=store,
            queue=queue,
        )
        for i in range(requests)
    ]
    command = [sys.executable, "-m", "idemflow", "worker", "benchmarks.drain.flows:WORKFLOWS"]
    command += ["--store", store_url, "--queue", named, "--concurrency", "4", "--relay-every", "60"]
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(tempfile.TemporaryFile()) for _ in range(processes)]
        began = time.perf_counter()
        workers = [subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=log) for log in logs]
        try:
            _wait(pending, workers, logs)
            took = time.perf_counter() - began
        finally:
            for worker in workers:
                worker.terminate()
            for worker in workers:
                worker.wait(timeout=60)
    if any(handle.status() is not RunStatus.COMPLETED for handle in pending):
        raise RuntimeError("a request did not complete")
    check_once(store, batch, requests)
    queue.close()
    store.close()
    return took


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--processes", type=int, nargs="*", default=[1, 2, 4])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--store", default=None, help="store URL (default: a PostgreSQL of its own)")
    parser.add_argument("--queue", default=None, help="queue URL (default: the same PostgreSQL)")
    parser.add_argument("--out", type=Path, default=None, help="folder for the page")
    args = parser.parse_args(argv)
    if args.queue and not args.store:
        parser.error("give --store with --queue (or neither: a PostgreSQL of its own serves both)")
    started = time.time()
    seconds: dict[int, list[float]] = {count: [] for count in args.processes}
    with _urls(args.store, args.queue) as (store_url, queue_url):
        for number in range(args.rounds):
            order = args.processes if number % 2 == 0 else list(reversed(args.processes))
            for count in order:
                seconds[count].append(drain_seconds(store_url, queue_url, args.requests, count))
                print(f"round {number + 1}: {count} process(es) {seconds[count][-1]:.2f} s", flush=True)
    where = "the URLs given" if args.store and args.queue else "a PostgreSQL server of its own"
    if args.store and not args.queue:
        where = "the store given and a PostgreSQL server of its own for the queue"
    text = _page(args, seconds, where)
    print(text)
    print(f"wrote {write('drain.md', text, args.out)}")
    params: dict[str, Any] = {
        "requests": args.requests,
        "processes": args.processes,
        "rounds": args.rounds,
        "threads per process": 4,
        "store and queue": where,
    }
    headlines = {
        f"drain.requests_per_s.{count}_processes": {
            "value": args.requests / statistics.median(seconds[count]),
            "note": "median drain time of the rounds, workers' start-up included",
        }
        for count in args.processes
    }
    record = write_record(
        "drain",
        "Worker drain throughput: store and queue on one database",
        params,
        headlines,
        args.out or RESULTS,
        started,
        data={"drain_seconds": {str(count): times for count, times in seconds.items()}, "exactly_once": True},
    )
    print(f"wrote {record}")


def _page(args: argparse.Namespace, seconds: dict[int, list[float]], where: str) -> str:
    base = statistics.median(seconds[args.processes[0]])
    lines = [
        "# Worker drain throughput: store and queue on one database",
        "",
        environment(),
        "",
        f"{args.requests} requests submitted (answered at their checkpoint; then 2 atomic steps each), then "
        f"P `idemflow worker` processes of 4 threads on {where}; median of {args.rounds} rounds, "
        "the process counts alternating; start-up of the workers included. Every batch checked: "
        "each request completed, its effects applied exactly once.",
        "",
        "| processes | drain, s (median) | requests/s | vs 1 process |",
        "|---|---|---|---|",
    ]
    for count in args.processes:
        median = statistics.median(seconds[count])
        lines.append(f"| {count} | {median:.2f} | {args.requests / median:.0f} | {base / median:.2f}x |")
    return "\n".join(lines) + "\n"
