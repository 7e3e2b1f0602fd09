"""``all_of``: three outside calls of ``--call`` seconds each (200 ms), side by side or in a row.

One request is a workflow making three calls to a slow service, each a ``time.sleep`` of
``--call`` seconds (an ``async def`` awaiting ``asyncio.sleep`` under ``arun``): with
``all_of`` the three are made at once, so the request should take about one call, not three.
Measured on SQLite (``SqliteStore``, ``synchronous=FULL``), wall time of one request:

- **run**: ``run(...)`` in the caller, all_of against the same three calls one after another;
- **worker**: the request submitted (its checkpoint first), then one delivery handled by a
  :class:`~idemflow.worker.Worker` in this process: ``worker.handle(message)``, timed;
- **arun**: ``arun(...)`` on an event loop, the calls coroutines.

Variants alternate within each round (the order rotating), ``--rounds`` rounds; each cell is
the median with its interquartile range, and the headline ratio is all_of / one call.

Run: ``python -m benchmarks together [--rounds 7] [--call 0.2] [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
import time
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.report import Report
from benchmarks.common.stats import RESULTS, summarize
from idemflow import all_of, arun, checkpoint, effect, run, workflow
from idemflow.client import submit
from idemflow.stores import SqliteStore
from idemflow.worker import SqliteQueue, Worker

_IDS = itertools.count()


def flows(call: float) -> dict[str, Any]:
    """The four workflows: all_of or in a row, blocking calls or coroutines."""

    def slow(name: str) -> Any:
        def made(key: str) -> str:
            time.sleep(call)
            return name

        made.__qualname__ = name
        return made

    def aslow(name: str) -> Any:
        async def made(key: str) -> str:
            await asyncio.sleep(call)
            return name

        made.__qualname__ = name
        return made

    @workflow("bench-together")
    def together(n: int, coroutines: bool = False) -> Generator[Any, Any, Any]:
        yield checkpoint()
        make = aslow if coroutines else slow
        return (yield all_of(*(effect(make(name)) for name in "abc")))

    @workflow("bench-in-a-row")
    def in_a_row(n: int, coroutines: bool = False) -> Generator[Any, Any, Any]:
        yield checkpoint()
        make = aslow if coroutines else slow
        got = []
        for name in "abc":
            got.append((yield effect(make(name))))
        return got

    return {"all_of": together, "in a row": in_a_row}


def timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Report:
    parser = argparse.ArgumentParser(prog="python -m benchmarks together", description=__doc__)
    parser.add_argument("--rounds", type=int, default=2 if quick else 7)
    parser.add_argument("--call", type=float, default=0.05 if quick else 0.2, help="seconds per call")
    parser.add_argument("--out", type=Path, default=out, help="results folder")
    args = parser.parse_args(argv)
    made = flows(args.call)
    params = {"rounds": args.rounds, "seconds per call": args.call, "calls per request": 3, "store": "sqlite"}
    report = Report("together", "all_of: three outside calls side by side", params, args.out)
    seconds: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        store = SqliteStore(Path(folder) / "store.sqlite3")
        queue = SqliteQueue(Path(folder) / "queue.sqlite3")
        worker = Worker(list(made.values()), store=store, queue=queue, relay_every=None)

        def under_run(name: str) -> float:
            return timed(lambda: run(made[name](next(_IDS)), request_id=f"r{next(_IDS)}", store=store))

        def under_worker(name: str) -> float:
            submit(made[name](next(_IDS)), request_id=f"w{next(_IDS)}", store=store, queue=queue)
            [message] = queue.receive()
            return timed(lambda: worker.handle(message))

        def under_arun(name: str) -> float:
            m = made[name](next(_IDS), True)
            return timed(lambda: asyncio.run(arun(m, request_id=f"a{next(_IDS)}", store=store)))

        ways = {"run": under_run, "worker": under_worker, "arun": under_arun}
        cells = [(way, name) for way in ways for name in made]
        for r in range(args.rounds):
            for way, name in cells[r % len(cells) :] + cells[: r % len(cells)]:
                seconds.setdefault((way, name), []).append(ways[way](name))
        store.close()
    rows = []
    for way in ways:
        together = summarize(f"{way} all_of", seconds[way, "all_of"])
        in_a_row = summarize(f"{way} in a row", seconds[way, "in a row"])
        per_call = together.median / args.call
        rows.append([way, _ms(together), _ms(in_a_row), f"{per_call:.2f}"])
        report.headline(f"together.sqlite.{way}.all_of_ms", round(together.median * 1e3, 1))
        report.headline(
            f"together.sqlite.{way}.all_of_over_one_call",
            round(per_call, 2),
            note=f"three {args.call * 1e3:.0f} ms calls: 1.0 would be perfect overlap, 3.0 none",
        )
        print(f"  together {way}: all_of {_ms(together)}, in a row {_ms(in_a_row)}", flush=True)
    report.add(
        f"Wall time of one request making three {args.call * 1e3:.0f} ms calls (median, IQR in "
        "parentheses), and all_of's time over one call's.",
        "",
    )
    report.table(["under", "all_of (ms)", "in a row (ms)", "all_of / one call"], rows)
    report.data["samples"] = {f"{way} {name}": values for (way, name), values in seconds.items()}
    report.write()
    return report


def _ms(summary: Any) -> str:
    return f"{summary.median * 1e3:.0f} ({summary.q1 * 1e3:.0f}-{summary.q3 * 1e3:.0f})"


__all__ = ["flows", "main"]
