"""Delayed and prioritised requests in real time, on SQLite (``SqliteStore`` + ``SqliteQueue``).

1. **Delay lateness** — *first step's clock − not_before* for ``--requests`` requests submitted
   by 4 client threads with ``delay`` uniform in ``--delay``, finished by ``idemflow worker``
   processes (the CLI users run) on a queue opened with ``?lanes=true`` and random priorities.
   Never negative (checked: the run stops with an error if a request started early).
2. **Lanes** — worker throughput (requests/s, one thread) draining ``--drain`` requests from a
   plain queue and from the low lane of a laned one (the worst case: the high and normal lanes
   are asked first at every receive).

Run: ``python -m benchmarks.delays [--requests 200] [--delay 0.5,3] [--drain 500]``; prints JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

from idemflow import atomic, checkpoint, now, workflow
from idemflow.client import Priority, status, submit
from idemflow.running.runner import run_status
from idemflow.stores import SqliteStore
from idemflow.worker import Worker, open_queue

ROOT = Path(__file__).resolve().parent.parent
TABLE = "delayed"


@workflow("bench-delayed")
def delayed(n: int) -> Generator[Any, Any, float]:
    started: float = yield now()
    yield atomic(TABLE, f"p{n}", lambda tx: tx.put("started", started))
    yield checkpoint()
    return started


WORKFLOWS = [delayed]


def lateness(folder: Path, requests: int, low: float, high: float, workers: int) -> dict[str, Any]:
    store_url = f"sqlite:{folder / 'store.sqlite3'}"
    queue_url = f"sqlite:{folder / 'queue.sqlite3'}?name=jobs&lanes=true"
    store = SqliteStore(folder / "store.sqlite3")
    store.create_tables(TABLE)
    worker_options = ["--store", store_url, "--queue", queue_url, "--concurrency", "4"]
    fleet = [
        subprocess.Popen(
            [sys.executable, "-m", "idemflow", "worker", "benchmarks.delays:WORKFLOWS", *worker_options],
            cwd=ROOT,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(workers)
    ]
    try:

        def client(k: int) -> None:
            queue = open_queue(queue_url)
            for n in range(k, requests, 4):
                priority: Priority = random.choice(["high", "normal", "low"])
                delay = random.uniform(low, high)
                submit(
                    delayed(n), request_id=f"d{n}", store=store, queue=queue, delay=delay, priority=priority
                )
            queue.close()

        threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        due = {}
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for n in range(requests):
            record = run_status(store, "bench-delayed", f"d{n}")
            assert record is not None and record.not_before is not None
            due[n] = record.not_before
        deadline = time.monotonic() + high + 120
        while not all(status(store, "bench-delayed", f"d{n}").status.final for n in range(requests)):
            if time.monotonic() > deadline:
                raise SystemExit("requests did not finish")
            time.sleep(0.2)
    finally:
        for proc in fleet:
            proc.terminate()
            proc.wait()
    late = sorted(float(status(store, "bench-delayed", f"d{n}").result) - due[n] for n in range(requests))  # type: ignore[arg-type]
    if late[0] < 0:
        raise SystemExit(f"a request started {-late[0]:.3f} s early")
    store.close()
    return {
        "requests": requests,
        "min_s": round(late[0], 4),
        "median_s": round(statistics.median(late), 4),
        "p99_s": round(late[int(0.99 * (len(late) - 1))], 4),
        "max_s": round(late[-1], 4),
    }


def drain(folder: Path, count: int) -> dict[str, float]:
    rates: dict[str, float] = {}
    plan: list[tuple[str, str, Priority]] = [
        ("plain", f"sqlite:{folder / 'plain.sqlite3'}", "normal"),
        ("laned_low", f"sqlite:{folder / 'laned.sqlite3'}?lanes=true", "low"),
    ]
    for label, url, priority in plan:
        store = SqliteStore(folder / f"{label}-store.sqlite3")
        store.create_tables(TABLE)
        queue = open_queue(url)
        for n in range(count):
            submit(delayed(n), request_id=f"w{n}", store=store, queue=queue, priority=priority)
        worker = Worker(WORKFLOWS, store=store, queue=queue, relay_every=None, wait=0.05)
        started = time.perf_counter()
        stats = worker.run(idle_timeout=0.3)
        rates[label] = round(stats.completed / (time.perf_counter() - started - 0.3), 1)
        queue.close()
        store.close()
    return rates


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--delay", default="0.5,3", help="LOW,HIGH seconds")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--drain", type=int, default=500)
    args = parser.parse_args(argv)
    low, high = (float(part) for part in args.delay.split(","))
    with tempfile.TemporaryDirectory() as folder:
        report = {
            "lateness": lateness(Path(folder), args.requests, low, high, args.workers),
            "drain_requests_per_s": drain(Path(folder), args.drain),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
