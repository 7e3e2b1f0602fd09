"""``idemflow runs list`` at scale: latency and backend calls with tens of thousands of requests kept.

A store holds N run records, one request in ten still running (the rest completed). Each
listing is timed after a warm-up listing: once, or, if that took under half a second, the
median of nine. ``--limit 10`` is a first page (``idemflow runs list --limit 10``), ``--limit
10 --after`` the page after 1,000 requests listed (a cursor deep in the list), ``--limit 10
--status running`` a page of running ones. "before 1.0" is ``--limit 10`` as 0.x read it:
every run record, sorted in the process (the same call on a store that offers no paged
listing). "every request" and "running" list all of them. SQLite pages through its index of
run records by start time, newest first; DynamoDB through a paged scan of its runs table or of
its sparse index of open runs, in key order; Azure Tables a paged query in key order. Calls
are the store's own count of backend calls
(:func:`benchmarks.common.counting.backend_calls`).

Records are written straight into the store in batched commits (not by running workflows), so
the sizes stay affordable on the emulators; Azurite takes one commit per record (each request
is its own partition), so it runs the smaller size only.

The second table is what SQLite's index costs a commit (``benchmarks.runs_list.index_ab``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common.backends import open_backend
from benchmarks.common.counting import backend_calls
from benchmarks.common.report import Report
from benchmarks.common.stats import RESULTS, Summary
from benchmarks.runs_list.index_ab import measure as measure_index
from idemflow.admin import RunRecord, RunsPage, runs
from idemflow.client import RunStatus
from idemflow.records import run_ref
from idemflow.serialization import encode
from idemflow.stores._dynamodb_items import transaction
from idemflow.stores.base import Insert, Op, Store
from idemflow.stores.dynamodb import DynamoDBStore

OPEN_EVERY = 10
"""One request in this many is still running."""


def populate(store: Store, count: int) -> None:
    """``count`` run records of workflow ``checkout`` (and a few of ``refund``), in batched commits."""
    per_commit = (
        1
        if not store.capabilities.cross_partition_commit
        else min(100, store.capabilities.max_ops_per_commit)
    )
    ops: list[Op] = []
    for n in range(count):
        status = RunStatus.RUNNING if n % OPEN_EVERY == 0 else RunStatus.COMPLETED
        record = RunRecord("f" * 64, status, started_at=1.8e9 + n)
        if status is RunStatus.COMPLETED:
            record = record.finished(status, 1.8e9 + n + 1, result={"ok": n})
        value = record.to_json()
        ops.append(
            Insert(run_ref("refund" if n % 7 == 0 else "checkout", f"req-{n:07d}"), value, encode(value))
        )
    if isinstance(store, DynamoDBStore):  # moto serves one call at a time: batch writes, no threads
        _batch_write(store, ops)
        return
    batches = [ops[start : start + per_commit] for start in range(0, len(ops), per_commit)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(store.commit, batches))
    store.flush()


def _batch_write(store: DynamoDBStore, ops: list[Op]) -> None:
    """The items the store's own commits would write (the index attribute included), 25 per call."""
    for start in range(0, len(ops), 25):
        items = transaction(ops[start : start + 25], store.table_name)
        requests: dict[str, list[Any]] = {}
        for item in items:
            put = item["Put"]
            requests.setdefault(put["TableName"], []).append({"PutRequest": {"Item": put["Item"]}})
        while requests:
            answer = store.client.batch_write_item(RequestItems=requests)
            requests = answer.get("UnprocessedItems") or {}


class ScanOnly:
    """A store that offers no paged listing: ``runs`` reads every record and sorts them, as 0.x
    always did."""

    def __init__(self, store: Store) -> None:
        self.capabilities = store.capabilities
        self._store = store

    def scan(self, table: str, partition: str | None = None) -> Any:
        return self._store.scan(table, partition)


def _deep(store: Store) -> RunsPage:
    """The page after 1,000 requests listed (half of them, for fewer), 10 at a time (the cursor
    is taken untimed)."""
    return runs(store, limit=10, after=DEEP[id(store)])


DEEP: dict[int, str] = {}

