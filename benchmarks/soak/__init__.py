"""A soak on one SQLite file: does the library keep its file, its expired rows and its latency
level over minutes of steady load?

Why: a benchmark of seconds never meets the sweep (it runs once a minute) nor a file that has
grown. Here ``--run-rate`` ``run``/s and ``--submit-rate`` ``submit``/s of a 2-step workflow
(:mod:`benchmarks.soak.load`; fresh request ids, a fresh data row each) go to one SQLite store
for ``--minutes``, a worker thread finishing the submits, every row written with a short
``--retention``; every ``--sample-every`` seconds (:mod:`benchmarks.soak.sample`) the expired
rows still in the file by kind, the oldest one's lateness, the file size (database + WAL), the
process's RSS and the p50 latency of the interval are recorded. Expected of a store that keeps
pace: expired memos and outbox rows level off (run records stay a while longer by design: a
finished run record outlives its memos, :mod:`idemflow.stores.expiry`).

``--library PATH`` imports the idemflow under PATH instead of this tree's and ``--tag TAG`` names
the pages ``soak-TAG.*``, so a change can be soaked before and after (as ``cost``).

Run: ``python -m benchmarks soak [--minutes 10] [--run-rate 30] [--submit-rate 5]
[--retention 120] [--library PATH --tag before]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.stats import RESULTS
from benchmarks.cost import describe_tree, use_library


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Any:
    parser = argparse.ArgumentParser(prog="python -m benchmarks soak", description=__doc__)
    add = parser.add_argument
    add("--minutes", type=float, default=0.2 if quick else 10.0)
    add("--run-rate", type=float, default=10.0 if quick else 30.0, help="run() calls per second")
    add("--submit-rate", type=float, default=2.0 if quick else 5.0, help="submit() calls per second")
    add("--retention", type=float, default=2.0 if quick else 120.0, help="RetryPolicy.retention, seconds")
    add("--sample-every", type=float, default=3.0 if quick else 30.0, help="seconds between samples")
    add(
        "--expire-every",
        type=float,
        default=1.0 if quick else None,
        help="the store's expire_every (default: its own)",
    )
    add("--library", default=None, help="put PATH first on sys.path before importing idemflow")
    add("--tag", default=None, help="write soak-TAG.md/.json/.png")
    add("--out", type=Path, default=out, help="results folder")
    args = parser.parse_args(argv)
    imported = use_library(args.library)
    print(f"  soak: idemflow from {imported}", flush=True)

    from benchmarks.common.report import Report
    from benchmarks.soak import report as _soak_report

    name = "soak" if args.tag is None else f"soak-{args.tag}"
    params: dict[str, Any] = {
        "minutes": args.minutes,
        "run/s": args.run_rate,
        "submit/s": args.submit_rate,
        "retention (s)": args.retention,
        "sample every (s)": args.sample_every,
        "expire_every (s)": args.expire_every if args.expire_every is not None else "store default",
        "idemflow imported from": describe_tree(imported),
    }
    report = Report(
        name, "Soak: expired rows, file size, memory and latency over time (SQLite)", params, args.out
    )
    with tempfile.TemporaryDirectory(prefix="idemflow-soak-") as folder:
        samples = _soak(args, folder)
    path = _soak_report.write(report, samples, args.retention)
    print(f"  soak: {path}", flush=True)
    return report


def _soak(args: argparse.Namespace, folder: str) -> list[Any]:
    """The load for ``--minutes`` and the samples taken meanwhile."""
    from benchmarks.soak.load import Latencies, paced, soak_run, soak_submit
    from benchmarks.soak.sample import Sample, expired_rows, file_mb, p50_ms, rss_mb
    from idemflow import RetryPolicy, run
    from idemflow.client import submit
    from idemflow.keys import RUNS_TABLE
    from idemflow.stores import SqliteStore
    from idemflow.worker import SqliteQueue, Worker

    path = str(Path(folder) / "soak.sqlite3")
    options = {} if args.expire_every is None else {"expire_every": args.expire_every}
    store = SqliteStore(path, **options)
    queue = SqliteQueue(str(Path(folder) / "queue.sqlite3"), name="soak")
    policy = RetryPolicy(retention=args.retention)
    worker = Worker([soak_submit], store=store, queue=queue, policy=policy, relay_every=5.0)
    runs, submits = Latencies(), Latencies()
    stop = threading.Event()
    began = time.monotonic()
    until = began + args.minutes * 60

    def run_one(n: int) -> None:
        rid = f"r{n}"
        run(soak_run({"id": rid, "n": n}), request_id=rid, store=store, policy=policy)

    def submit_one(n: int) -> None:
        rid = f"s{n}"
        submit(soak_submit({"id": rid, "n": n}), request_id=rid, store=store, queue=queue, policy=policy)

    threads = [
        threading.Thread(target=worker.run, name="soak-worker", daemon=True),
        threading.Thread(target=paced, args=(args.run_rate, until, stop, run_one, runs), daemon=True),
        threading.Thread(
            target=paced, args=(args.submit_rate, until, stop, submit_one, submits), daemon=True
        ),
    ]
    for thread in threads:
        thread.start()
    samples: list[Sample] = []
    cpu, done = _cpu(), 0
    try:
        while True:
            now_m = time.monotonic()
            next_at = began + (len(samples) + 1) * args.sample_every
            if next_at > until + 1e-6:
                break
            time.sleep(max(0.0, next_at - now_m))
            spent, finished = _cpu() - cpu, runs.requests + submits.requests - done
            cpu, done = cpu + spent, done + finished
            counts, oldest, rows = expired_rows(path, time.time(), RUNS_TABLE)
            backlog = getattr(store, "expiry_backlog", None)
            samples.append(
                Sample(
                    t=round(time.monotonic() - began, 1),
                    expired=counts,
                    oldest={kind: round(value, 1) for kind, value in oldest.items()},
                    rows=rows,
                    file_mb=round(file_mb(path), 3),
                    rss_mb=round(rss_mb(), 1),
                    run_p50_ms=round(p50_ms(runs.take()), 3),
                    submit_p50_ms=round(p50_ms(submits.take()), 3),
                    requests=runs.requests + submits.requests,
                    cpu_ms_per_request=round(spent * 1e3 / max(finished, 1), 3),
                    store_backlog=None if backlog is None else _plain(backlog),
                )
            )
            last = samples[-1]
            print(
                f"  soak: {last.t:.0f} s: expired {last.expired}, oldest memo {last.oldest['memos']:.0f} s, "
                f"{last.rows} rows, {last.file_mb:.1f} MB, rss {last.rss_mb:.0f} MB, "
                f"run p50 {last.run_p50_ms:.2f} ms",
                flush=True,
            )
    finally:
        stop.set()
        for thread in threads[1:]:
            thread.join()
        worker.stop()
        threads[0].join()
        queue.close()
        store.close()
    print(
        f"  soak: {runs.requests} runs ({runs.errors} errors, {runs.late} late), "
        f"{submits.requests} submits ({submits.errors} errors, {submits.late} late)",
        flush=True,
    )
    return samples


def _cpu() -> float:
    """CPU seconds of this process (every thread: the load, the worker, the sweeps; the sampler's
    own count of the file is in it too, the same for every version)."""
    times = os.times()
    return times.user + times.system


def _plain(backlog: Any) -> dict[str, Any]:
    """The store's backlog as JSON (a dataclass of numbers in the library's version)."""
    import dataclasses

    if dataclasses.is_dataclass(backlog) and not isinstance(backlog, type):
        return dataclasses.asdict(backlog)
    return {"value": str(backlog)}
