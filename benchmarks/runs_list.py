"""``idemflow runs list`` at scale: latency and backend calls with 10k and 100k requests kept.

A store holds N run records, one request in ten still running (the rest
completed). Three listings are timed, each once after a warm-up listing:
every request (a read of the whole run-record table on every store), the
running ones (the index of open runs where the store keeps one: DynamoDB's
sparse global secondary index, SQLite's query on the record's status; Azure
Tables has no secondary index and reads the whole table), and the running
ones of one workflow (a DynamoDB ``Query`` of the index). Calls are the
store's own count of backend calls (:func:`benchmarks._counting.backend_calls`).

Records are written straight into the store in batched commits (not by
running workflows), so the sizes stay affordable on the emulators; Azurite
takes one commit per record (each request is its own partition), so it runs
the smaller size only.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks._backends import open_backend
from benchmarks._counting import backend_calls
from benchmarks._report import Report
from benchmarks._stats import RESULTS
from idemflow.operations import runs
from idemflow.records import RunRecord, RunStatus, run_ref
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


LISTINGS: dict[str, Callable[[Store], list[Any]]] = {
    "every request": lambda store: runs(store),
    "running": lambda store: runs(store, status=RunStatus.RUNNING),
    "running, one workflow": lambda store: runs(store, workflow="checkout", status=RunStatus.RUNNING),
}


def measure(store: Store) -> dict[str, tuple[float, int, int]]:
    """Seconds, backend calls and requests listed, per listing."""
    measured = {}
    for name, listing in LISTINGS.items():
        listing(store)  # warm: connections, caches
        calls, started = backend_calls(store), time.perf_counter()
        found = listing(store)
        measured[name] = (time.perf_counter() - started, backend_calls(store) - calls, len(found))
    return measured


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Report:
    parser = argparse.ArgumentParser(prog="python -m benchmarks runs_list", description=__doc__)
    parser.add_argument("--stores", default="sqlite,moto,azurite")
    args = parser.parse_args(argv)
    sizes: dict[str, tuple[int, ...]] = {"sqlite": (200,), "moto": (200,), "azurite": (200,)}
    if not quick:
        sizes = {"sqlite": (10_000, 100_000), "moto": (10_000, 100_000), "azurite": (10_000,)}
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
                for name, (seconds, calls, found) in measure(store).items():
                    rows.append(
                        [
                            backend.label,
                            f"{count:,}",
                            name,
                            f"{seconds * 1000:,.0f}",
                            str(calls),
                            f"{found:,}",
                        ]
                    )
                    report.data.setdefault("cells", []).append(
                        {"store": kind, "runs": count, "listing": name, "seconds": seconds, "calls": calls}
                    )
                    if name == "running":
                        report.headline(f"runs_list.{kind}.{count}.running_ms", round(seconds * 1000, 1))
                print(f"{kind} {count}: filled in {filled:.0f} s", flush=True)
    report.table(["store", "runs kept", "listing", "ms", "backend calls", "listed"], rows)
    path = report.write()
    print(path.read_text())
    return report


if __name__ == "__main__":
    main()
