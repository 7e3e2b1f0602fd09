"""What one request costs, side by side, on DynamoDB Local, Azurite and SQLite: latency, client CPU,
backend calls (on the caller's path and in all), DynamoDB request units and dollars, Azure
billable transactions — for the hand-written code, the minimal exactly-once protocol, idemflow,
and the peers (AWS Lambda Powertools' ``idempotent_function`` on DynamoDB, DBOS Transact on
SQLite and on PostgreSQL).

Why: users pay per call, per request unit and per millisecond of CPU. The other benchmarks time
idemflow; this one prices it, every variant in one interleaved run on the same servers, so that
"idemflow / minimal" and "idemflow / Powertools" are ratios of one run, and so that a change to
the library can be priced before and after (``--library`` a checkout of another commit, ``--tag``
its pages).

Variants (:mod:`benchmarks.cost.variants`; each first call a fresh key, a duplicate a second call
with a key already finished): on DynamoDB Local the bare handler (``PutItem`` + ``UpdateItem ADD``,
the one :mod:`benchmarks.peers.powertools` protects), Powertools around it, idemflow's
``idempotent_function`` around it, the minimal exactly-once protocol
(:mod:`benchmarks.cost.handwritten`) and idemflow workflows (:mod:`benchmarks.cost.flows`) of
1, 2 and 5 steps, the 2-step workflow on ``arun``; on Azurite the plain handler, minimal and
workflows of 1, 2, 5 steps (each also on ``arun``), the function; on SQLite the same and DBOS's
2-step workflow; on PostgreSQL the plain handler, minimal and workflows of 1, 2, 5 steps and DBOS's
2-step workflow (its system database and datasource on the same server); the duplicates of the
protected 2-step variants (DBOS's: the same workflow id run again). The ratios to the minimal
protocol and to DBOS are printed beside issue 45's targets (:mod:`benchmarks.cost.targets`). How
they are run and measured: :mod:`benchmarks.cost.rounds`; how calls are counted and priced:
:mod:`benchmarks.cost.meter`, :mod:`benchmarks.cost.units`.

Sources of the billing rules (read 2026-11; prices change, the constants are in ``_cost_units``):

- item size: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html
- read and write units per operation (larger of old and new item, failed conditional writes,
  BatchGetItem per item, Query by size read):
  https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html
- transactions (two underlying writes per item, ``ConditionCheck`` included):
  https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html
- global secondary index writes:
  https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.html (section on
  provisioned throughput: an index entry created, removed, moved or updated)
- on-demand prices, us-east-1 ($0.625 per million WRU, $0.125 per million RRU):
  https://aws.amazon.com/dynamodb/pricing/on-demand/
- Azure: "each individual Blob, Table and Queue REST request to the storage service is considered
  as a potential transaction for billing" (https://learn.microsoft.com/en-us/archive/blogs/
  windowsazurestorage/understanding-windows-azure-storage-billing-bandwidth-transactions-and-capacity);
  an entity group transaction is one REST request, ``POST $batch`` holding one change set
  (https://learn.microsoft.com/en-us/rest/api/storageservices/performing-entity-group-transactions).
  No source found says how many transactions a batch is billed as beyond that; it is counted as
  one here, and a failed request (a 409 on an insert) as one too.

Run: ``python -m benchmarks cost [--stores sqlite,postgres,dynamodb-local,azurite] [--quick]
[--library PATH --tag before]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.stats import RESULTS

KINDS = ("dynamodb-local", "azurite", "sqlite", "postgres")


def use_library(path: str | None) -> str:
    """Put ``path`` first on ``sys.path`` (its ``idemflow/`` wins over the installed one), import
    idemflow, and return the file imported."""
    root = None if path is None else str(Path(path).resolve())
    if root is not None:
        loaded = sys.modules.get("idemflow")
        if loaded is not None and not str(Path(str(loaded.__file__)).resolve()).startswith(root + os.sep):
            raise SystemExit(f"--library {path}: idemflow was imported already; run the cost benchmark alone")
        sys.path.insert(0, root)
    import idemflow

    imported = str(Path(str(idemflow.__file__)).resolve())
    if root is not None and not imported.startswith(root + os.sep):
        raise SystemExit(f"--library {path}: imported {imported} instead (is there an idemflow/ folder?)")
    return imported


def describe_tree(imported: str) -> str:
    """Which idemflow ran: the git commit of the tree it was imported from, and whether its
    ``idemflow/`` had uncommitted changes (or that it is no git checkout, e.g. an archive)."""
    import subprocess

    package = Path(imported).parent
    try:
        head = subprocess.run(
            ["git", "-C", str(package), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "-C", str(package), "status", "--porcelain", "--", "."],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return f"{package} (not a git checkout)"
    return f"{package} at {head}" + (f" with {len(changed)} file(s) changed" if changed else "")


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Any:
    parser = argparse.ArgumentParser(prog="python -m benchmarks cost", description=__doc__)
    add = parser.add_argument
    add("--stores", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    add("--rounds", type=int, default=2 if quick else 9)
    add("--per-round", type=int, default=3 if quick else 30, help="requests per variant per round")
    add("--warmup", type=int, default=4 if quick else 40, help="untimed first calls per server variant")
    add("--sqlite-warmup", type=int, default=10 if quick else 300, help="the same, SQLite")
    add("--duplicate-warmup", type=int, default=1 if quick else 10, help="untimed duplicates per variant")
    add("--meter", type=int, default=2 if quick else 10, help="metered requests per variant")
    add("--seed", type=int, default=2013, help="the rounds' shuffles")
    add("--no-dbos", action="store_true", help="leave DBOS out (SQLite, PostgreSQL)")
    add("--library", default=None, help="put PATH first on sys.path before importing idemflow")
    add("--tag", default=None, help="write cost-TAG.md/.json/.png")
    add("--out", type=Path, default=out, help="results folder")
    args = parser.parse_args(argv)
    imported = use_library(args.library)
    print(f"  cost: idemflow from {imported}", flush=True)
    kinds = [kind for kind in args.stores.split(",") if kind]
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown:
        raise SystemExit(f"cost: unknown store {', '.join(unknown)}; choose from {', '.join(KINDS)}")

    from benchmarks.common.backends import open_backend
    from benchmarks.common.report import Report
    from benchmarks.cost import report as _cost_report
    from benchmarks.cost.calibrate import Case, calibrate
    from benchmarks.cost.meter import Meter
    from benchmarks.cost.rounds import Loop, Rounds, Variant, idle_cpu
    from benchmarks.cost.variants import azure_variants, dynamo_variants, postgres_variants, sqlite_variants

    name = "cost" if args.tag is None else f"cost-{args.tag}"
    params: dict[str, Any] = {
        "stores": kinds,
        "rounds": args.rounds,
        "requests per variant per round": args.per_round,
        "warm-up (server, SQLite, duplicates)": [args.warmup, args.sqlite_warmup, args.duplicate_warmup],
        "metered requests per variant": args.meter,
        "seed": args.seed,
        "idemflow imported from": describe_tree(imported),
    }
    report = Report(name, "What one request costs: calls, request units, CPU, latency", params, args.out)
    variants: list[Variant] = []
    meters: list[Meter] = []
    calibration: list[Case] = []
    with contextlib.ExitStack() as stack:
        loop = Loop()
        stack.callback(loop.close)
        for kind in kinds:
            backend = stack.enter_context(open_backend(kind))
            if kind == "dynamodb-local":
                made, meter, close = dynamo_variants(backend, loop)
                meters.append(meter)
                calibration = calibrate(backend)
            elif kind == "azurite":
                made, meter_azure, close = azure_variants(backend, loop)
                meters.append(meter_azure)
            elif kind == "postgres":
                made, close = postgres_variants(backend, dbos=not args.no_dbos)
            else:
                made, close = sqlite_variants(backend, dbos=not args.no_dbos)
            stack.callback(close)
            variants += made
        idle = idle_cpu()
        rounds = Rounds(variants)
        began = time.monotonic()
        rounds.warm_up(
            lambda variant: args.sqlite_warmup if variant.backend in ("sqlite", "postgres") else args.warmup,
            args.duplicate_warmup,
        )
        print(f"  cost: {len(variants)} variants warmed up in {time.monotonic() - began:.0f} s", flush=True)
        rounds.run(args.rounds, args.per_round, args.seed, lambda done: print(f"  cost: {done}", flush=True))
        rounds.meter(args.meter, meters)
    path = _cost_report.write(report, variants, rounds.results, calibration, idle)
    print("\n".join(_cost_report.summary_of(_cost_report.rows(variants, rounds.results))), flush=True)
    print("\n".join(_cost_report.target_lines(variants, rounds.results)), flush=True)
    print(f"  cost: {path}", flush=True)
    return report
