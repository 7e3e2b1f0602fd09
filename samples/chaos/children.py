"""The child processes of the chaos suite: ``python -m samples.chaos serve|worker ...``.

Both run over a faulty store (:class:`~samples.chaos.faults.DyingStore`) that loses commit
answers and injects transient errors and conflicts (``--faults`` names which); a worker also
exits, now and then, right after a commit. ``worker transfer --hold 1,2`` is a transfer worker
holding those versions of the workflow (:mod:`samples.chaos.versions`), as a deploy runs it;
``worker coordination`` runs the timers, children and messages of
:mod:`samples.chaos.coordination_flows`; ``worker payments`` the booking saga of
:mod:`samples.chaos.payments_flows`, calling the provider the driver runs; ``worker reading``
the jobs of :mod:`samples.chaos.reading_flows`, calling the quote provider the driver runs.

>>> args = _child_parser("worker").parse_args(["transfer", "--store", "s", "--queue", "q", "--log", "l"])
>>> [flow.version for flow in _workflows(args)[0] if flow.name == "transfer"]
[1]
"""

from __future__ import annotations

import argparse
import importlib
import random
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from idemflow import Workflow, open_store
from idemflow.testing import Fault
from samples.chaos.faults import IN_PROCESS_FAULTS, DyingStore, random_plan

if TYPE_CHECKING:
    from samples._harness import Sample


def _versions(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def _faults(text: str) -> tuple[Fault, ...]:
    return tuple(Fault(part.strip()) for part in text.split(",") if part.strip())


def _child_parser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m samples.chaos {command}")
    samples = (
        ["survey", "auction"]
        if command == "serve"
        else ["survey", "auction", "transfer", "coordination", "payments", "reading"]
    )
    parser.add_argument("sample", choices=samples)
    parser.add_argument("--store", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--log", type=Path, required=True, help="one byte per injected fault")
    parser.add_argument("--fault-rate", type=float, default=0.08)
    parser.add_argument("--die", type=float, default=0.0, help="chance to exit right after a commit")
    parser.add_argument(
        "--faults",
        type=_faults,
        default=IN_PROCESS_FAULTS,
        help="the faults injected, e.g. transient,conflict (default: lost-answer,transient,conflict)",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--hold", type=_versions, default=[1], help="transfer: the versions held, e.g. 1,2 (default 1)"
    )
    parser.add_argument("--version-wait", type=float, default=30.0, help="as `idemflow worker`")
    parser.add_argument("--relay-every", type=float, default=10.0, help="as `idemflow worker`")
    return parser


def _workflows(args: argparse.Namespace) -> tuple[list[Workflow[Any, Any]], Sequence[str]]:
    """The workflows a worker of ``args.sample`` runs, and the tables they use."""
    if args.sample == "transfer":
        from samples.chaos import versions

        return versions.held(args.hold), versions.TABLES
    if args.sample == "coordination":
        from samples.chaos import coordination_flows

        return list(coordination_flows.WORKFLOWS), coordination_flows.TABLES
    if args.sample == "payments":  # the provider's URL comes in the environment (CHAOS_PAYMENTS_URL)
        from samples.chaos import payments_flows

        return list(payments_flows.WORKFLOWS), payments_flows.TABLES
    if args.sample == "reading":  # the quote provider's URL comes in the environment (CHAOS_READING_URL)
        from samples.chaos import reading_flows

        return list(reading_flows.WORKFLOWS), reading_flows.TABLES
    sample = importlib.import_module(f"samples.{args.sample}.workflows")
    return list(sample.WORKFLOWS), sample.TABLES


def _faulty(args: argparse.Namespace, tables: Sequence[str]) -> DyingStore:
    store = open_store(args.store)
    store.create_tables(*tables)
    plan = random_plan(random.Random(), args.fault_rate, args.faults)
    return DyingStore(store, plan, args.die, args.log)


def serve_main(argv: Sequence[str]) -> int:
    """``python -m samples.chaos serve SAMPLE --store URL --queue URL --log PATH --port P``:
    the sample's API (asynchronous) over a faulty store."""
    from idemflow.worker import open_queue
    from samples._api import serve

    args = _child_parser("serve").parse_args(argv)
    sample: Sample[Any] = importlib.import_module(f"samples.{args.sample}.cli").SAMPLE
    serve(sample.app(_faulty(args, sample.tables), open_queue(args.queue)), args.host, args.port)
    return 0


def worker_main(argv: Sequence[str]) -> int:
    """``python -m samples.chaos worker SAMPLE --store URL --queue URL --log PATH --die P
    [--hold 1,2 --version-wait S --relay-every S]``: a worker over a faulty store that now and
    then exits right after a commit."""
    from idemflow.worker import Worker, open_queue

    args = _child_parser("worker").parse_args(argv)
    flows, tables = _workflows(args)
    store = _faulty(args, tables)
    queue = open_queue(args.queue)
    Worker(
        flows,
        store=store,
        queue=queue,
        concurrency=2,
        wait=0.1,
        max_deliveries=1000,
        version_wait=args.version_wait,
        relay_every=args.relay_every,
    ).run()
    return 0
