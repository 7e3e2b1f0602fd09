"""``idemflow check-deploy`` over many open requests, and what a fork costs.

A store holds N requests still running, each at its checkpoint after two steps (an atomic step
in a partition of its own, then an outside call whose memo sits beside its run record), with its
third step still to run. ``check-deploy`` replays each on the same code (every one passes) and
on code whose first step was renamed (every one is listed), a page of 200 at a time. Timed
once each, with the store's own count of backend calls. The requests are written straight into
the store: one request is submitted, and its rows are copied for each other request id in
batched commits, so the sizes stay affordable on the emulators.

A fork is a failed 4-step request (two atomic steps on two tables, an outside call, a failing
atomic step) forked from its failing step: its backend calls, by the store's count, and its
time (median of 20).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common.backends import open_backend
from benchmarks.common.counting import backend_calls
from benchmarks.common.report import Report
from benchmarks.common.stats import RESULTS
from idemflow import Idem, StepRetry, Tx, atomic, checkpoint, effect, workflow
from idemflow.admin import check_deploy, fork
from idemflow.client import RunStatus, status, submit
from idemflow.keys import RUNS_TABLE
from idemflow.serialization import encode
from idemflow.stores.base import Op, Put, RowRef, Store
from idemflow.worker import MemoryQueue, Worker

TEMPLATE = "tmpl0000000"
"""The submitted request whose rows every other request copies (same length as the others' ids)."""


def pay(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    yield atomic("tablea", req["p"], lambda tx: tx.increment("held"), name="reserve")
    yield effect(lambda key: key[:8], name="charge")
    yield checkpoint()
    yield atomic("tablea", req["p"], lambda tx: tx.increment("sent"), name="send")


def renamed(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    yield atomic("tablea", req["p"], lambda tx: tx.increment("held"), name="hold")


SAME = [workflow("bench-pay")(pay)]
CHANGED = [workflow("bench-pay")(renamed)]


def populate(store: Store, count: int) -> None:
    """``count`` running requests: one submitted, its rows copied for every other request id."""
    submit(SAME[0]({"p": TEMPLATE}), request_id=TEMPLATE, store=store, queue=MemoryQueue())
    rows = [(RUNS_TABLE, part, key, row) for part, key, row in store.scan(RUNS_TABLE, TEMPLATE)]
    rows += [
        ("tablea", part, key, row) for part, key, row in store.scan("tablea", TEMPLATE) if key[:1] == "m"
    ]
    ops: list[tuple[str, Op]] = []
    for n in range(1, count):
        rid = f"req{n:08d}"
        for table, part, key, row in rows:
            value = _swapped(row.value, rid)
            ref = RowRef(table, part.replace(TEMPLATE, rid), key.replace(TEMPLATE, rid))
            ops.append((ref.partition, Put(ref, value, encode(value, envelope=3))))
    single = not store.capabilities.cross_partition_commit
    per_commit = 1 if single else min(25, store.capabilities.max_ops_per_commit)
    batches = [[op for _, op in ops[start : start + per_commit]] for start in range(0, len(ops), per_commit)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(store.commit, batches))
    store.flush()


def _swapped(value: Any, rid: str) -> Any:
    if isinstance(value, str):
        return value.replace(TEMPLATE, rid)
    if isinstance(value, list):
        return [_swapped(item, rid) for item in value]
    if isinstance(value, dict):
        return {key: _swapped(item, rid) for key, item in value.items()}
    return value


def timed_check(store: Store, flows: list[Any]) -> tuple[float, int, int, int]:
    """Seconds, backend calls, requests checked and problems found."""
    calls, started = backend_calls(store), time.perf_counter()
    found = check_deploy(store, flows)
    return time.perf_counter() - started, backend_calls(store) - calls, found.checked, len(found.problems)


BUGGY: set[str] = set()


def _ship(p: str) -> Any:
    def body(tx: Tx) -> str:
        if p in BUGGY:
            raise RuntimeError("bug")
        return "shipped"

    return body


def order(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    yield atomic("tablea", req["p"], lambda tx: tx.increment("held"), name="reserve")
    yield atomic("tableb", req["p"], lambda tx: tx.increment("owed"), name="bill")
    yield checkpoint()
    yield effect(lambda key: key[:8], name="charge")
    yield atomic("tablea", req["p"], _ship(req["p"]), name="ship")


ORDER = [workflow("bench-order", retry=StepRetry(initial=0.001, maximum_attempts=1))(order)]


def fork_cost(store: Store, rounds: int) -> tuple[int, float]:
    """Backend calls of one fork (the same for every one) and its median seconds."""
    queue = MemoryQueue()
    calls: list[int] = []
    seconds: list[float] = []
    for n in range(rounds):
        p = f"f{n:06d}"
        BUGGY.add(p)
        submit(ORDER[0]({"p": p}), request_id=p, store=store, queue=queue)
        Worker(ORDER, store=store, queue=queue).run(idle_timeout=0)
        assert status(store, "bench-order", p).status is RunStatus.FAILED
        before, started = backend_calls(store), time.perf_counter()
        fork(store, ORDER, "bench-order", p, from_step=4, new_request_id=p + "-fork", queue=queue)
        seconds.append(time.perf_counter() - started)
        calls.append(backend_calls(store) - before)
    return statistics.median(calls), statistics.median(seconds)  # type: ignore[return-value]


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Report:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.deploy_check", description=__doc__)
    parser.add_argument("--stores", default="sqlite,dynamodb-local,azurite")
    parser.add_argument("--requests", type=int, default=200 if quick else 10_000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=out)
    args = parser.parse_args(argv)
    quick = quick or args.quick
    count = 200 if quick else args.requests
    kinds = args.stores.split(",")
    report = Report(
        "deploy_check", "check-deploy over many open requests; a fork's cost", {"requests": count}, args.out
    )
    report.add(__doc__.split("\n\n", 1)[1].strip(), "")
    rows, forks = [], []
    for kind in kinds:
        with open_backend(kind) as backend:
            store = backend.store(backend.tag("deploy"), "tablea", "tableb")
            began = time.perf_counter()
            populate(store, count)
            print(f"{kind}: {count} requests written in {time.perf_counter() - began:.0f} s", flush=True)
            for label, flows in (("same code", SAME), ("first step renamed", CHANGED)):
                seconds, calls, checked, problems = timed_check(store, flows)
                rows.append(
                    [
                        backend.label,
                        f"{count:,}",
                        label,
                        f"{seconds:.2f}",
                        f"{calls:,}",
                        f"{checked:,}",
                        f"{problems:,}",
                    ]
                )
                key = "same" if flows is SAME else "changed"
                report.headline(f"deploy_check.{kind}.{count}.{key}_s", round(seconds, 3))
                report.headline(f"deploy_check.{kind}.{count}.{key}_calls", calls)
            calls_per_fork, fork_seconds = fork_cost(store, 3 if quick else 20)
            forks.append([backend.label, str(calls_per_fork), f"{fork_seconds * 1000:.1f}"])
            report.headline(f"deploy_check.{kind}.fork_calls", calls_per_fork)
    report.table(["store", "open requests", "code", "seconds", "backend calls", "replayed", "listed"], rows)
    report.add("A fork of a failed 4-step request from its failing step:", "")
    report.table(["store", "backend calls", "ms (median)"], forks)
    report.write()
    return report
