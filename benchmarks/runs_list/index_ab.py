"""What SQLite's index of run records by start time costs a commit: side by side, paired rounds.

Two SQLite files (WAL, ``synchronous=FULL``, pre-warmed as every measured file is), one with the
index and one where it was dropped after the store opened it, run the same 2-step workflow under
``run`` in alternating rounds (which file goes first alternates too). Per round: seconds per
request, and WAL frames (pages) written per request, read with a passive checkpoint before and
after the round (a full checkpoint lets the next write start the WAL over; a round writes fewer
frames than the auto-checkpoint's 1,000). Ratios are paired by round: with the index over without.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

from benchmarks.common.backends import prewarm_sqlite
from benchmarks.common.stats import Summary, paired_ratio, summarize
from idemflow import Idem, atomic, run, workflow
from idemflow.stores import SqliteStore

WARMUP = 300
"""Requests each file runs untimed first (see ``benchmarks.common.backends.prewarm_sqlite``)."""


@workflow("ab")
def two_steps(n: int) -> Generator[Idem[Any], Any, int]:
    yield atomic("tablea", f"p{n % 50}", lambda tx: tx.increment("n"), name="first")
    yield atomic("tableb", f"q{n % 50}", lambda tx: tx.increment("n"), name="second")
    return n


def _frames(path: Path) -> int:
    """Frames in the WAL now, after checkpointing them (so the next write starts it over)."""
    with sqlite3.connect(path) as conn:
        _busy, log, _done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(log)


def measure(folder: Path, rounds: int, per_round: int) -> dict[str, Summary]:
    """``{"seconds": ratio, "frames": ratio, "with ms": ..., "without ms": ..., ...}``."""
    stores: dict[str, tuple[SqliteStore, Path]] = {}
    for variant in ("with", "without"):
        path = folder / f"ab-{variant}.sqlite3"
        prewarm_sqlite(path)
        store = SqliteStore(path, expire_every=None)
        for n in range(WARMUP):  # opens both of its connections (steps, completion records)
            run(two_steps(n), request_id=f"warm-{n}", store=store)
        if variant == "without":
            with sqlite3.connect(path) as conn:
                conn.execute("DROP INDEX idemflow_runs_by_start")
        stores[variant] = (store, path)
    seconds: dict[str, list[float]] = {"with": [], "without": []}
    frames: dict[str, list[float]] = {"with": [], "without": []}
    for number in range(rounds):
        order = ("with", "without") if number % 2 == 0 else ("without", "with")
        for variant in order:
            store, path = stores[variant]
            _frames(path)
            began = time.perf_counter()
            for n in range(per_round):
                run(two_steps(n), request_id=f"r{number}-{n}", store=store)
            seconds[variant].append((time.perf_counter() - began) / per_round)
            frames[variant].append(_frames(path) / per_round)
    for store, _ in stores.values():
        store.close()
    return {
        "seconds": paired_ratio("seconds", seconds["with"], seconds["without"]),
        "frames": paired_ratio("frames", frames["with"], frames["without"]),
        "with ms": summarize("with ms", [s * 1000 for s in seconds["with"]]),
        "without ms": summarize("without ms", [s * 1000 for s in seconds["without"]]),
        "with frames": summarize("with frames", frames["with"]),
        "without frames": summarize("without frames", frames["without"]),
    }
