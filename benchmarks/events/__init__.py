"""What publishing from a running request costs, and what a reader pays to wait for it.

1. **Per write** — a workflow of ``--writes`` ``set_event`` steps, one of as many
   ``write_stream`` steps and, beside them, one of as many ``atomic`` steps each writing one row
   (the cheapest step that writes): store calls per step (the store's own count of its backend
   calls) and wall time per step, median of ``--rounds`` rounds, the three run alternately.
2. **Waiting** — a reader calls ``get_event`` (or reads a stream) on a store of its own while
   the request, on another, sets it ``--delay`` seconds later: how many reads the reader made,
   and how long after the commit it returned (its pause grows from 10 ms to ``poll``), for the
   default ``poll`` (1 s) and ``poll=0.1``.
3. **Reading a stream** — calls to read a closed stream of ``--stream`` values from its start.

On SQLite (WAL, synchronous=FULL), DynamoDB Local and Azurite. Numbers are printed and written to
``events.md`` / ``events.json``; none is asserted.

Run: ``python -m benchmarks events [--stores sqlite,dynamodb-local,azurite] [--quick]``.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.backends import LABELS, Backend, open_backend
from benchmarks.common.report import Report
from benchmarks.common.stats import RESULTS
from idemflow import (
    Idem,
    Tx,
    atomic,
    close_stream,
    effect,
    open_store,
    run,
    set_event,
    workflow,
    write_stream,
)
from idemflow.client import get_event, read_stream
from idemflow.stores import Store

KINDS = ("sqlite", "dynamodb-local", "azurite")
VARIANTS = ("set_event", "write_stream", "atomic (one row)")


def _one_row(i: int) -> Callable[[Tx], None]:
    def body(tx: Tx) -> None:
        tx.put(f"k{i}", i)

    return body


@workflow("bench-events")
def events(n: int, variant: str) -> Generator[Idem[Any], Any, int]:
    for i in range(n):
        if variant == "set_event":
            yield set_event(f"e{i % 4}", {"i": i, "text": "x" * 40})
        elif variant == "write_stream":
            yield write_stream("s", {"i": i, "text": "x" * 40})
        else:
            yield atomic("items", "p", _one_row(i), name="one row")
    return n


def per_write(store: Store, n: int, rounds: int, tag: str) -> dict[str, dict[str, float]]:
    """Calls and seconds per step of each variant, the variants run alternately round by round."""
    calls: dict[str, list[float]] = {v: [] for v in VARIANTS}
    seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
    run(events(n, "atomic (one row)"), request_id=f"{tag}-warm", store=store)  # connections, tables
    for r in range(rounds):
        for variant in VARIANTS[r % 3 :] + VARIANTS[: r % 3]:
            before, began = store.round_trips, time.perf_counter()
            run(events(n, variant), request_id=f"{tag}-{variant}-{r}", store=store)
            store.flush()
            seconds[variant].append((time.perf_counter() - began) / n)
            calls[variant].append((store.round_trips - before) / n)
    return {
        v: {"calls per step": statistics.median(calls[v]), "ms per step": statistics.median(seconds[v]) * 1e3}
        for v in VARIANTS
    }


GATES: dict[str, threading.Event] = {}
"""Per request: set when its write may go ahead."""
COMMITTED: dict[str, float] = {}
"""Per request: ``time.monotonic()`` right after its write committed."""


@workflow("bench-wait")
def later(rid: str, stream: bool) -> Generator[Idem[Any], Any, None]:
    yield effect(lambda _key: GATES[rid].wait(60) and None, name="wait")
    if stream:
        yield write_stream("s", "value")
        yield close_stream("s")
    else:
        yield set_event("ready", True)
    yield effect(lambda _key: COMMITTED.setdefault(rid, time.monotonic()) and None, name="committed")


def _wait_once(
    writer: Store, reader: Store, rid: str, delay: float, poll: float, stream: bool
) -> tuple[int, float]:
    """Reads one waiting reader made, and seconds from the write's commit to its return."""
    GATES[rid] = threading.Event()
    COMMITTED.pop(rid, None)  # a backend's tags start again at 0: the same ids on the next one
    producer = threading.Thread(
        target=run, args=(later(rid, stream),), kwargs={"request_id": rid, "store": writer}
    )
    producer.start()
    before = reader.round_trips
    timer = threading.Timer(delay, GATES[rid].set)
    timer.start()
    if stream:
        assert list(read_stream(reader, "bench-wait", rid, "s", timeout=60, poll=poll)) == ["value"]
    else:
        assert get_event(reader, "bench-wait", rid, "ready", timeout=60, poll=poll) is True
    returned = time.monotonic()
    producer.join()
    return reader.round_trips - before, returned - COMMITTED[rid]


def waiting(
    writer: Store, reader: Store, delay: float, poll: float, samples: int, tag: str, stream: bool
) -> dict[str, float]:
    """Reads a waiting reader made and how late it returned after the commit it waited for."""
    found = [_wait_once(writer, reader, f"{tag}-wait-{n}", delay, poll, stream) for n in range(samples)]
    return {
        "reads": statistics.median(reads for reads, _ in found),
        "ms after the commit": statistics.median(lag for _, lag in found) * 1e3,
    }


