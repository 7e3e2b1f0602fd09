"""How ``cost`` runs its variants: warm-up, interleaved timed rounds, then a metering pass.

- **Warm-up**: every variant runs untimed first (files, connections, tables at their steady state).
- **Rounds**: each round runs every variant of every backend ``per_round`` times, in an order
  shuffled with a fixed seed, one request at a time; after a variant's requests, its background
  writes are waited for (``settle``: a store's ``flush``) *inside* the round's CPU window, so
  their CPU and calls are the variant's. Per request: latency; per round: the median latency,
  client CPU (``getrusage(RUSAGE_SELF)`` user + system over the round, every thread included,
  divided by its requests) and the calls counted at the SDK. A variant served by a process of its
  own (DBOS: one instance per process) reports that process's CPU and each request's latency as
  measured there (``Variant.cpu``, ``Variant.own_time``).
- **Duplicates** call their first-call variant with a key it already finished (and flushed):
  each key is repeated once (if the pool ran dry a key would be repeated again; counted).
- **Metering pass**: afterwards, every variant runs ``meter`` more requests, each settled before
  the next, with the DynamoDB meter reading item images and pricing each call
  (:mod:`benchmarks.cost.meter`). Latency is not taken here: the extra reads would distort it.

Why apart: the variants say what a request is; this module alone decides when it runs and what is
measured around it.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import resource
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from benchmarks.cost.meter import REQUEST_TASK, Check, Counted, Meter

T = TypeVar("T")


def cpu_seconds() -> float:
    """CPU seconds of this process so far: user + system, every thread."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _nothing() -> None:
    """No background work to wait for."""


@dataclass
class Variant:
    """One way of serving a request on one backend."""

    backend: str
    name: str
    call: Callable[[int], object]
    """Serve request number ``i`` (its key and event derive from ``i``)."""
    counted: Callable[[], Counted]
    """Cumulative counts of what this variant's clients sent (a backend-wide meter: variants run
    one at a time, so a window's difference is the running variant's)."""
    settle: Callable[[], None] = _nothing
    base: str | None = None
    """A duplicate: the name of the variant (same backend) whose finished keys it repeats."""
    family: str = ""
    """``plain``, ``minimal``, ``workflow``, ``asyncio``, ``function`` or ``peer``."""
    steps: int = 0
    meter: Meter | None = None
    cpu: Callable[[], float] = cpu_seconds
    """CPU seconds so far of the process serving this variant (a peer in a process of its own
    reports its own)."""
    own_time: bool = False
    """``call`` returns the seconds the request took where it ran (a peer in a process of its
    own: the pipe to it is no part of its latency)."""

    @property
    def key(self) -> str:
        return f"{self.backend}/{self.name}"


@dataclass
class Result:
    latencies: list[float] = field(default_factory=list)
    round_p50: list[float] = field(default_factory=list)
    round_cpu: list[float] = field(default_factory=list)
    """Client CPU seconds per request, per round."""
    timed: Counted = field(default_factory=Counted)
    requests: int = 0
    metered: Counted = field(default_factory=Counted)
    metered_requests: int = 0
    checks: list[Check] = field(default_factory=list)
    repeats: int = 0


def idle_cpu(seconds: float = 1.0) -> float:
    """CPU seconds per second the process spends while idle (background threads: DBOS, SDKs)."""
    before = cpu_seconds()
    time.sleep(seconds)
    return (cpu_seconds() - before) / seconds


class Keys:
    """Request numbers: fresh ones for first calls, finished ones for duplicates."""

    def __init__(self) -> None:
        self._next = itertools.count(1)
        self._finished: dict[str, deque[int]] = {}
        self._repeated: dict[str, deque[int]] = {}

    def fresh(self) -> int:
        return next(self._next)

    def finish(self, variant: str, numbers: list[int]) -> None:
        self._finished.setdefault(variant, deque()).extend(numbers)

    def duplicate(self, variant: str) -> tuple[int, bool]:
        """A finished key of ``variant`` not yet repeated (else the oldest repeated: True)."""
        pool, used = self._finished.setdefault(variant, deque()), self._repeated.setdefault(variant, deque())
        if pool:
            number, again = pool.popleft(), False
        elif used:
            number, again = used.popleft(), True
        else:
            raise RuntimeError(f"{variant}: no finished request to repeat")
        used.append(number)
        return number, again


class Rounds:
    """Runs ``variants`` (first calls before their duplicates in every untimed phase)."""

    def __init__(self, variants: list[Variant]) -> None:
        self.variants = variants
        self.results = {v.key: Result() for v in variants}
        self.keys = Keys()
        self._ordered = [v for v in variants if v.base is None] + [v for v in variants if v.base]

    def _batch(self, variant: Variant, count: int, timed: bool, each_settled: bool = False) -> list[float]:
        result = self.results[variant.key]
        base = f"{variant.backend}/{variant.base}" if variant.base else None
        fresh: list[int] = []
        times: list[float] = []
        for _ in range(count):
            if base is None:
                number = self.keys.fresh()
                fresh.append(number)
            else:
                number, again = self.keys.duplicate(base)
                result.repeats += again
            start = time.perf_counter()
            answer = variant.call(number)
            took = time.perf_counter() - start
            times.append(answer if variant.own_time and isinstance(answer, float) else took)
            if each_settled:
                variant.settle()
        variant.settle()
        if base is None:
            self.keys.finish(variant.key, fresh)
        return times if timed else []

    def warm_up(self, first: Callable[[Variant], int], duplicates: int) -> None:
        """``first(variant)`` untimed first calls per variant, then ``duplicates`` per duplicate."""
        for variant in self._ordered:
            self._batch(variant, duplicates if variant.base else first(variant), timed=False)

    def run(self, rounds: int, per_round: int, seed: int, progress: Callable[[str], None]) -> None:
        shuffle = random.Random(seed)
        for number in range(rounds):
            began = time.monotonic()
            order = list(self.variants)
            shuffle.shuffle(order)
            for variant in order:
                result = self.results[variant.key]
                cpu, counted = variant.cpu(), variant.counted()
                times = self._batch(variant, per_round, timed=True)
                result.round_cpu.append((variant.cpu() - cpu) / per_round)
                result.timed = result.timed + (variant.counted() - counted)
                result.latencies.extend(times)
                result.round_p50.append(statistics.median(times))
                result.requests += per_round
            progress(f"round {number + 1}/{rounds} in {time.monotonic() - began:.0f} s")

    def meter(self, requests: int, meters: list[Meter]) -> None:
        for meter in meters:
            meter.metering = True
        try:
            for variant in self._ordered:
                result = self.results[variant.key]
                counted = variant.counted()
                self._batch(variant, requests, timed=False, each_settled=True)
                after = variant.counted()
                result.metered = after - counted
                result.metered_requests = requests
                if variant.meter is not None:
                    result.checks = variant.meter.checks[counted.checks : after.checks]
        finally:
            for meter in meters:
                meter.metering = False


class Loop:
    """An event loop on a thread of its own, as a server's would run: the asynchronous store's
    background writes go on between requests. :meth:`request` runs a coroutine as a request
    (its task named :data:`~benchmarks.cost.meter.REQUEST_TASK`: on the caller's path)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="cost-loop", daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def request(self, coroutine: Coroutine[Any, Any, T]) -> T:
        async def as_request() -> T:
            task = asyncio.current_task()
            if task is not None:
                task.set_name(REQUEST_TASK)
            return await coroutine

        return self.run(as_request())

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()
