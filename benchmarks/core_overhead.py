"""Core costs (issue: core monad): per-step overhead on MemoryStore and the
SqliteStore cost of a 2-step workflow against two plain sqlite3 transactions.

Run: ``python -m benchmarks.core_overhead`` (writes benchmarks/results/core_overhead.md).
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

from benchmarks.common.backends import prewarm_sqlite
from benchmarks.common.report import ratio_headline, write_record
from benchmarks.common.stats import (
    RESULTS,
    Summary,
    environment,
    interleave,
    interleave_samples,
    paired_ratio,
    summarize,
    write,
)
from idemflow import Idem, Tx, atomic, run, workflow
from idemflow.serialization import JSON, encode
from idemflow.stores import MemoryStore, SqliteStore
from idemflow.stores.base import Increment, Insert, RowRef


def record(response: dict[str, Any]) -> Any:
    def record_body(tx: Tx) -> None:
        tx.put(response["id"], response["answers"])

    return record_body


def count(option: str) -> Any:
    def count_body(tx: Tx) -> None:
        tx.increment(option)

    return count_body


@workflow("submit")
def submit(response: dict[str, Any]) -> Generator[Idem[Any], Any, str]:
    """The survey shape: record a response in one partition, count it in another."""
    yield atomic("responses", response["survey"], record(response))
    yield atomic("summaries", response["survey"], count(response["answers"][0]))
    return "ok"


def steps_workflow(n: int) -> Any:
    @workflow(f"steps{n}")
    def many(x: int) -> Generator[Idem[Any], Any, int]:
        for i in range(n):
            yield atomic("items", f"p{i % 4}", count("n"))
        return x

    return many


def per_step_memory(steps: int, rounds: int) -> tuple[dict[str, Summary], int]:
    store = MemoryStore()
    many = steps_workflow(steps)
    direct = MemoryStore()

    def library(i: int) -> None:
        run(many(i), request_id=f"r{i}", store=store)

    def store_only(i: int) -> None:
        # What the steps cost the store itself: one commit per step of the same operations.
        for step in range(steps):
            memo: JSON = {"id": "atomic count_body", "v": None}
            direct.commit(
                [
                    Insert(RowRef("items", f"p{step % 4}", f"mwf|r{i}|s{step}"), memo, encode(memo)),
                    Increment(RowRef("items", f"p{step % 4}", "dn"), 1),
                ]
            )

    return interleave({"idemflow": library, "store alone": store_only}, rounds, 20), steps


SQLITE_WARMUP = 400
"""Workflows each variant runs untimed first: past the first WAL checkpoint of its file."""


def sqlite_two_steps(rounds: int) -> dict[str, list[float]]:
    folder = Path(tempfile.mkdtemp(prefix="idemflow-bench-"))
    for name in ("idem", "plain", "minimal"):  # every file at its steady state (see prewarm_sqlite)
        prewarm_sqlite(folder / f"{name}.sqlite3")
    store = SqliteStore(folder / "idem.sqlite3")
    plain = sqlite3.connect(folder / "plain.sqlite3", isolation_level=None)
    plain.execute("PRAGMA journal_mode = WAL")
    plain.execute("PRAGMA synchronous = FULL")
    plain.execute("CREATE TABLE responses (survey TEXT, id TEXT, answers TEXT, PRIMARY KEY (survey, id))")
    plain.execute(
        "CREATE TABLE summaries (survey TEXT, option TEXT, n INTEGER, PRIMARY KEY (survey, option))"
    )

    def idem(i: int) -> None:
        run(submit({"survey": "s1", "id": f"u{i}", "answers": ["yes"]}), request_id=f"q{i}", store=store)

    minimal = sqlite3.connect(folder / "minimal.sqlite3", isolation_level=None)
    minimal.execute("PRAGMA journal_mode = WAL")
    minimal.execute("PRAGMA synchronous = FULL")
    minimal.execute("CREATE TABLE responses (survey TEXT, id TEXT, answers TEXT, PRIMARY KEY (survey, id))")
    minimal.execute(
        "CREATE TABLE summaries (survey TEXT, option TEXT, n INTEGER, PRIMARY KEY (survey, option))"
    )
    minimal.execute("CREATE TABLE memos (k TEXT PRIMARY KEY, v TEXT)")

    def exactly_once(i: int) -> None:
        # The fewest writes an exactly-once version can do by hand: each step one transaction
        # carrying its data and its memo row, the run record riding in the first.
        minimal.execute("BEGIN IMMEDIATE")
        minimal.execute("INSERT INTO memos VALUES (?, 'fp')", (f"run|q{i}",))
        minimal.execute("INSERT INTO memos VALUES (?, 'null')", (f"q{i}|1",))
        minimal.execute("INSERT INTO responses VALUES (?, ?, ?)", ("s1", f"u{i}", encode(["yes"])))
        minimal.execute("COMMIT")
        minimal.execute("BEGIN IMMEDIATE")
        minimal.execute("INSERT INTO memos VALUES (?, 'null')", (f"q{i}|2",))
        minimal.execute(
            "INSERT INTO summaries VALUES ('s1', 'yes', 1) "
            "ON CONFLICT (survey, option) DO UPDATE SET n = n + 1"
        )
        minimal.execute("COMMIT")

    def baseline(i: int) -> None:
        plain.execute("BEGIN IMMEDIATE")
        plain.execute("INSERT INTO responses VALUES (?, ?, ?)", ("s1", f"u{i}", encode(["yes"])))
        plain.execute("COMMIT")
        plain.execute("BEGIN IMMEDIATE")
        plain.execute(
            "INSERT INTO summaries VALUES ('s1', 'yes', 1) "
            "ON CONFLICT (survey, option) DO UPDATE SET n = n + 1"
        )
        plain.execute("COMMIT")

    try:
        return interleave_samples(
            {"idemflow": idem, "plain sqlite3": baseline, "minimal exactly-once": exactly_once},
            rounds,
            20,
            warmup=SQLITE_WARMUP,
        )
    finally:
        store.close()
        plain.close()
        minimal.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", type=Path, default=None, help="folder for the results")
    args = parser.parse_args(argv)
    started = time.time()
    lines = ["# Core overhead", "", environment(), ""]
    lines += [
        "## Per-step cost on MemoryStore",
        "",
        "| steps | idemflow µs/step | store alone µs/step | library overhead µs/step |",
        "|---|---|---|---|",
    ]
    for steps in (1, 10, 100):
        result, n = per_step_memory(steps, args.rounds)
        lib, alone = result["idemflow"], result["store alone"]
        lines.append(
            f"| {n} | {lib.median / n * 1e6:.1f} (IQR {lib.spread / n * 1e6:.1f}) | "
            f"{alone.median / n * 1e6:.1f} | {(lib.median - alone.median) / n * 1e6:.1f} |"
        )
    samples = sqlite_two_steps(args.rounds)
    sqlite = {name: summarize(name, values) for name, values in samples.items()}
    idem, plain, minimal = sqlite["idemflow"], sqlite["plain sqlite3"], sqlite["minimal exactly-once"]
    over_plain = paired_ratio("x", samples["idemflow"], samples["plain sqlite3"])
    over_minimal = paired_ratio("x", samples["idemflow"], samples["minimal exactly-once"])
    lines += [
        "",
        "## 2-step workflow on SqliteStore vs two plain sqlite3 transactions (WAL, synchronous=FULL)",
        "",
        "| variant | median ms | IQR ms | ratio to plain |",
        "|---|---|---|---|",
        f"| plain sqlite3 | {plain.median * 1e3:.3f} | {plain.spread * 1e3:.3f} | 1.00 |",
        f"| minimal exactly-once | {minimal.median * 1e3:.3f} | {minimal.spread * 1e3:.3f} "
        f"| {minimal.median / plain.median:.2f} |",
        f"| idemflow | {idem.median * 1e3:.3f} | {idem.spread * 1e3:.3f} "
        f"| {idem.median / plain.median:.2f} |",
        "",
        f"Paired per-round ratios (median, IQR): idemflow / plain {over_plain.median:.2f} "
        f"({over_plain.q1:.2f}–{over_plain.q3:.2f}), idemflow / minimal exactly-once "
        f"{over_minimal.median:.2f} ({over_minimal.q1:.2f}–{over_minimal.q3:.2f}).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    write("core_overhead.md", text, args.out)
    write_record(
        "core_overhead",
        "Core overhead",
        {"rounds": args.rounds, "per round": 20, "warm-up per variant": SQLITE_WARMUP},
        {
            "core.sqlite.idemflow_over_plain": ratio_headline(over_plain, "2-step workflow, SQLite"),
            "core.sqlite.idemflow_over_minimal": ratio_headline(over_minimal, "2-step workflow, SQLite"),
        },
        args.out or RESULTS,
        started,
    )


if __name__ == "__main__":
    main()