LISTINGS: dict[str, Callable[[Store], RunsPage]] = {
    "--limit 10": lambda store: runs(store, limit=10),
    "--limit 10 --after (1,000 listed)": _deep,
    "--limit 10 --status running": lambda store: runs(store, limit=10, status=RunStatus.RUNNING),
    "--limit 10, before 1.0": lambda store: runs(ScanOnly(store), limit=10),  # type: ignore[arg-type]
    "every request": lambda store: runs(store),
    "running": lambda store: runs(store, status=RunStatus.RUNNING),
}


def measure(store: Store, count: int) -> dict[str, tuple[float, int, int]]:
    """Seconds, backend calls and requests listed, per listing."""
    cursor = runs(store, limit=min(1000, count // 2)).next
    assert cursor is not None
    DEEP[id(store)] = cursor
    measured = {}
    for name, listing in LISTINGS.items():
        listing(store)  # warm: connections, caches
        calls, started = backend_calls(store), time.perf_counter()
        found = listing(store)
        seconds = [time.perf_counter() - started]
        calls = backend_calls(store) - calls
        while seconds[0] < 0.5 and len(seconds) < 9:  # a page: the median of 9 (one is noise here)
            started = time.perf_counter()
            listing(store)
            seconds.append(time.perf_counter() - started)
        measured[name] = (statistics.median(seconds), calls, len(found.runs))
    return measured


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Report:
    parser = argparse.ArgumentParser(prog="python -m benchmarks runs_list", description=__doc__)
    parser.add_argument("--stores", default="sqlite,moto,azurite")
    args = parser.parse_args(argv)
    sizes: dict[str, tuple[int, ...]] = {"sqlite": (200,), "moto": (200,), "azurite": (200,)}
    rounds, per_round = (2, 10) if quick else (16, 100)
    if not quick:
        sizes = {"sqlite": (50_000, 100_000), "moto": (10_000,), "azurite": (10_000,)}
    kinds = [kind for kind in args.stores.split(",") if kind in sizes]
    report = Report(
        "runs_list",
        "idemflow runs list at scale",
        {"sizes": {kind: sizes[kind] for kind in kinds}, "open": f"1 in {OPEN_EVERY}"},
        out,
    )
    report.add(__doc__.split("\n\n", 1)[1].strip(), "")
    rows = []
    for kind in kinds:
        with open_backend(kind) as backend:
            for count in sizes[kind]:
                store = backend.store(backend.tag("runs"))
                began = time.perf_counter()
                populate(store, count)
                filled = time.perf_counter() - began
                for name, (seconds, calls, found) in measure(store, count).items():
                    rows.append(
                        [
                            backend.label,
                            f"{count:,}",
                            name,
                            f"{seconds * 1000:,.0f}" if seconds >= 0.01 else f"{seconds * 1000:.2f}",
                            str(calls),
                            f"{found:,}",
                        ]
                    )
                    report.data.setdefault("cells", []).append(
                        {"store": kind, "runs": count, "listing": name, "seconds": seconds, "calls": calls}
                    )
                    if name in ("running", "--limit 10"):
                        label = "running" if name == "running" else "limit10"
                        report.headline(f"runs_list.{kind}.{count}.{label}_ms", round(seconds * 1000, 2))
                print(f"{kind} {count}: filled in {filled:.0f} s", flush=True)
    report.table(["store", "runs kept", "listing", "ms", "backend calls", "listed"], rows)
    if "sqlite" in kinds:
        with open_backend("sqlite") as backend:
            cost = measure_index(backend.folder, rounds, per_round)
        report.add(
            "",
            f"SQLite commit cost of the index: a 2-step workflow under `run`, {rounds} paired rounds "
            f"of {per_round} requests (median, quartiles); ratios are with the index over without.",
            "",
        )
        report.table(
            ["", "with the index", "without", "ratio (paired)"],
            [
                [
                    "ms per request",
                    _q(cost["with ms"]),
                    _q(cost["without ms"]),
                    _q(cost["seconds"]),
                ],
                [
                    "WAL pages per request",
                    _q(cost["with frames"]),
                    _q(cost["without frames"]),
                    _q(cost["frames"]),
                ],
            ],
        )
        report.headline("runs_list.sqlite.index_commit_ratio", round(cost["seconds"].median, 3))
        report.headline("runs_list.sqlite.index_pages_ratio", round(cost["frames"].median, 3))
    path = report.write()
    print(path.read_text())
    return report


def _q(summary: Summary) -> str:
    return f"{summary.median:.2f} ({summary.q1:.2f}-{summary.q3:.2f})"
