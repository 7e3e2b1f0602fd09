"""Pure library overhead per step on ``MemoryStore``, against workflow length and on replay.

``MemoryStore`` makes a commit cost microseconds, so what remains is the
library: building the ``Tx``, numbering the step, encoding the memo,
checking limits, interpreting the generator. Each measurement runs beside
"store alone": the same store operations issued directly (the memo insert
and the data write per step; a memo read per replayed step), interleaved in
rounds. Library overhead per step = (idemflow − store alone) / steps.

- **fresh**: a first execution of an N-step workflow (N = 10, 100, 1000);
- **replay after a crash**: the process died before the last step's commit
  (``FaultyStore``, ``CRASH_BEFORE``); the retry replays N−1 steps from
  their memos (one read each) and runs the last;
- **duplicate**: a finished request called again (one read of the run record).

Run: ``python -m benchmarks overhead [--quick]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.report import Report, fmt_ratio
from benchmarks.common.stats import RESULTS, Summary, paired_ratio, summarize
from idemflow import Idem, Tx, Workflow, atomic, run, workflow
from idemflow.keys import RUNS_TABLE, data_key, memo_key, run_key, step_tag
from idemflow.serialization import JSON, encode
from idemflow.stores import MemoryStore
from idemflow.stores.base import Increment, Insert, RowRef
from idemflow.testing import Fault, FaultPoint, FaultyStore, SimulatedCrash

LENGTHS = (10, 100, 1000)
PARTITIONS = 4


def bump(tx: Tx) -> None:
    tx.increment("n")


def steps_workflow(n: int) -> Workflow[[int], int]:
    @workflow(f"steps{n}")
    def many(x: int) -> Generator[Idem[Any], Any, int]:
        for i in range(n):
            yield atomic("items", f"p{i % PARTITIONS}", bump)
        return x

    return many


def _direct_steps(store: MemoryStore, name: str, request: str, n: int) -> None:
    """The store operations of ``n`` fresh steps, issued directly: memo insert + increment."""
    for step in range(1, n + 1):
        memo: JSON = {"id": "atomic bump", "v": None}
        partition = f"p{(step - 1) % PARTITIONS}"
        store.commit(
            [
                Insert(
                    RowRef("items", partition, memo_key(name, request, step_tag(step))), memo, encode(memo)
                ),
                Increment(RowRef("items", partition, data_key("n")), 1),
            ]
        )


def _interleaved(rounds: int, variants: dict[str, Callable[[], float]]) -> dict[str, list[float]]:
    """Each variant returns the seconds of its own timed part; rounds alternate the variants."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:  # order rotates
            samples[name].append(variants[name]())
    return samples


def fresh(n: int, rounds: int, per_round: int) -> dict[str, list[float]]:
    """Seconds per workflow: idemflow vs the same commits issued directly."""
    store, direct = MemoryStore(), MemoryStore()
    many = steps_workflow(n)
    counter = iter(range(10**9))

    def library() -> float:
        t0 = time.perf_counter()
        for _ in range(per_round):
            i = next(counter)
            run(many(i), request_id=f"r{i}", store=store)
        return (time.perf_counter() - t0) / per_round

    def alone() -> float:
        t0 = time.perf_counter()
        for _ in range(per_round):
            _direct_steps(direct, many.name, f"r{next(counter)}", n)
        return (time.perf_counter() - t0) / per_round

    return _interleaved(rounds, {"idemflow": library, "store alone": alone})


def _crash_before(index: int) -> Callable[[FaultPoint], Fault | None]:
    def plan(point: FaultPoint) -> Fault | None:
        return Fault.CRASH_BEFORE if point.kind == "commit" and point.index == index else None

    return plan


def replay(n: int, rounds: int, per_round: int) -> dict[str, list[float]]:
    """Seconds per retry of a request that crashed before its last commit."""
    store = MemoryStore()
    many = steps_workflow(n)
    counter = iter(range(10**9))

    def crashed() -> list[int]:
        made = []
        for _ in range(per_round):
            i = next(counter)
            try:
                run(many(i), request_id=f"c{i}", store=FaultyStore(store, _crash_before(n - 1)))
            except SimulatedCrash:
                made.append(i)
        return made

    def library() -> float:
        todo = crashed()  # not timed
        t0 = time.perf_counter()
        for i in todo:
            run(many(i), request_id=f"c{i}", store=store)
        return (time.perf_counter() - t0) / len(todo)

    def alone() -> float:
        # What the replay costs the store: one memo read per recorded step (the run record
        # read beside the first), then the last step's commit.
        todo = crashed()
        t0 = time.perf_counter()
        for i in todo:
            request = f"c{i}"
            store.read_many([RowRef(RUNS_TABLE, request, run_key(many.name))])
            for step in range(1, n):
                store.read(
                    RowRef(
                        "items", f"p{(step - 1) % PARTITIONS}", memo_key(many.name, request, step_tag(step))
                    )
                )
            memo: JSON = {"id": "atomic bump", "v": None}
            partition = f"p{(n - 1) % PARTITIONS}"
            store.commit(
                [
                    Insert(
                        RowRef("items", partition, memo_key(many.name, request, step_tag(n))),
                        memo,
                        encode(memo),
                    ),
                    Increment(RowRef("items", partition, data_key("n")), 1),
                ]
            )
        return (time.perf_counter() - t0) / len(todo)

    return _interleaved(rounds, {"idemflow": library, "store alone": alone})


