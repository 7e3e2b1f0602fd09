"""What one request costs, per store: round trips, bytes written, latency at one user.

For each backend and workload, one client sends requests one at a time to
three variants, interleaved round by round:

- **baseline**: hand-written SDK code (:mod:`benchmarks.common.workloads`);
- **sync**: ``run`` — every step on the client's path;
- **async**: ``submit`` — the client's path ends at the checkpoint; the
  worker that finishes the request runs *between* rounds (not timed), so
  this is the client latency without workers competing for the machine.

Calls are backend calls counted by the store (read through
:func:`benchmarks.common.counting.backend_calls`, which includes e.g. the Azure
store's reads for increments) and by the baselines;
off-path completion writes and the worker's calls are reported apart.
Bytes are logical (partition + row key + encoded value per written row; see
:mod:`benchmarks.common.counting`). A duplicate of a finished request is measured
at the end (target: one read).

Run: ``python -m benchmarks calls [--stores sqlite,moto,azurite] [--quick]``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common.backends import DEFAULT_KINDS, LABELS, Backend, open_backend
from benchmarks.common.counting import CountingStore, backend_calls
from benchmarks.common.queue_drain import Draining, count_sends
from benchmarks.common.report import Report, fmt_ratio
from benchmarks.common.stats import RESULTS, paired_ratio
from benchmarks.common.workload_base import Workload
from benchmarks.common.workloads import WORKLOADS
from idemflow import WorkflowAborted, run
from idemflow.client import submit


@dataclass
class Counts:
    calls: float
    reads: float
    commits: float
    rows: float
    nbytes: float
    off_path_calls: float = 0.0
    off_path_bytes: float = 0.0


def _timed(call: Callable[[int], Any], i: int) -> float:
    t0 = time.perf_counter()
    with contextlib.suppress(WorkflowAborted):  # a refused bid is an answer too
        call(i)
    return time.perf_counter() - t0


def measure(
    backend: Backend, workload: Workload, rounds: int, per_round: int, warmup: int = 0
) -> dict[str, Any]:
    base = workload.baseline(backend, backend.tag(f"c{workload.name[:2]}b"))
    sync_inner = backend.store(backend.tag(f"c{workload.name[:2]}s"), *workload.tables)
    async_inner = backend.store(backend.tag(f"c{workload.name[:2]}a"), *workload.tables)
    for store in (sync_inner, async_inner):
        workload.prepare(store)
        store.flush()
    sync, asyn = CountingStore(sync_inner), CountingStore(async_inner)
    queue = backend.queue(backend.tag(f"c{workload.name[:2]}q"))
    sent = count_sends(queue)
    request = workload.request
    samples: dict[str, list[float]] = {"baseline": [], "sync": [], "async": []}
    latencies: dict[str, list[float]] = {"baseline": [], "sync": [], "async": []}
    trips = {"sync": 0, "async": 0, "worker": 0}
    worker_tally = {"reads": 0, "commits": 0, "bytes": 0, "rows": 0, "cache": 0}
    counter = iter(range(1, 10**9))
    finished: list[int] = []

    def do_sync(i: int) -> None:
        run(request(i), request_id=f"q{i}", store=sync)

    def do_async(i: int) -> None:
        submit(request(i), request_id=f"q{i}", store=asyn, queue=queue)

    variants: dict[str, Callable[[int], Any]] = {"baseline": base, "sync": do_sync, "async": do_async}
    if backend.kind == "sqlite":  # untimed: past each new file's first WAL checkpoint
        for name, work in variants.items():
            for _ in range(warmup):
                _timed(work, next(counter))
            if name == "async":
                with Draining(workload.workflows, asyn, queue, 1) as workers:
                    workers.wait(sent.value)
                sent.value = 0
        async_inner.flush()
        sync_inner.flush()
    base.tally.reset()
    sync.tally.reset()
    asyn.tally.reset()
    try:
        for r in range(rounds):
            order = list(variants)[r % 3 :] + list(variants)[: r % 3]
            for name in order:
                measured = {"sync": sync, "async": asyn}.get(name)
                before = measured.backend_calls if measured is not None else 0
                numbers = [next(counter) for _ in range(per_round)]
                if name == "sync":
                    finished.extend(numbers)
                times = [_timed(variants[name], i) for i in numbers]
                if measured is not None:
                    measured.flush()  # off-path writes of this round counted in this round
                    trips[name] += measured.backend_calls - before
                latencies[name].extend(times)
                samples[name].append(statistics.median(times))
                if name == "async":  # finish the requests, untimed, counting the worker apart
                    snapshot = (
                        asyn.tally.reads,
                        asyn.tally.commits,
                        asyn.tally.bytes_written,
                        asyn.tally.rows_written,
                    )
                    cache_before = asyn.tally.cache_writes
                    before = asyn.backend_calls
                    with Draining(workload.workflows, asyn, queue, 1) as workers:
                        workers.wait(sent.value)
                    async_inner.flush()
                    sent.value = 0
                    trips["worker"] += asyn.backend_calls - before
                    worker_tally["reads"] += asyn.tally.reads - snapshot[0]
                    worker_tally["commits"] += asyn.tally.commits - snapshot[1]
                    worker_tally["bytes"] += asyn.tally.bytes_written - snapshot[2]
                    worker_tally["rows"] += asyn.tally.rows_written - snapshot[3]
                    worker_tally["cache"] += asyn.tally.cache_writes - cache_before
                    # Take the worker's counts back out of the client's.
                    asyn.tally.reads, asyn.tally.commits = snapshot[0], snapshot[1]
                    asyn.tally.bytes_written, asyn.tally.rows_written = snapshot[2], snapshot[3]
                    asyn.tally.cache_writes = cache_before
        sync_inner.flush()
        n = rounds * per_round
        counts = {
            "baseline": Counts(
                (base.tally.reads + base.tally.commits) / n,
                base.tally.reads / n,
                base.tally.commits / n,
                base.tally.rows_written / n,
                base.tally.bytes_written / n,
            ),
            "sync": Counts(
                (trips["sync"] - sync.tally.cache_writes) / n,
                sync.tally.reads / n,
                sync.tally.commits / n,
                sync.tally.rows_written / n,
                sync.tally.bytes_written / n,
                sync.tally.cache_writes / n,
                sync.tally.cache_bytes / n,
            ),
            "async": Counts(
                trips["async"] / n + 1,  # + the queue send
                asyn.tally.reads / n,
                asyn.tally.commits / n,
                asyn.tally.rows_written / n,
                asyn.tally.bytes_written / n,
                (trips["worker"]) / n,
                (worker_tally["bytes"] + asyn.tally.cache_bytes) / n,
            ),
        }
        duplicate = _duplicate_cost(sync_inner, workload, finished[:5])
    finally:
        base.close()
    return {"samples": samples, "latencies": latencies, "counts": counts, "duplicate": duplicate}


def _duplicate_cost(store: Any, workload: Workload, requests: list[int]) -> float:
    """Backend calls of a duplicate of a finished request, averaged."""
    store.flush()
    before = backend_calls(store)
    for i in requests:
        with contextlib.suppress(WorkflowAborted):
            run(workload.request(i), request_id=f"q{i}", store=store)
    return float(backend_calls(store) - before) / len(requests)


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Report:
    parser = argparse.ArgumentParser(prog="python -m benchmarks calls", description=__doc__)
    parser.add_argument("--stores", default=",".join(DEFAULT_KINDS))
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=2 if quick else 6)
    parser.add_argument("--per-round", type=int, default=3 if quick else 12)
    parser.add_argument("--warmup", type=int, default=10 if quick else 250, help="untimed SQLite requests")
    args = parser.parse_args(argv)
    stores = [s for s in args.stores.split(",") if s]
    workloads = [w for w in args.workloads.split(",") if w]
    report = Report(
        "calls",
        "Round trips, bytes and latency per request at one user",
        {
            "stores": stores,
            "workloads": workloads,
            "rounds": args.rounds,
            "requests per variant per round": args.per_round,
        },
        out,
    )
    report.add(
        "One client, requests one at a time; variants interleaved by round. *calls* are backend calls on",
        "the client's path (async: + 1 queue send); *off path* are the completion-record write (sync) or",
        "everything the worker does to finish the request (async: store calls; plus queue receive and",
        "delete, not counted). Latency ratios are medians of per-round ratios (IQR across rounds).",
        "",
    )
    bars: dict[str, dict[str, float]] = {}
    for kind in stores:
        report.add(f"## {LABELS[kind]}", "")
        with open_backend(kind) as backend:
            for name in workloads:
                result = measure(backend, WORKLOADS[name], args.rounds, args.per_round, args.warmup)
                counts: dict[str, Counts] = result["counts"]
                samples: dict[str, list[float]] = result["samples"]
                lat: dict[str, list[float]] = result["latencies"]
                sync_base = paired_ratio("x", samples["sync"], samples["baseline"])
                async_sync = paired_ratio("x", samples["async"], samples["sync"])
                rows = []
                for variant, c in counts.items():
                    rows.append(
                        [
                            variant,
                            f"{c.calls:.2f}",
                            f"{c.reads:.2f}",
                            f"{c.commits:.2f}",
                            f"{c.rows:.2f}",
                            f"{c.nbytes:.0f}",
                            f"{c.off_path_calls:.2f}" if variant != "baseline" else "–",
                            f"{c.off_path_bytes:.0f}" if variant != "baseline" else "–",
                            f"{statistics.median(lat[variant]) * 1e3:.2f}",
                            {
                                "baseline": "1",
                                "sync": fmt_ratio(sync_base),
                                "async": fmt_ratio(paired_ratio("x", samples["async"], samples["baseline"])),
                            }[variant],
                        ]
                    )
                report.add(f"### {name}", "")
                report.table(
                    [
                        "variant",
                        "calls",
                        "reads",
                        "writes",
                        "rows written",
                        "bytes written",
                        "off-path calls",
                        "off-path bytes",
                        "median ms",
                        "latency / baseline",
                    ],
                    rows,
                )
                report.add(
                    f"Client latency async / sync: {fmt_ratio(async_sync)}. "
                    f"A duplicate of a finished request: {result['duplicate']:.2f} backend call(s).",
                    "",
                )
                key = f"calls.{kind}.{name}"
                report.headline(f"{key}.sync_over_baseline_latency", sync_base, note="1 user, median latency")
                report.headline(f"{key}.async_over_sync_latency", async_sync, note="client latency, 1 user")
                report.headline(
                    f"{key}.calls", {v: round(c.calls, 2) for v, c in counts.items()}, note="on path"
                )
                report.headline(
                    f"{key}.bytes", {v: round(c.nbytes) for v, c in counts.items()}, note="on path, logical"
                )
                report.headline(f"{key}.duplicate_calls", result["duplicate"])
                bars[f"{kind}\n{name}"] = {v: c.calls for v, c in counts.items()}
    from benchmarks.common.plot import bars_figure

    plot = bars_figure(out / "calls.png", "Backend calls on the client's path per request", "calls", bars)
    report.add(f"![calls]({plot.name})", "")
    report.write()
    return report
