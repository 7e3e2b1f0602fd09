"""The measurement of ``contention``: both variants on fresh tables (:class:`Pair`), user threads
kept for a cell (:class:`Crew`), and a cell's calibration, warm-up and interleaved rounds at one
store, placement and number of users.

Why apart: this is what runs under load; the page and the command line only read its results.
"""

from __future__ import annotations

import math
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.common.backends import Backend
from benchmarks.common.stats import percentile
from benchmarks.contention.minimal import MinimalAzure, MinimalDynamo, MinimalSqlite
from benchmarks.contention.params import CALIBRATION, DYNAMO, OPTIONS, VARIANTS, Sizes, Vote
from benchmarks.contention.results import Ledger, Result, Results, RoundResult
from benchmarks.contention.vote import Idemflow, Variant
from idemflow.serialization import JSON


@dataclass
class Pair:
    """Both variants of one cell, on fresh tables; on DynamoDB, each variant's client."""

    variants: dict[str, Variant]
    closers: list[Callable[[], None]] = field(default_factory=list)
    clients: dict[str, Any] = field(default_factory=dict)
    """boto3 DynamoDB client per variant: where the conflict emulator goes."""
    emulators: dict[str, Any] = field(default_factory=dict)

    def emulate(self, rate: float, seed: int) -> None:
        """Install a ``DynamoDBConflicts`` on each variant's client, the same phantom rate for both
        (after the calibration, which measures conflict-free executions)."""
        from idemflow.testing.conflicts import DynamoDBConflicts

        for n, (name, client) in enumerate(self.clients.items()):
            self.emulators[name] = DynamoDBConflicts(client, phantom_rate=rate, seed=seed * 2 + n).install()

    def conflicts(self, name: str) -> int | None:
        emulator = self.emulators.get(name)
        return None if emulator is None else sum(emulator.produced.values())

    def close(self) -> None:
        for emulator in self.emulators.values():
            emulator.uninstall()
        for close in reversed(self.closers):
            close()


def make_pair(backend: Backend, tag: str) -> Pair:
    store = backend.store(f"{tag}i", "responses", "summaries")
    idem = Idemflow(store)
    if backend.kind == "sqlite":
        minimal_sqlite = MinimalSqlite(backend, f"{tag}m")
        return Pair({"idemflow": idem, "minimal": minimal_sqlite}, [store.close, minimal_sqlite.close])
    if backend.kind in DYNAMO:
        import boto3

        from idemflow.stores.dynamodb import DynamoDBStore

        assert isinstance(store, DynamoDBStore)
        meta = store.client.meta  # the baseline's client is configured as the store's (pool size...)
        client = boto3.client(
            "dynamodb", endpoint_url=meta.endpoint_url, region_name=meta.region_name, config=meta.config
        )
        minimal_dynamo = MinimalDynamo(client, tag)
        return Pair(
            {"idemflow": idem, "minimal": minimal_dynamo},
            [store.close, minimal_dynamo.close],
            clients={"idemflow": store.client, "minimal": client},
        )
    if backend.kind == "azurite":
        return Pair({"idemflow": idem, "minimal": MinimalAzure(backend.tables, tag)}, [store.close])
    raise ValueError(f"contention has no baseline for {backend.kind!r}")


# -- users ----------------------------------------------------------------------------------------


