"""One shape of ``engine_ab.instructions``, run under callgrind in one idemflow version:
``python -c BOOT <idemflow root> <repository> SHAPE COUNT`` runs one warm-up request and then
``COUNT`` requests of ``SHAPE``, so two runs (0 and N) differ by N requests' instructions.

Why apart from :mod:`benchmarks.engine_ab.child`: callgrind runs a program some 50 times slower,
so these runs are small, and what they count must be only the requests (no timing, no JSON).
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

from idemflow import Idem, Tx, atomic, run, workflow
from idemflow.stores import MemoryStore, SqliteStore

SHAPES = ("memory-1", "memory-10", "memory-replay-10", "sqlite-2", "sqlite-duplicate")
"""What one request is: fresh 1- and 10-step workflows on MemoryStore, a 10-step retry that
replays 9 memos, a fresh 2-step workflow and a duplicate of a finished one on SqliteStore."""


def _count(tx: Tx) -> None:
    tx.increment("n")


class _Crash(Exception):
    """Stands for a process that died before the last step committed."""


def _chain(steps: int, crash_once: set[int] | None = None) -> Callable[[int], Idem[Any]]:
    def last(x: int) -> Callable[[Tx], None]:
        def body(tx: Tx) -> None:
            if crash_once is not None and x not in crash_once:
                crash_once.add(x)
                raise _Crash
            tx.increment("n")

        return body

    @workflow(f"counted{steps}")
    def chain(x: int) -> Generator[Idem[Any], Any, int]:
        for i in range(steps - 1):
            yield atomic("items", f"p{i % 4}", _count)
        yield atomic("items", "last", last(x))
        return x

    return chain


def main(shape: str, count: int, folder: Path, *, check: bool = False) -> None:
    """Run the requests; with ``check``, then read back that each applied its steps once (the
    smoke test's question, left out of a counted run: it would count a scan that grows with N)."""
    store, steps = _requests(shape, count, folder)
    if check:
        counted = sum(int(row.value) for _, key, row in store.scan("items") if key == "dn")
        if counted != (count + 1) * steps:
            raise SystemExit(f"{shape}: {counted} increments, not {(count + 1) * steps}")


def _requests(shape: str, count: int, folder: Path) -> tuple[Any, int]:
    if shape == "memory-replay-10":
        store: Any = MemoryStore(expire_every=None)
        chain = _chain(10, set())
        for i in range(count + 1):  # the first attempts, crashing at the last step
            with contextlib.suppress(_Crash):
                run(chain(i), request_id=f"r{i}", store=store)
        for i in range(count + 1):
            run(chain(i), request_id=f"r{i}", store=store)
        return store, 10
    steps = {"memory-1": 1, "memory-10": 10}.get(shape, 2)
    store = MemoryStore(expire_every=None) if shape.startswith("memory") else SqliteStore(folder / "c.db")
    chain = _chain(steps)
    for i in range(count + 1):
        run(chain(i), request_id=f"r{i}", store=store)
    if shape == "sqlite-duplicate":
        for i in range(count + 1):
            run(chain(i), request_id=f"r{i}", store=store)
    return store, steps


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="idemflow-counted-") as scratch:
        main(sys.argv[1], int(sys.argv[2]), Path(scratch), check="--check" in sys.argv[3:])
