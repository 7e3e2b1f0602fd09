"""Throughput and latency against concurrent users: the paper's figures.

For each backend (SQLite, DynamoDB on moto, Azure Tables on Azurite), each
workload (survey, auction) and each number of concurrent users, three
variants run interleaved, round after round, in this process:

- **baseline**: the hand-written SDK code of :mod:`benchmarks._workloads`,
  same business logic and data, no idempotence;
- **sync**: the idemflow workflow under :func:`idemflow.run`;
- **async**: the same workflow under :func:`~idemflow.async_worklist.submit`
  (the client is answered at the checkpoint) with a :class:`Worker` finishing
  it from the backend's queue (SqliteQueue, SQS on its own moto server,
  Azure Queue) while the clients keep sending.

Users are threads, each sending its requests back to back. Latency is what
the client waits for one request; throughput is requests completed per
second of a round, *completed* meaning every effect done (for async: the
workers drained the queue; for sync: off-path completion writes flushed).
Ratios are taken per round between variants of the same round, then
summarized (median, IQR).

Run: ``python -m benchmarks users [--stores sqlite,moto,azurite] [--quick]``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._backends import DEFAULT_KINDS, LABELS, Backend, open_backend
from benchmarks._report import Report, fmt_ratio
from benchmarks._stats import RESULTS, Summary, paired_ratio, percentile, summarize
from benchmarks._workloads import WORKLOADS, Workload
from idemflow import Store, Workflow, WorkflowAborted, run
from idemflow.async_worklist import Queue, Worker, submit

VARIANTS = ("baseline", "sync", "async")
USERS = (1, 2, 4, 8, 16, 32)
DRAIN_TIMEOUT = 300.0


@dataclass
class RoundResult:
    latencies: list[float]
    client_seconds: float
    """From the start signal until every client had its answers."""
    done_seconds: float
    """Until every effect was done (workers drained, off-path writes flushed)."""
    requests: int
    failed: list[str] = field(default_factory=list)
    """Error types of requests that failed (ConflictError after the retry budget, dead letters, ...)."""

    @property
    def throughput(self) -> float:
        return self.requests / self.done_seconds

    @property
    def client_throughput(self) -> float:
        return self.requests / self.client_seconds


@dataclass
class Cell:
    """One variant at one number of users, over all rounds."""

    rounds: list[RoundResult] = field(default_factory=list)

    @property
    def latencies(self) -> list[float]:
        return [x for r in self.rounds for x in r.latencies]

    def median_latency(self) -> float:
        return statistics.median(self.latencies)

    def p95(self) -> float:
        return percentile(self.latencies, 95)

    def throughput(self) -> Summary:
        return summarize("throughput", [r.throughput for r in self.rounds])

    def client_throughput(self) -> Summary:
        return summarize("client throughput", [r.client_throughput for r in self.rounds])

    def round_medians(self) -> list[float]:
        return [statistics.median(r.latencies) for r in self.rounds]

    def round_p95s(self) -> list[float]:
        return [percentile(r.latencies, 95) for r in self.rounds]


class Counter:
    """Unique request numbers across threads."""

    def __init__(self) -> None:
        self._next = 0
        self._lock = threading.Lock()

    def take(self) -> int:
        with self._lock:
            self._next += 1
            return self._next


def drive(
    users: int, per_user: int, call: Callable[[int], None], counter: Counter
) -> tuple[list[float], float, list[str]]:
    """``users`` threads each making ``per_user`` calls back to back.

    Returns the latencies of the answered requests, the seconds until every
    client was done, and the requests that failed, by error type: a
    :class:`ConflictError` (the retry budget ran out under contention: the
    client sees an error) or any other error, counted rather than stopping
    the run, and shown in the report.
    """
    start = threading.Barrier(users + 1)
    latencies: list[list[float]] = [[] for _ in range(users)]
    errors: list[BaseException] = []
    failed: list[str] = []

    def user(mine: list[float]) -> None:
        start.wait()
        try:
            for _ in range(per_user):
                i = counter.take()
                t0 = time.perf_counter()
                try:
                    call(i)
                except Exception as exc:  # noqa: BLE001 - counted and reported per variant
                    failed.append(type(exc).__name__)
                    continue
                mine.append(time.perf_counter() - t0)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            errors.append(exc)

    threads = [threading.Thread(target=user, args=(mine,), daemon=True) for mine in latencies]
    for thread in threads:
        thread.start()
    start.wait()
    t0 = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return [x for mine in latencies for x in mine], elapsed, failed


def _accepting_refusals(work: Callable[[int], Any]) -> Callable[[int], None]:
    """A refused bid (too low) is an answered request, for every variant alike."""

    def call(i: int) -> None:
        with contextlib.suppress(WorkflowAborted):
            work(i)

    return call


class Sent:
    """Messages sent to a queue, counted by :func:`count_sends`."""

    def __init__(self) -> None:
        self.value = 0
        self.lock = threading.Lock()


def count_sends(queue: Queue) -> Sent:
    """Count ``queue.send`` calls (wrapping the bound method of this one instance)."""
    sent, send = Sent(), queue.send

    def counting(*args: Any, **kwargs: Any) -> Any:
        result = send(*args, **kwargs)
        with sent.lock:
            sent.value += 1
        return result

    setattr(queue, "send", counting)  # noqa: B010 - an instance attribute shadowing the method
    return sent


class Draining:
    """A :class:`Worker` running in a thread while the block runs; ``wait(n)`` blocks until
    ``n`` more messages were finished (or dead-lettered) and returns the dead letters."""

    def __init__(self, workflows: list[Workflow[Any, Any]], store: Store, queue: Queue, workers: int) -> None:
        # No relay: the auction's items were registered with ``run``, each starting its closing
        # timer through the outbox; relayed, those timers would add messages (and suspensions)
        # this benchmark of bids does not count. A bid's ``submit`` sends its own continuation.
        self.worker = Worker(workflows, store=store, queue=queue, concurrency=workers, relay_every=None)
        self.thread = threading.Thread(target=self.worker.run, name="bench-worker", daemon=True)
        self._seen = 0

    def __enter__(self) -> Draining:
        self.thread.start()
        return self

    def wait(self, messages: int) -> int:
        stats = self.worker.stats
        target = self._seen + messages
        dead_before = stats.dead_lettered
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while stats.finished + stats.dead_lettered < target:
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers did not drain the queue within {DRAIN_TIMEOUT}s")
            time.sleep(0.002)
        self._seen = stats.finished + stats.dead_lettered
        return stats.dead_lettered - dead_before

    def __exit__(self, *exc: object) -> None:
        self.worker.stop()
        self.thread.join()


class Variants:
    """The three variants of one workload at one number of users, on fresh tables."""

    def __init__(self, backend: Backend, workload: Workload, users: int, workers: int) -> None:
        self.workload = workload
        self.workers = workers
        tables = workload.tables
        self.baseline = workload.baseline(backend, backend.tag(f"{workload.name[:2]}{users}b"))
        self.sync_store = backend.store(backend.tag(f"{workload.name[:2]}{users}s"), *tables)
        self.async_store = backend.store(backend.tag(f"{workload.name[:2]}{users}a"), *tables)
        self.queue = backend.queue(backend.tag(f"{workload.name[:2]}{users}q"))
        self.sent = count_sends(self.queue)
        for store in (self.sync_store, self.async_store):
            workload.prepare(store)
            store.flush()

    def warm_up(self, requests: int, counter: Counter) -> None:
        """Run every variant ``requests`` times, untimed, one user (SQLite: past the first
        WAL checkpoint of each new file, see :func:`benchmarks._stats.interleave_samples`)."""
        if requests:
            for name in VARIANTS:
                self.run_round(name, 1, requests, counter)

    def run_round(self, variant: str, users: int, per_user: int, counter: Counter) -> RoundResult:
        if variant == "baseline":
            latencies, client, failed = drive(users, per_user, _accepting_refusals(self.baseline), counter)
            return RoundResult(latencies, client, client, len(latencies), failed)
        if variant == "sync":
            return self._sync(users, per_user, counter)
        return self._async(users, per_user, counter)

    def _sync(self, users: int, per_user: int, counter: Counter) -> RoundResult:
        store, request = self.sync_store, self.workload.request

        def call(i: int) -> None:
            run(request(i), request_id=f"q{i}", store=store)

        t0 = time.perf_counter()
        latencies, client, failed = drive(users, per_user, _accepting_refusals(call), counter)
        store.flush()
        return RoundResult(latencies, client, time.perf_counter() - t0, len(latencies), failed)

    def _async(self, users: int, per_user: int, counter: Counter) -> RoundResult:
        store, queue, request = self.async_store, self.queue, self.workload.request

        def call(i: int) -> None:
            submit(request(i), request_id=f"q{i}", store=store, queue=queue)

        with Draining(self.workload.workflows, store, queue, self.workers) as workers:
            sent_before = self.sent.value
            t0 = time.perf_counter()
            latencies, client, failed = drive(users, per_user, _accepting_refusals(call), counter)
            # A request refused before its checkpoint is final in submit: nothing to wait for.
            dead = workers.wait(self.sent.value - sent_before)
            store.flush()
            done = time.perf_counter() - t0
        return RoundResult(latencies, client, done, len(latencies) - dead, failed + ["dead letter"] * dead)

    def close(self) -> None:
        self.baseline.close()


@dataclass(frozen=True)
class Sizes:
    users: tuple[int, ...]
    rounds: int
    min_requests: int
    """Requests per variant per round at least (split over the users)."""
    per_user: int
    """Requests per user per round at least."""
    workers: int
    warmup: int = 0
    """Untimed requests per variant on each new SQLite file before measuring."""

    def per_user_at(self, users: int) -> int:
        return max(self.per_user, math.ceil(self.min_requests / users))


def measure(backend: Backend, workload: Workload, sizes: Sizes) -> dict[int, dict[str, Cell]]:
    """Every variant at every number of users, interleaved round by round."""
    counter = Counter()
    results: dict[int, dict[str, Cell]] = {}
    for users in sizes.users:
        variants = Variants(backend, workload, users, sizes.workers)
        cells = {name: Cell() for name in VARIANTS}
        try:
            variants.warm_up(sizes.warmup if backend.kind == "sqlite" else 0, counter)
            for r in range(sizes.rounds):
                order = VARIANTS[r % 3 :] + VARIANTS[: r % 3]  # no variant always first
                for name in order:
                    cells[name].rounds.append(
                        variants.run_round(name, users, sizes.per_user_at(users), counter)
                    )
        finally:
            variants.close()
        results[users] = cells
        print(
            f"  {backend.kind} {workload.name} {users:>2} users: "
            + ", ".join(f"{n} p50 {c.median_latency() * 1e3:.1f} ms" for n, c in cells.items()),
            flush=True,
        )
    return results


def _failures(failed: list[str]) -> str:
    if not failed:
        return "0"
    kinds = {kind: failed.count(kind) for kind in sorted(set(failed))}
    return f"{len(failed)} (" + ", ".join(f"{n} {kind}" for kind, n in kinds.items()) + ")"


def _ratio(name: str, a: list[float], b: list[float]) -> Summary:
    return paired_ratio(name, a, b)


def report_backend(report: Report, backend: str, workload: str, results: dict[int, dict[str, Cell]]) -> None:
    report.add(f"### {workload}", "")
    rows = []
    for users, cells in results.items():
        for name, cell in cells.items():
            extra = ""
            if name == "async":
                extra = f" (clients {cell.client_throughput().median:.0f}/s)"
            tp = cell.throughput()
            rows.append(
                [
                    str(users),
                    name,
                    f"{cell.median_latency() * 1e3:.2f}",
                    f"{cell.p95() * 1e3:.2f}",
                    f"{tp.median:.0f} (IQR {tp.q1:.0f}–{tp.q3:.0f}){extra}",
                    str(len(cell.latencies)),
                    _failures([f for r in cell.rounds for f in r.failed]),
                ]
            )
    report.table(["users", "variant", "median ms", "p95 ms", "completed/s", "answered", "failed"], rows)
    ratio_rows = []
    for users, cells in results.items():
        base, sync, asyn = cells["baseline"], cells["sync"], cells["async"]
        ratio_rows.append(
            [
                str(users),
                fmt_ratio(_ratio("sync/base", sync.round_medians(), base.round_medians())),
                fmt_ratio(_ratio("sync/base p95", sync.round_p95s(), base.round_p95s())),
                fmt_ratio(_ratio("async/sync", asyn.round_medians(), sync.round_medians())),
                fmt_ratio(
                    _ratio(
                        "tp sync/base",
                        [r.throughput for r in sync.rounds],
                        [r.throughput for r in base.rounds],
                    )
                ),
                fmt_ratio(
                    _ratio(
                        "tp async/sync",
                        [r.throughput for r in asyn.rounds],
                        [r.throughput for r in sync.rounds],
                    )
                ),
            ]
        )
    report.add("Ratios per round (median, IQR over rounds):", "")
    report.table(
        [
            "users",
            "latency sync / baseline",
            "p95 sync / baseline",
            "client latency async / sync",
            "throughput sync / baseline",
            "throughput async / sync",
        ],
        ratio_rows,
    )
    first = min(results)
    cells = results[first]
    report.headline(
        f"users.{backend}.{workload}.sync_over_baseline_latency",
        _ratio("x", cells["sync"].round_medians(), cells["baseline"].round_medians()),
        note=f"{first} user(s), median latency",
    )
    report.headline(
        f"users.{backend}.{workload}.async_over_sync_latency",
        _ratio("x", cells["async"].round_medians(), cells["sync"].round_medians()),
        note=f"{first} user(s), client latency",
    )
    last = max(results)
    cells = results[last]
    report.headline(
        f"users.{backend}.{workload}.sync_over_baseline_throughput_max_users",
        _ratio(
            "x",
            [r.throughput for r in cells["sync"].rounds],
            [r.throughput for r in cells["baseline"].rounds],
        ),
        note=f"{last} users, completed/s",
    )


def plot_backend(out: Path, backend: str, per_workload: dict[str, dict[int, dict[str, Cell]]]) -> Path:
    from benchmarks._plot import users_figure

    return users_figure(
        out / f"users-{backend}.png",
        f"{LABELS[backend]}: throughput and p95 latency against concurrent users",
        {
            workload: {
                variant: (
                    list(results),
                    [results[u][variant].throughput().median for u in results],
                    [results[u][variant].p95() * 1e3 for u in results],
                )
                for variant in VARIANTS
            }
            for workload, results in per_workload.items()
        },
    )


FULL = Sizes(users=USERS, rounds=3, min_requests=16, per_user=2, workers=2, warmup=250)
QUICK = Sizes(users=(1, 2), rounds=2, min_requests=2, per_user=1, workers=1)


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Report:
    parser = argparse.ArgumentParser(prog="python -m benchmarks users", description=__doc__)
    parser.add_argument(
        "--stores", default=",".join(DEFAULT_KINDS), help="comma-separated: sqlite,moto,azurite"
    )
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--users", default=None, help="comma-separated user counts")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--min-requests", type=int, default=None)
    args = parser.parse_args(argv)
    base = QUICK if quick else FULL
    sizes = Sizes(
        users=tuple(int(u) for u in args.users.split(",")) if args.users else base.users,
        rounds=args.rounds or base.rounds,
        min_requests=args.min_requests or base.min_requests,
        per_user=base.per_user,
        workers=base.workers,
        warmup=base.warmup,
    )
    stores = [s for s in args.stores.split(",") if s]
    workloads = [w for w in args.workloads.split(",") if w]
    report = Report(
        "users",
        "Throughput and latency against concurrent users",
        {
            "stores": stores,
            "workloads": workloads,
            "users": list(sizes.users),
            "rounds": sizes.rounds,
            "requests per variant per round": f"max({sizes.min_requests}, {sizes.per_user} × users)",
            "async workers": f"1 Worker, concurrency {sizes.workers}",
            "SQLite warm-up per variant and user count": sizes.warmup,
        },
        out,
    )
    report.add(
        "Variants interleaved round by round (order rotated); each user a thread sending requests back",
        "to back. *completed/s* counts a request when all its effects are done (async: workers drained;",
        "sync: off-path completion writes flushed). See README.md for the workloads and baselines.",
        "",
    )
    try:
        for kind in stores:
            report.add(f"## {LABELS[kind]}", "")
            per_workload: dict[str, dict[int, dict[str, Cell]]] = {}
            with open_backend(kind) as backend:
                for name in workloads:
                    per_workload[name] = measure(backend, WORKLOADS[name], sizes)
                    report_backend(report, kind, name, per_workload[name])
            plot = plot_backend(out, kind, per_workload)
            report.add(f"![{kind}]({plot.name})", "")
    finally:
        report.write()  # what was measured is kept even if a later store fails
    return report
