"""The asyncio API against today's threadpool version: the survey API under concurrent clients,
the event loop's responsiveness meanwhile, and the 2-step workflow's latency at one client.

**Over HTTP** (moto for DynamoDB, Azurite for Azure Tables). Two minimal Starlette apps serve
the survey sample's ``respond`` workflow (``benchmarks/asyncio_api/app.py``), each on uvicorn (one
worker, its own process, a free loopback port):

- *threadpool*: ``await run_in_threadpool(run, m, request_id=key, store=blocking_store)`` —
  what the samples did before (anyio's default limit: 40 threads);
- *async*: ``await Idempotency(async_store).run(m, request_id=key)`` (``arun`` under the ASGI
  helper), the store from ``open_async_store(url)`` opened in the app's lifespan (aiobotocore,
  ``azure.data.tables.aio``);
- *bounded*: the same with ``Idempotency(async_store, in_flight=4)``: at most 4 runs under way,
  the other requests wait their turn (a loop whose CPU is saturated gains nothing from more).

All also serve ``GET /probe`` (``{"ok": true}``, no store call). The load generator is this
process: one ``httpx.AsyncClient``, N concurrent clients (1, 8, 32, 128) each POSTing responses
back to back, each with a fresh ``Idempotency-Key``, until the cell's requests are sent
(``max(--min-requests, --per-client × N)``); meanwhile a probe task on a connection of its own
GETs ``/probe`` every 10 ms and records its latency. Every cell runs on fresh tables (moto
copies a table on every transaction, so its cost grows with the table) with surveys created
beforehand by ``create_survey``: one for all clients (*hot*) or one per client (*spread*).
``--surveys auto`` (the default) takes *hot* on moto, which serialises transactions (no
conflicts) and whose every transaction slows with the rows a survey per client adds (a survey
and its creation's records), and *spread* on Azurite, where a step's read of the survey is
checked by an ETag-bumping write, so clients of one survey conflict (contention is
``contention``'s subject; this measures the API).
Variants interleave cell by cell (for each round, for each N: threadpool and async, the order
alternating), several rounds in one run. Reported per backend, N and variant: requests/s,
p50/p95 latency, the probe's p50/p99, the server loop's own lag (how late a 5 ms sleep wakes
up, sampled in the server: separates a stalled loop from a slow network or a busy generator),
server CPU per request, failures; medians over rounds, and the per-round ratios
async / threadpool. Target: probe p99 ≤ 20 ms at 128 clients on the async server.

**In process, one client**: the same 2-step workflow (``benchmarks.common.workload_survey``' survey
request: record, checkpoint, count) by ``run`` on a blocking store against ``arun`` on
``open_async_store`` of the same URL kind (SQLite: ``ThreadedStore``; moto: AsyncDynamoDBStore;
Azurite: AsyncAzureTableStore), one request at a time, paired interleaved rounds, each variant
on its own tables. Target: async / sync ≤ 1.05.

Run: ``python -m benchmarks asyncio_api [--quick] [--stores sqlite,moto,azurite]`` (or
``python -m benchmarks.asyncio_api --help``). ``--stores`` names the in-process stores; the
HTTP part runs on the server ones among them. Writes ``asyncio_api.md``, ``.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.asyncio_api.http import Cell, http_part
from benchmarks.asyncio_api.one_client import one_client
from benchmarks.asyncio_api.params import FULL, HTTP_KINDS, KINDS, PROBE_PERIOD, QUICK, Sizes
from benchmarks.asyncio_api.report import write
from benchmarks.common.backends import open_backend
from benchmarks.common.report import Report
from benchmarks.common.stats import RESULTS


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _terminated(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def _placement(surveys: str, kind: str) -> str:
    if surveys != "auto":
        return surveys
    return "hot" if kind == "moto" else "spread"


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Report:
    parser = argparse.ArgumentParser(prog="python -m benchmarks asyncio_api", description=__doc__)
    parser.add_argument("--stores", default=",".join(KINDS), help="in process: any of sqlite,moto,azurite")
    parser.add_argument("--clients", default=None, help="comma-separated client counts")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--min-requests", type=int, default=None, help="requests per cell, at least")
    parser.add_argument("--per-client", type=int, default=None, help="requests per client per cell")
    parser.add_argument(
        "--surveys",
        choices=("auto", "hot", "spread"),
        default="auto",
        help="one survey for all clients (hot), one each (spread), or hot on moto and spread on Azurite",
    )
    parser.add_argument("--no-http", action="store_true", help="only the in-process part")
    parser.add_argument("--out", type=Path, default=None, help="results folder")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    args = parser.parse_args(argv)
    quick = quick or args.quick
    out = args.out or out
    base = QUICK if quick else FULL
    sizes = Sizes(
        clients=tuple(int(n) for n in args.clients.split(",")) if args.clients else base.clients,
        rounds=args.rounds or base.rounds,
        min_requests=args.min_requests or base.min_requests,
        per_client=args.per_client or base.per_client,
        warmup=base.warmup,
        one_rounds=base.one_rounds,
        one_per_round=base.one_per_round,
        one_warmup=base.one_warmup,
    )
    stores = [s for s in args.stores.split(",") if s]
    unknown = set(stores) - set(KINDS)
    if unknown:
        raise SystemExit(f"asyncio_api: unknown store(s) {sorted(unknown)}; choose from {KINDS}")
    http_kinds = [] if args.no_http else [k for k in stores if k in HTTP_KINDS]
    report = Report(
        "asyncio_api",
        "asyncio API: the survey API on arun against run in a threadpool",
        {
            "stores (in process)": stores,
            "stores (HTTP)": http_kinds,
            "clients": list(sizes.clients),
            "rounds": sizes.rounds,
            "requests per cell": f"max({sizes.min_requests}, {sizes.per_client} × clients)",
            "surveys": {kind: _placement(args.surveys, kind) for kind in http_kinds},
            "untimed requests per cell": sizes.warmup,
            "probe period (s)": PROBE_PERIOD,
            "server": f"uvicorn {_version('uvicorn')} (h11, asyncio loop, 1 worker), "
            f"starlette {_version('starlette')}",
            "clients' library": f"httpx {_version('httpx')}",
            "async SDKs": f"aiobotocore {_version('aiobotocore')}, aiohttp {_version('aiohttp')}",
            "one client: rounds × requests": f"{sizes.one_rounds} × {sizes.one_per_round}",
            "one client: untimed warm-up": sizes.one_warmup,
        },
        out,
    )
    http: dict[str, dict[int, dict[str, list[Cell]]]] = {}
    one: dict[str, dict[str, list[float]]] = {}
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:  # stop the servers too when terminated
        signal.signal(signal.SIGTERM, _terminated)
    for kind in stores:
        with open_backend(kind) as backend:
            if kind in http_kinds:
                print(f"  asyncio_api {kind}: survey API, clients {list(sizes.clients)}", flush=True)
                http[kind] = asyncio.run(
                    http_part(backend, sizes, _placement(args.surveys, kind) == "spread")
                )
            one[kind] = one_client(backend, sizes)
    write(report, http, one, out)
    return report
