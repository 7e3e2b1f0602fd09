"""The soak's load: ``run`` and ``submit`` at fixed rates on one SQLite file, a worker finishing the
submits, and each request's latency.

Every request has a fresh id and writes a fresh order row into one of four partitions (the file
grows as a real one does, by long runs of data rows the sweep can never delete: a ledger, not a
row per partition) and bumps one of eight counters. ``soak-run`` is two steps run
in the caller; ``soak-submit`` is the same two steps with a ``checkpoint()`` between them, so a
worker finishes it (an outbox entry and a queue message per request).

>>> from idemflow import run
>>> from idemflow.stores import MemoryStore
>>> run(soak_run({"id": "o1", "n": 3}), request_id="o1", store=MemoryStore())
'o1'
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from idemflow import Idem, Tx, atomic, checkpoint, workflow

ORDERS, COUNTERS = "soakorders", "soakcounters"
Flow = Generator[Idem[Any], Any, Any]


def _order(req: dict[str, Any]) -> Callable[[Tx], str]:
    def body(tx: Tx) -> str:
        tx.put(str(req["id"]), {"n": req["n"], "at": "soak"})
        return str(req["id"])

    return body


def _count(tx: Tx) -> int:
    tx.increment("orders")
    return 1


def _steps(req: dict[str, Any]) -> tuple[Idem[str], Idem[int]]:
    n = int(req["n"])
    return (
        atomic(ORDERS, f"p{n % 4}", _order(req), name="order"),
        atomic(COUNTERS, f"c{n % 8}", _count, name="count"),
    )


@workflow("soak-run")
def soak_run(req: dict[str, Any]) -> Flow:
    order, count = _steps(req)
    placed = yield order
    yield count
    return placed


@workflow("soak-submit")
def soak_submit(req: dict[str, Any]) -> Flow:
    order, count = _steps(req)
    placed = yield order
    yield checkpoint()
    yield count
    return placed


@dataclass
class Latencies:
    """Seconds per request of one kind, taken and cleared by the sampler each interval."""

    seconds: list[float] = field(default_factory=list)
    requests: int = 0
    errors: int = 0
    late: int = 0
    """Requests started more than one period after they were due (the load fell behind)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, seconds: float) -> None:
        with self.lock:
            self.seconds.append(seconds)
            self.requests += 1

    def take(self) -> list[float]:
        with self.lock:
            taken, self.seconds = self.seconds, []
            return taken


def paced(
    rate: float, until: float, stop: threading.Event, send: Callable[[int], None], lat: Latencies
) -> None:
    """Call ``send(n)`` ``rate`` times a second until ``until`` (monotonic), timing each call."""
    if rate <= 0:
        return
    period, n = 1.0 / rate, 0
    due = time.monotonic()
    while not stop.is_set() and due < until:
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        elif -wait > period:
            lat.late += 1
        began = time.perf_counter()
        try:
            send(n)
        except Exception:  # noqa: BLE001 - counted and shown on the page; a soak keeps going
            lat.errors += 1
        else:
            lat.note(time.perf_counter() - began)
        n += 1
        due += period
