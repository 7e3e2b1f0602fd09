"""``python -m benchmarks [NAME ...] [--quick] [--out DIR] [--stores sqlite,moto,azurite]``

Runs the named benchmarks (all by default, in the order below), writes
Markdown tables, PNG plots and JSON records to ``benchmarks/results/`` (or
``--out``), then rebuilds ``summary.md`` there. ``--quick`` runs tiny sizes
(a smoke test, under a minute) and writes to ``benchmarks/results-quick/``
unless ``--out`` is given, so it never overwrites the committed results.

Names: overhead, messages, core, calls, peers, cloud, users, contention, outbox, asyncio_api,
runs_list, timers, booking, cost, limits, pool, events, together, schedules, summary; and ``soak`` (10
minutes of steady load on one SQLite file: run by name only, never by default). ``--stores``
limits the store-parametrized benchmarks (calls, users, outbox, asyncio_api, runs_list, timers,
and contention, booking, cost and events, which run sqlite,dynamodb-local,azurite unless told);
``cloud`` and ``peers`` start moto / Azurite themselves (``--no-servers`` skips them and the
server stores, leaving only the pure-Python and SQLite parts). ``--library PATH`` and ``--tag TAG``
go to ``cost`` and ``soak``: the idemflow under PATH is imported instead of this tree's, and the
pages are written as ``cost-TAG.*`` / ``soak-TAG.*`` (a before/after pair in one folder).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.stats import RESULTS

ORDER = (
    "overhead",
    "messages",
    "core",
    "calls",
    "peers",
    "cloud",
    "users",
    "contention",
    "outbox",
    "asyncio_api",
    "runs_list",
    "timers",
    "booking",
    "cost",
    "limits",
    "pool",
    "events",
    "together",
    "schedules",
)
QUICK_OUT = RESULTS.parent / "results-quick"
SERVER_STORES = ("moto", "azurite")


def _runner(name: str) -> Callable[[list[str], Path, bool], Any]:
    """Each benchmark's entry point, imported only when it runs."""
    if name in (
        "overhead",
        "messages",
        "calls",
        "peers",
        "users",
        "contention",
        "outbox",
        "asyncio_api",
        "runs_list",
        "timers",
        "booking",
        "cost",
        "limits",
        "soak",
        "summary",
        "pool",
        "events",
        "together",
        "schedules",
    ):
        import importlib

        module = importlib.import_module(f"benchmarks.{name}")

        def run_new(argv: list[str], out: Path, quick: bool) -> Any:
            return module.main(argv, out=out, quick=quick)

        return run_new
    if name == "core":
        from benchmarks import core_overhead

        def run_core(argv: list[str], out: Path, quick: bool) -> Any:
            core_overhead.main([*(["--rounds", "3"] if quick else []), "--out", str(out), *argv])

        return run_core
    if name == "cloud":
        from benchmarks import cloud_survey

        def run_cloud(argv: list[str], out: Path, quick: bool) -> Any:
            sizes = ["--rounds", "2", "--per-round", "3"] if quick else []
            cloud_survey.main([*sizes, "--out", str(out), *argv])

        return run_cloud
    raise SystemExit(f"unknown benchmark {name!r}; choose from {', '.join((*ORDER, 'soak', 'summary'))}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("names", nargs="*", help=f"benchmarks to run (default: {' '.join(ORDER)})")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    parser.add_argument("--out", type=Path, default=None, help="results folder")
    parser.add_argument(
        "--stores", default=None, help="comma-separated stores for calls, users, outbox, asyncio_api, timers"
    )
    parser.add_argument("--no-servers", action="store_true", help="skip moto and Azurite (and the peers)")
    parser.add_argument("--library", default=None, help="cost, soak: import idemflow from PATH first")
    parser.add_argument("--tag", default=None, help="cost, soak: write NAME-TAG.md/.json/.png")
    args = parser.parse_args(argv)
    out: Path = args.out or (QUICK_OUT if args.quick else RESULTS)
    names = list(args.names) or list(ORDER)
    stores = args.stores or ("sqlite" if args.no_servers else "sqlite,moto,azurite")
    if args.no_servers:
        skipped = [n for n in names if n in ("cloud", "peers")]
        names = [n for n in names if n not in skipped]
        if skipped:
            print(f"--no-servers: skipping {', '.join(skipped)}")
    started = time.time()
    for name in names:
        if name == "summary":
            continue
        extra = (
            ["--stores", stores]
            if name in ("calls", "users", "outbox", "asyncio_api", "runs_list", "timers")
            else []
        )
        if name in ("contention", "booking", "cost", "limits", "events", "schedules") and (
            args.stores or args.no_servers
        ):  # else their own
            extra = ["--stores", stores]
        if name in ("cost", "soak"):
            extra += ["--library", args.library] if args.library else []
            extra += ["--tag", args.tag] if args.tag else []
        print(f"== {name}{' (quick)' if args.quick else ''} -> {out}", flush=True)
        t0 = time.time()
        _runner(name)(extra, out, args.quick)
        print(f"== {name} done in {time.time() - t0:.0f} s", flush=True)
    from benchmarks import summary

    path = summary.build(out)
    print(f"== all done in {time.time() - started:.0f} s; headline numbers in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