def duplicate(n: int, rounds: int, per_round: int) -> dict[str, list[float]]:
    """Seconds per duplicate call of a finished request (one read)."""
    store = MemoryStore()
    many = steps_workflow(n)
    for i in range(per_round):
        run(many(i), request_id=f"d{i}", store=store)

    def library() -> float:
        t0 = time.perf_counter()
        for i in range(per_round):
            run(many(i), request_id=f"d{i}", store=store)
        return (time.perf_counter() - t0) / per_round

    def alone() -> float:
        t0 = time.perf_counter()
        for i in range(per_round):
            store.read_many([RowRef(RUNS_TABLE, f"d{i}", run_key(many.name))])
        return (time.perf_counter() - t0) / per_round

    return _interleaved(rounds, {"idemflow": library, "store alone": alone})


def _per_step(samples: dict[str, list[float]], steps: int) -> tuple[Summary, Summary, Summary]:
    lib = summarize("idemflow", [s / steps * 1e6 for s in samples["idemflow"]])
    alone = summarize("store alone", [s / steps * 1e6 for s in samples["store alone"]])
    overhead = summarize(
        "overhead",
        [(a - b) / steps * 1e6 for a, b in zip(samples["idemflow"], samples["store alone"], strict=True)],
    )
    return lib, alone, overhead


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Report:
    parser = argparse.ArgumentParser(prog="python -m benchmarks overhead", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3 if quick else 9)
    parser.add_argument("--steps-per-round", type=int, default=300 if quick else 6000)
    args = parser.parse_args(argv)
    lengths = (10, 100) if quick else LENGTHS
    report = Report(
        "overhead",
        "Library overhead per step on MemoryStore",
        {
            "lengths": list(lengths),
            "rounds": args.rounds,
            "steps per variant per round": args.steps_per_round,
        },
        out,
    )
    rows: list[list[str]] = []
    series: dict[str, tuple[list[float], list[float]]] = {"fresh": ([], []), "replay after crash": ([], [])}
    for n in lengths:
        per_round = max(1, args.steps_per_round // n)
        for kind, measure, steps in (
            ("fresh", fresh, n),
            ("replay after crash", replay, n),
        ):
            samples = measure(n, args.rounds, per_round)
            lib, alone, overhead = _per_step(samples, steps)
            ratio = paired_ratio("x", samples["idemflow"], samples["store alone"])
            rows.append(
                [
                    kind,
                    str(n),
                    f"{lib.median:.1f}",
                    f"{alone.median:.1f}",
                    f"**{overhead.median:.1f}** (IQR {overhead.q1:.1f}–{overhead.q3:.1f})",
                    fmt_ratio(ratio),
                ]
            )
            series[kind][0].append(n)
            series[kind][1].append(overhead.median)
            report.headline(f"overhead.{kind.split()[0]}.{n}", overhead, note="µs/step over the store alone")
            print(f"  overhead {kind} {n} steps: {overhead.median:.1f} µs/step", flush=True)
    dup = duplicate(10, args.rounds, max(1, args.steps_per_round // 10))
    lib = summarize("idemflow", [s * 1e6 for s in dup["idemflow"]])
    alone = summarize("store alone", [s * 1e6 for s in dup["store alone"]])
    report.add(
        "Microseconds per step (median over rounds; overhead = idemflow − store alone, paired by round).",
        "",
    )
    report.table(
        [
            "execution",
            "steps",
            "idemflow µs/step",
            "store alone µs/step",
            "library overhead µs/step",
            "idemflow / store alone",
        ],
        rows,
    )
    report.add(
        f"A duplicate of a finished 10-step request: {lib.median:.1f} µs per call against "
        f"{alone.median:.1f} µs for the one read it needs (overhead {lib.median - alone.median:.1f} µs).",
        "",
    )
    report.headline(
        "overhead.duplicate", lib.median - alone.median, note="µs per duplicate call over one read"
    )
    from benchmarks.common.plot import lines_figure

    plot = lines_figure(
        out / "overhead.png",
        "Library overhead per step on MemoryStore",
        "steps in the workflow",
        "µs per step (idemflow − store alone)",
        {k: (list(map(float, v[0])), v[1]) for k, v in series.items()},
    )
    report.add(f"![overhead]({plot.name})", "")
    report.write()
    return report
