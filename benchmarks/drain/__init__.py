"""Worker drain throughput on one database serving store and queue: ``python -m benchmarks.drain
[--requests N] [--processes 1 2 4] [--store URL --queue URL]`` (writes
benchmarks/results/drain.md).

N requests are submitted (each answered at its checkpoint), then P ``idemflow worker`` processes (4
threads each) are started on the same store and queue, and the time from their start until every
request is completed is measured; requests per second for each P, the rounds alternating between
process counts. Without URLs it starts a PostgreSQL server of its own
(:mod:`idemflow.testing._postgres`, its WAL flushed as in production) and uses it for both. Drain
time includes the workers' start-up (about a second, the same for every P), so the figure is what an
operator sees when a backlog meets a pool.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from benchmarks.common.stats import environment, write
from benchmarks.drain.flows import TABLES, drained
from idemflow import open_store
from idemflow.client import RunStatus, submit
from idemflow.testing._postgres import postgres_server
from idemflow.worker import open_queue

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def _urls(store: str | None, queue: str | None) -> Iterator[tuple[str, str]]:
    """The store and queue URLs given; a PostgreSQL of its own for what is not (a queue without a
    store is refused by :func:`main`)."""
    if store and queue:
        yield store, queue
        return
    with postgres_server(fsync=True) as server:
        yield store or server.url(), server.url()


def drain_seconds(store_url: str, queue_url: str, requests: int, processes: int) -> float:
    """Seconds ``processes`` workers took to complete ``requests`` submitted before they started."""
    store = open_store(store_url)
    store.create_tables(*TABLES)
    name = f"drain{uuid.uuid4().hex[:8]}"
    named = f"{queue_url}&name={name}" if "?" in queue_url else f"{queue_url}?name={name}"
    queue = open_queue(named)
    pending = [
        submit(drained({"id": f"{name}-{i}", "n": i}), request_id=f"{name}-{i}", store=store, queue=queue)
        for i in range(requests)
    ]
    command = [sys.executable, "-m", "idemflow", "worker", "benchmarks.drain.flows:WORKFLOWS"]
    command += ["--store", store_url, "--queue", named, "--concurrency", "4", "--relay-every", "60"]
    began = time.perf_counter()
    workers = [subprocess.Popen(command, cwd=ROOT, stderr=subprocess.DEVNULL) for _ in range(processes)]
    try:
        for handle in pending:
            if handle.result(timeout=600) != "done":
                raise RuntimeError(f"request ended as {handle.status().value}")
        took = time.perf_counter() - began
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=60)
    if any(handle.status() is not RunStatus.COMPLETED for handle in pending):
        raise RuntimeError("a request did not complete")
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
    seconds: dict[int, list[float]] = {count: [] for count in args.processes}
    with _urls(args.store, args.queue) as (store_url, queue_url):
        for number in range(args.rounds):
            order = args.processes if number % 2 == 0 else list(reversed(args.processes))
            for count in order:
                seconds[count].append(drain_seconds(store_url, queue_url, args.requests, count))
                print(f"round {number + 1}: {count} process(es) {seconds[count][-1]:.2f} s", flush=True)
        where = "a PostgreSQL server of its own" if not (args.store and args.queue) else "the URLs given"
    base = statistics.median(seconds[args.processes[0]])
    lines = [
        "# Worker drain throughput: store and queue on one database",
        "",
        environment(),
        "",
        f"{args.requests} requests submitted (answered at their checkpoint; then 2 atomic steps each), then "
        f"P `idemflow worker` processes of 4 threads on {where}; median of {args.rounds} rounds, "
        "the process counts alternating; start-up of the workers included.",
        "",
        "| processes | drain, s (median) | requests/s | vs 1 process |",
        "|---|---|---|---|",
    ]
    for count in args.processes:
        median = statistics.median(seconds[count])
        lines.append(f"| {count} | {median:.2f} | {args.requests / median:.0f} | {base / median:.2f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    print(f"wrote {write('drain.md', text, args.out)}")
