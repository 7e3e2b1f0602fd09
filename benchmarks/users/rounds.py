"""The rounds of ``users``: the three variants (baseline, sync, async) of one workload at one
number of concurrent users, driven by user threads, round after round.

Why apart: ``users.py`` reads as its command line; this module holds what one measurement does.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks.common.backends import Backend
from benchmarks.common.queue_drain import Draining, count_sends
from benchmarks.common.stats import Summary, percentile, summarize
from benchmarks.common.workload_base import Workload
from idemflow import WorkflowAborted, run
from idemflow.client import submit

VARIANTS = ("baseline", "sync", "async")
USERS = (1, 2, 4, 8, 16, 32)


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
        WAL checkpoint of each new file, see :func:`benchmarks.common.stats.interleave_samples`)."""
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


FULL = Sizes(users=USERS, rounds=3, min_requests=16, per_user=2, workers=2, warmup=250)
QUICK = Sizes(users=(1, 2), rounds=2, min_requests=2, per_user=1, workers=1)
