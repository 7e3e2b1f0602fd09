"""What a concurrency or rate limit costs, and how close to its limit a worker pool runs.

1. **Calls and latency per request** under ``run``: a one-step workflow, one caller, without a
   limit, with ``concurrency=4``, with a rate far above the load (``Rate(10_000)``) and with both;
   store calls counted by the store (``round_trips``), latency as the median of interleaved
   rounds. Taking a limit is one ``read_many`` and one commit; giving a slot back one read and
   one commit; a rate gives nothing back. The same for a one-effect workflow whose effect names
   a limit group (``effect(..., group=)``) against the same effect with none.
2. **Throughput at the limit**: ``--requests`` submitted requests whose one effect takes
   ``--inside`` seconds, drained by one in-process :class:`~idemflow.worker.Worker` of
   ``--threads`` threads, with no limit, with ``concurrency=N`` and with the effect in a group
   of N. The ideal at the limit is ``N / inside`` requests a second; the ratio says how much of
   it the waiting (a delayed continuation per full look, ``SLOT_POLL`` apart) leaves unused.

On SQLite (+ SqliteQueue) and DynamoDB Local (+ SQS on moto) by default.
Run: ``python -m benchmarks limits [--stores sqlite,dynamodb-local] [--quick]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.backends import LABELS, Backend, open_backend
from benchmarks.common.report import Report
from benchmarks.common.stats import RESULTS
from idemflow import Concurrency, LimitGroup, Rate, atomic, checkpoint, effect, run, workflow
from idemflow.client import submit
from idemflow.worker import Worker

STORES = ("sqlite", "dynamodb-local")
VARIANTS = ("no limit", "concurrency=4", "rate", "concurrency=4 + rate")
EFFECT_VARIANTS = ("effect, no group", "effect, group concurrency=4", "effect, group rate")


def _flows(prefix: str) -> dict[str, Any]:
    """One workflow per variant, each a single step, named apart so their limits are apart."""
    options: dict[str, tuple[Concurrency | None, Rate | None]] = {
        "no limit": (None, None),
        "concurrency=4": (Concurrency(4), None),
        "rate": (None, Rate(10_000)),
        "concurrency=4 + rate": (Concurrency(4), Rate(10_000)),
    }
    flows: dict[str, Any] = {}
    for n, (variant, (slots, rate)) in enumerate(options.items()):

        @workflow(f"{prefix}{n}", concurrency=slots, rate=rate)
        def flow(i: int) -> Generator[Any, Any, int]:
            yield atomic("items", f"p{i % 64}", lambda tx: tx.increment("n"))
            return i

        flows[variant] = flow
    return flows


def _effect_flows(prefix: str) -> dict[str, Any]:
    """One workflow per effect variant: a single effect, in no group or a group of its own."""
    groups = {
        "effect, no group": None,
        "effect, group concurrency=4": LimitGroup(f"{prefix}slots", concurrency=4),
        "effect, group rate": LimitGroup(f"{prefix}rate", rate=Rate(10_000)),
    }
    flows: dict[str, Any] = {}
    for n, (variant, group) in enumerate(groups.items()):

        @workflow(f"{prefix}e{n}")
        def flow(i: int, group: LimitGroup | None = group) -> Generator[Any, Any, int]:
            yield effect(lambda key: None, group=group, name="call")
            return i

        flows[variant] = flow
    return flows


def _per_request(backend: Backend, rounds: int, per_round: int) -> dict[str, dict[str, float]]:
    store = backend.store(backend.tag("lcalls"), "items")
    flows = {**_flows("calls"), **_effect_flows("calls")}
    variants = VARIANTS + EFFECT_VARIANTS
    timings: dict[str, list[float]] = {variant: [] for variant in variants}
    calls: dict[str, list[int]] = {variant: [] for variant in variants}
    counter = 0
    for _ in range(rounds):
        for variant in variants:
            for _ in range(per_round):
                counter += 1
                before, started = store.round_trips, time.perf_counter()
                run(flows[variant](counter), request_id=f"r{counter}", store=store)
                timings[variant].append(time.perf_counter() - started)
                store.flush()
                calls[variant].append(store.round_trips - before)
    return {
        variant: {
            "calls": statistics.median(calls[variant]),
            "ms": statistics.median(timings[variant]) * 1e3,
        }
        for variant in variants
    }


def _drain(
    backend: Backend,
    slots: int | None,
    requests: int,
    inside: float,
    threads: int,
    *,
    on_effect: bool = False,
) -> float:
    """Requests a second a worker of ``threads`` threads finishes, under ``slots`` (on the
    workflow, or on its effect as a group) or no limit."""
    tag = backend.tag("ldrain")
    store, queue = backend.store(tag, "items"), backend.queue(tag)
    group = LimitGroup(f"g{tag}", concurrency=slots) if on_effect and slots is not None else None
    limit = None if slots is None or on_effect else Concurrency(slots)

    def call(key: str) -> None:
        time.sleep(inside)

    @workflow(f"drain{tag}", concurrency=limit)
    def drain(i: int) -> Generator[Any, Any, int]:
        yield checkpoint()  # every variant runs on the worker (a limited one would anyway)
        yield effect(call, group=group)
        return i

    for i in range(requests):
        submit(drain(i), request_id=f"d{i}", store=store, queue=queue)
    worker = Worker([drain], store=store, queue=queue, concurrency=threads, wait=0.05, relay_every=None)
    started = time.perf_counter()
    stats = worker.run(idle_timeout=1.0)
    elapsed = time.perf_counter() - started - 1.0  # less the idle second that ends the run
    if stats.completed != requests:
        raise RuntimeError(f"{stats.completed} of {requests} completed: {stats}")
    return requests / elapsed


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Report:
    parser = argparse.ArgumentParser(prog="python -m benchmarks limits", description=__doc__)
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--rounds", type=int, default=2 if quick else 5)
    parser.add_argument("--per-round", type=int, default=5 if quick else 40)
    parser.add_argument("--requests", type=int, default=20 if quick else 200)
    parser.add_argument("--inside", type=float, default=0.05, help="seconds each request's effect takes")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--out", type=Path, default=out)
    args = parser.parse_args(argv)
    stores = [kind for kind in args.stores.split(",") if kind in LABELS]
    params = {k: v for k, v in vars(args).items() if k != "out"}
    report = Report(
        "limits", "Flow control: what a limit costs per request, and throughput at it", params, args.out
    )
    costs: dict[str, dict[str, dict[str, float]]] = {}
    drains: dict[str, dict[str, float]] = {}
    for kind in stores:
        with open_backend(kind) as backend:
            print(f"  limits {kind}: calls and latency", flush=True)
            costs[kind] = _per_request(backend, args.rounds, args.per_round)
            print(f"  limits {kind}: throughput", flush=True)
            drains[kind] = {
                "no limit": _drain(backend, None, args.requests, args.inside, args.threads),
                f"concurrency={args.slots}": _drain(
                    backend, args.slots, args.requests, args.inside, args.threads
                ),
                f"effect group of {args.slots}": _drain(
                    backend, args.slots, args.requests, args.inside, args.threads, on_effect=True
                ),
            }
    report.add("## Calls and latency per request (`run`, one caller, one step)", "")
    for kind in stores:
        report.add(f"### {LABELS[kind]}", "")
        base = costs[kind]["no limit"]
        rows = [
            [
                variant,
                f"{found['calls']:.0f}",
                f"{found['calls'] - base['calls']:+.0f}",
                f"{found['ms']:.2f}",
                f"{found['ms'] - base['ms']:+.2f}",
            ]
            for variant, found in costs[kind].items()
        ]
        columns = ["variant", "store calls", "extra calls", "median ms", "extra ms"]
        report.table(columns, rows[: len(VARIANTS)])
        report.add("", "One effect, in no group or a limit group held around the call:", "")
        plain = costs[kind]["effect, no group"]
        rows = [
            [
                variant,
                f"{costs[kind][variant]['calls']:.0f}",
                f"{costs[kind][variant]['calls'] - plain['calls']:+.0f}",
                f"{costs[kind][variant]['ms']:.2f}",
                f"{costs[kind][variant]['ms'] - plain['ms']:+.2f}",
            ]
            for variant in EFFECT_VARIANTS
        ]
        report.table(["variant", "store calls", "extra calls", "median ms", "extra ms"], rows)
        report.headline(
            f"{kind}: extra calls per call, effect group",
            costs[kind]["effect, group concurrency=4"]["calls"] - plain["calls"],
        )
        report.headline(
            f"{kind}: extra calls per request, concurrency limit",
            costs[kind]["concurrency=4"]["calls"] - base["calls"],
        )
        report.headline(
            f"{kind}: extra ms per request, concurrency limit",
            round(costs[kind]["concurrency=4"]["ms"] - base["ms"], 2),
        )
    ideal = args.slots / args.inside
    report.add(
        f"## Throughput: {args.requests} requests, {args.threads} worker threads, "
        f"{args.inside * 1e3:.0f} ms inside each",
        "",
        f"At `concurrency={args.slots}` the ideal is {ideal:.0f} requests/s "
        f"({args.slots} / {args.inside:g} s).",
        "",
    )
    rows = []
    for kind in stores:
        free = drains[kind]["no limit"]
        for variant, rate in drains[kind].items():
            limited = variant != "no limit"
            share = f"{rate / ideal:.0%} of ideal" if limited else ""
            rows.append([LABELS[kind], variant, f"{rate:.1f}", share, f"{rate / free:.0%}"])
        report.headline(
            f"{kind}: throughput at concurrency={args.slots}, share of ideal",
            round(drains[kind][f"concurrency={args.slots}"] / ideal, 2),
        )
        report.headline(
            f"{kind}: throughput at an effect group of {args.slots}, share of ideal",
            round(drains[kind][f"effect group of {args.slots}"] / ideal, 2),
        )
    report.table(["backend", "variant", "requests/s", "at the limit", "of no limit"], rows)
    report.data["costs"], report.data["throughput"] = costs, drains
    path = report.write()
    print(path.read_text(), flush=True)
    return report