def stream_reads(store: Store, reader: Store, length: int, tag: str) -> float:
    """Calls to read a closed stream of ``length`` values from its start."""

    @workflow("bench-stream")
    def produce(n: int) -> Generator[Idem[Any], Any, None]:
        for i in range(n):
            yield write_stream("s", i)
        yield close_stream("s")

    run(produce(length), request_id=f"{tag}-stream", store=store)
    before = reader.round_trips
    assert list(read_stream(reader, "bench-stream", f"{tag}-stream", "s")) == list(range(length))
    return float(reader.round_trips - before)


def measure(backend: Backend, args: argparse.Namespace) -> dict[str, Any]:
    tag = backend.tag("ev")
    store = backend.store(tag, "items")
    reader = open_store(backend.url(tag))  # a reader of its own: its calls counted alone
    try:
        found: dict[str, Any] = {"per write": per_write(store, args.writes, args.rounds, tag)}
        for poll in (1.0, 0.1):
            for stream in (False, True):
                name = f"{'read_stream' if stream else 'get_event'} waiting {args.delay:g} s, poll {poll:g} s"
                found[name] = waiting(
                    store, reader, args.delay, poll, args.samples, f"{tag}-{poll}-{stream}", stream
                )
        found["stream read"] = {"values": args.stream, "calls": stream_reads(store, reader, args.stream, tag)}
        return found
    finally:
        reader.close()


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Report:
    parser = argparse.ArgumentParser(prog="python -m benchmarks events", description=__doc__)
    parser.add_argument("--stores", default=",".join(KINDS))
    parser.add_argument("--writes", type=int, default=5 if quick else 20, help="steps per workflow")
    parser.add_argument("--rounds", type=int, default=2 if quick else 7)
    parser.add_argument("--delay", type=float, default=0.3 if quick else 2.0, help="seconds before the write")
    parser.add_argument("--samples", type=int, default=1 if quick else 3, help="waits per setting")
    parser.add_argument("--stream", type=int, default=30 if quick else 100, help="values of the read stream")
    parser.add_argument("--out", type=Path, default=out)
    args = parser.parse_args(argv)
    stores = [kind for kind in args.stores.split(",") if kind in KINDS]
    params = {k: getattr(args, k) for k in ("writes", "rounds", "delay", "samples", "stream")}
    report = Report(
        "events",
        "Events and streams: cost per write, and of a reader waiting",
        {"stores": stores, **params},
        args.out,
    )
    results: dict[str, Any] = {}
    for kind in stores:
        print(f"  events {kind}", flush=True)
        with open_backend(kind) as backend:
            results[kind] = measure(backend, args)
        _print(kind, results[kind])
    _write(report, results)
    return report


def _print(kind: str, found: dict[str, Any]) -> None:
    for variant, cost in found["per write"].items():
        calls, ms = cost["calls per step"], cost["ms per step"]
        print(f"    {kind:15} {variant:18} {calls:.2f} calls, {ms:.2f} ms per step")
    for name, cost in found.items():
        if name.startswith(("get_event", "read_stream")):
            reads, lag = cost["reads"], cost["ms after the commit"]
            print(f"    {kind:15} {name}: {reads:.0f} reads, returned {lag:.0f} ms after the commit")
    read = found["stream read"]
    print(f"    {kind:15} a closed stream of {read['values']} values read in {read['calls']:.0f} calls")


def _write(report: Report, results: dict[str, Any]) -> None:
    report.add("## Cost per write", "", "Store calls and wall time per step (median of the rounds).", "")
    report.table(
        ["store", *(f"{v}: calls" for v in VARIANTS), *(f"{v}: ms" for v in VARIANTS)],
        [
            [LABELS[kind], *(f"{found['per write'][v]['calls per step']:.2f}" for v in VARIANTS),
             *(f"{found['per write'][v]['ms per step']:.2f}" for v in VARIANTS)]
            for kind, found in results.items()
        ],
    )  # fmt: skip
    report.add(
        "## A reader waiting", "", "Reads the reader made, and how long after the commit it returned.", ""
    )
    rows = []
    for kind, found in results.items():
        for name, cost in found.items():
            if name.startswith(("get_event", "read_stream")):
                rows.append(
                    [LABELS[kind], name, f"{cost['reads']:.0f}", f"{cost['ms after the commit']:.0f}"]
                )
        report.headline(f"events.{kind}.set_event_calls", found["per write"]["set_event"]["calls per step"])
        report.headline(f"events.{kind}.set_event_ms", found["per write"]["set_event"]["ms per step"])
    report.table(["store", "reader", "reads", "ms after the commit"], rows)
    report.add("## Reading a stream", "")
    report.table(
        ["store", "values", "calls"],
        [
            [LABELS[k], str(f["stream read"]["values"]), f"{f['stream read']['calls']:.0f}"]
            for k, f in results.items()
        ],
    )
    report.data["results"] = results
    report.write()
