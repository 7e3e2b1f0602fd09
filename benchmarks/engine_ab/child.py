"""One round of ``engine_ab`` in one idemflow version: run in a subprocess whose ``sys.path`` puts
that version's ``idemflow/`` first, it times the per-step cost and prints it as one JSON line.

Why apart: the child imports only idemflow's public API, so any version since 0.1.0 can run it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import idemflow
from idemflow import Idem, Tx, atomic, run, workflow
from idemflow.stores import MemoryStore, SqliteStore

_SCALE = int(os.environ.get("IDEMFLOW_AB_DIVISOR", "1"))
"""``engine_ab --quick`` divides every count by 20: a smoke run, not a measurement."""
SHAPES = {1: 2000 // _SCALE, 10: 400 // _SCALE, 100: 40 // _SCALE}
"""Steps per workflow, and how many requests a round runs of it."""
REPLAYS = {10: 400 // _SCALE, 100: 40 // _SCALE}
"""Steps of a workflow retried after its last step failed, and how many requests a round retries."""
SQLITE_REQUESTS, SQLITE_WARMUP = 1000 // _SCALE, 400 // _SCALE


def _count(tx: Tx) -> None:
    tx.increment("n")


def _chain(steps: int) -> Callable[[int], Idem[Any]]:
    @workflow(f"ab_steps{steps}")
    def chain(x: int) -> Generator[Idem[Any], Any, int]:
        for i in range(steps):
            yield atomic("items", f"p{i % 4}", _count)
        return x

    return chain


class _Crash(Exception):
    """Stands for a process that died before its last step committed."""


def _replayed(steps: int) -> Callable[[int], Idem[Any]]:
    """A workflow whose last step fails on its first execution only: its retry replays the rest."""
    failed: set[int] = set()

    def last(x: int) -> Callable[[Tx], None]:
        def body(tx: Tx) -> None:
            if x not in failed:
                failed.add(x)
                raise _Crash
            tx.increment("n")

        return body

    @workflow(f"ab_replay{steps}")
    def chain(x: int) -> Generator[Idem[Any], Any, int]:
        for i in range(steps - 1):
            yield atomic("items", f"p{i % 4}", _count)
        yield atomic("items", "last", last(x))
        return x

    return chain


def _replay_seconds(steps: int, requests: int) -> float:
    """Seconds the retries took: each replays ``steps - 1`` memos and runs the last step."""
    store, chain = MemoryStore(), _replayed(steps)
    for i in range(requests):
        with contextlib.suppress(_Crash):
            run(chain(i), request_id=f"c{i}", store=store)
    began = time.perf_counter()
    for i in range(requests):
        run(chain(i), request_id=f"c{i}", store=store)
    return time.perf_counter() - began


def _seconds(chain: Callable[[int], Idem[Any]], store: Any, prefix: str, count: int) -> float:
    began = time.perf_counter()
    for i in range(count):
        run(chain(i), request_id=f"{prefix}{i}", store=store)
    return time.perf_counter() - began


def measure(folder: Path) -> dict[str, float]:
    """µs per step on MemoryStore, fresh and replayed after a crash, and ms per 2-step request on
    SqliteStore."""
    found: dict[str, float] = {}
    for steps, requests in SHAPES.items():
        store, chain = MemoryStore(), _chain(steps)
        _seconds(chain, store, "w", requests // 4)  # warm-up
        took = _seconds(chain, store, "r", requests)
        found[f"memory {steps} steps, µs/step"] = took / (requests * steps) * 1e6
    for steps, requests in REPLAYS.items():
        _replay_seconds(steps, requests // 4)  # warm-up
        took = _replay_seconds(steps, requests)
        found[f"memory replay of {steps} steps, µs/step"] = took / (requests * steps) * 1e6
    sqlite = SqliteStore(folder / "ab.sqlite3")
    two = _chain(2)
    _seconds(two, sqlite, "w", SQLITE_WARMUP)
    took = _seconds(two, sqlite, "r", SQLITE_REQUESTS)
    found["sqlite 2 steps, ms/request"] = took / SQLITE_REQUESTS * 1e3
    sqlite.close()
    return found


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="idemflow-ab-") as scratch:
        result = {"idemflow": str(Path(idemflow.__file__).parent), "metrics": measure(Path(scratch))}
    sys.stdout.write(json.dumps(result) + "\n")