class Crew:
    """``size`` user threads kept for a whole cell (their connections stay open across rounds)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._jobs: list[queue.SimpleQueue[Callable[[], None] | None]] = [
            queue.SimpleQueue() for _ in range(size)
        ]
        self._done: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, args=(jobs,), name=f"user-{n}", daemon=True)
            for n, jobs in enumerate(self._jobs)
        ]
        for thread in self._threads:
            thread.start()

    def _serve(self, jobs: queue.SimpleQueue[Callable[[], None] | None]) -> None:
        while (job := jobs.get()) is not None:
            try:
                job()
                self._done.put(None)
            except BaseException as exc:  # noqa: BLE001 - re-raised by run()
                self._done.put(exc)

    def run(self, work: Callable[[int], None]) -> float:
        """Every user runs ``work(user)`` from one start signal; seconds until the last is done."""
        start = threading.Barrier(self.size + 1)

        def job(user: int) -> Callable[[], None]:
            def go() -> None:
                start.wait()
                work(user)

            return go

        for user, jobs in enumerate(self._jobs):
            jobs.put(job(user))
        start.wait()
        t0 = time.perf_counter()
        errors = [self._done.get() for _ in range(self.size)]
        elapsed = time.perf_counter() - t0
        for error in errors:
            if error is not None:
                raise error
        return elapsed

    def close(self) -> None:
        for jobs in self._jobs:
            jobs.put(None)
        for thread in self._threads:
            thread.join()


class Cell:
    """Both variants at one store, placement and number of users."""

    def __init__(self, backend: Backend, placement: str, users: int, index: int, duplicates: str) -> None:
        self.placement, self.users, self.index, self.duplicates = placement, users, index, duplicates
        self.pair = make_pair(backend, backend.tag(f"c{placement[0]}{users}x"))
        self.ledgers = {name: Ledger() for name in VARIANTS}
        self.results = {name: Result() for name in VARIANTS}

    def _votes(self, prefix: str, users: int, per_user: int, placement: str) -> list[list[tuple[str, Vote]]]:
        """Each user's requests: (request id, vote); spread: the user's own survey (``s<user>``,
        ``w<user>`` for the warm-up)."""
        survey = "w" if prefix == "w" else "s"
        return [
            [
                (
                    f"{prefix}.{user}.{k}",
                    {
                        "survey": "hot" if placement == "hot" else f"{survey}{user}",
                        "voter": f"v{prefix}.{user}.{k}",
                        "option": OPTIONS[(user + k) % 2],
                    },
                )
                for k in range(per_user)
            ]
            for user in range(users)
        ]

    def _sends(self, votes: list[list[tuple[str, Vote]]]) -> list[list[tuple[str, Vote]]]:
        """Each user's sends: its request, then a duplicate (the previous user's, or its own)."""
        n = len(votes)
        sends: list[list[tuple[str, Vote]]] = []
        for user, mine in enumerate(votes):
            other = votes[(user - 1) % n] if self.duplicates == "next-user" else mine
            sends.append([send for k, own in enumerate(mine) for send in (own, other[k])])
        return sends

    def calibrate(self) -> None:
        """Conflict-free write attempts of one request and its duplicate, one after the other."""
        for name, variant in self.pair.variants.items():
            seen = []
            for n in range(CALIBRATION):
                request, vote = f"cal.{n}", {"survey": "cal", "voter": f"vcal.{n}", "option": OPTIONS[n % 2]}
                self.ledgers[name].requests[request] = vote
                variant.attempts.sending(request)
                for _ in range(2):
                    self.ledgers[name].answers[request].append(variant.send(request, vote))
                variant.settle()
                seen.append(variant.attempts.take().get(request, 0))
            self.results[name].free_attempts = min(seen)

    def burst(
        self, crew: Crew, name: str, prefix: str, per_user: int, placement: str
    ) -> tuple[RoundResult, list[int]]:
        """One round of one variant: every user sends its requests and duplicates back to back.
        Returns the round and the retries of each of its request ids."""
        variant, ledger = self.pair.variants[name], self.ledgers[name]
        votes = self._votes(prefix, crew.size, per_user, placement)
        for mine in votes:
            ledger.requests.update(mine)
        sends = self._sends(votes)
        logs: list[list[tuple[str, JSON, float]]] = [[] for _ in sends]
        failed: list[list[tuple[str, str]]] = [[] for _ in sends]

        def user(n: int) -> None:
            log, errors = logs[n], failed[n]
            for request, vote in sends[n]:
                variant.attempts.sending(request)
                t0 = time.perf_counter()
                try:
                    answer = variant.send(request, vote)
                except Exception as exc:  # noqa: BLE001 - every error reaching the caller is counted
                    errors.append((request, f"{type(exc).__name__}: {exc}"[:300]))
                    continue
                log.append((request, answer, time.perf_counter() - t0))

        seconds = crew.run(user)
        t0 = time.perf_counter()
        variant.settle()
        seconds += time.perf_counter() - t0
        latencies = []
        for log in logs:
            for request, answer, latency in log:
                ledger.answers[request].append(answer)
                latencies.append(latency)
        for errors in failed:
            ledger.failures.extend(text for _request, text in errors)
        attempts = variant.attempts.take()
        free = self.results[name].free_attempts
        retries = [max(0, attempts.get(request, 0) - free) for mine in votes for request, _vote in mine]
        return RoundResult(sum(len(s) for s in sends), seconds, latencies), retries

    def measure(self, sizes: Sizes, kind: str, phantom_rate: float) -> None:
        self.calibrate()
        self.pair.emulate(phantom_rate, seed=self.index)
        crew = Crew(self.users)
        try:
            warmup = sizes.of(sizes.warmup, kind)
            if warmup:  # untimed, every user in its own survey: connections and files warmed
                for name in VARIANTS:
                    self.burst(crew, name, "w", max(1, math.ceil(warmup / self.users)), "spread")
            for r in range(sizes.of(sizes.rounds, kind)):
                order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
                for name in order:
                    measured, retries = self.burst(
                        crew, name, f"r{r}", sizes.per_user(kind, self.users), self.placement
                    )
                    self.results[name].rounds.append(measured)
                    self.results[name].retries.extend(retries)
        finally:
            crew.close()
        for name, variant in self.pair.variants.items():
            ledger, result = self.ledgers[name], self.results[name]
            result.failures = list(ledger.failures)
            result.violations = ledger.check(variant.counts())
            result.conflicts = self.pair.conflicts(name)
            result.retried = dict(variant.attempts.retries)
            for problem in result.violations:
                print(
                    f"!!! EXACTLY-ONCE VIOLATION ({name}, {self.placement}, {self.users} users): {problem}",
                    file=sys.stderr,
                    flush=True,
                )

    def close(self) -> None:
        self.pair.close()


def measure_store(
    backend: Backend, sizes: Sizes, placements: Sequence[str], phantom_rate: float, duplicates: str
) -> Results:
    results: Results = {}
    index = 0
    for placement in placements:
        results[placement] = {}
        for users in sizes.users:
            index += 1
            cell = Cell(backend, placement, users, index, duplicates)
            try:
                cell.measure(sizes, backend.kind, phantom_rate)
            finally:
                cell.close()
            results[placement][users] = cell.results
            print(
                f"  {backend.kind} {placement} {users:>3} users: "
                + ", ".join(
                    f"{name} {r.throughput().median:.0f}/s, p95 {percentile(r.latencies, 95) * 1e3:.0f} ms, "
                    f"{len(r.failures)} failed"
                    for name, r in cell.results.items()
                    if r.latencies
                ),
                flush=True,
            )
    return results
