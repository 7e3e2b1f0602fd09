"""The asyncio API against today's threadpool version: the survey API under concurrent clients,
the event loop's responsiveness meanwhile, and the 2-step workflow's latency at one client.

**Over HTTP** (moto for DynamoDB, Azurite for Azure Tables). Two minimal Starlette apps serve
the survey sample's ``respond`` workflow (``benchmarks/_asyncio_app.py``), each on uvicorn (one
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

**In process, one client**: the same 2-step workflow (``benchmarks._workloads``' survey
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
import contextlib
import itertools
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

import httpx

from benchmarks._backends import LABELS, Backend, open_backend
from benchmarks._report import Report, fmt_ratio
from benchmarks._stats import RESULTS, Summary, paired_ratio, percentile, summarize
from benchmarks._workloads import OPTIONS, QUESTION, SURVEY, survey_prepare, survey_request
from idemflow import arun, run
from idemflow.stores import open_async_store
from idemflow.stores.base import AsyncStore
from samples.survey import workflows as survey_sample

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("threadpool", "async", "bounded")
RATIOS = ("async", "bounded")
"""The variants compared with *threadpool*."""
HTTP_KINDS = ("moto", "azurite")
KINDS = ("sqlite", "moto", "azurite")
CLIENTS = (1, 8, 32, 128)
QUICK_CLIENTS = (1, 8)
PROBE_PERIOD = 0.010
PROBE_TARGET_MS = 20.0
RATIO_TARGET = 1.05
KEY_HEADER = "Idempotency-Key"
T = TypeVar("T")


@dataclass(frozen=True)
class Sizes:
    clients: tuple[int, ...]
    rounds: int
    min_requests: int
    per_client: int
    warmup: int
    """Untimed requests on each cell's fresh tables before it is measured."""
    one_rounds: int
    one_per_round: dict[str, int]
    one_warmup: dict[str, int]

    def requests(self, clients: int) -> int:
        return max(self.min_requests, self.per_client * clients)


FULL = Sizes(  # sized for a shared 2-core machine: about 10 minutes under a load average of 15
    clients=CLIENTS,
    rounds=3,
    min_requests=30,
    per_client=1,
    warmup=4,
    one_rounds=8,
    one_per_round={"sqlite": 100, "moto": 15, "azurite": 15},
    one_warmup={"sqlite": 250, "moto": 10, "azurite": 10},
)
QUICK = Sizes(
    clients=QUICK_CLIENTS,
    rounds=2,
    min_requests=4,
    per_client=1,
    warmup=1,
    one_rounds=2,
    one_per_round={"sqlite": 5, "moto": 3, "azurite": 3},
    one_warmup={"sqlite": 10, "moto": 2, "azurite": 2},
)


# -- the servers ----------------------------------------------------------------------------------


@dataclass
class Server:
    variant: str
    base: str
    log: Any
    proc: subprocess.Popen[bytes]

    def output(self) -> str:
        self.log.seek(0)
        return str(self.log.read()[-3000:].decode(errors="replace"))


@contextlib.contextmanager
def serve(variant: str, url: str) -> Iterator[Server]:
    """``benchmarks._asyncio_app`` on uvicorn in a subprocess, ready (its lifespan has opened the store)."""
    from tests.servers import free_port, stop_process, wait_for_port

    port = free_port()
    cmd = [sys.executable, "-m", "benchmarks._asyncio_app", "--variant", variant, "--store", url]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([*cmd, "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        server = Server(variant, f"http://127.0.0.1:{port}", log, proc)
        try:
            try:
                wait_for_port(port, proc, f"{variant} server")  # uvicorn listens after the lifespan started
            except RuntimeError as exc:
                raise RuntimeError(f"{exc}:\n{server.output()}") from exc
            yield server
        finally:
            stop_process(proc, 15)
            if proc.returncode not in (0, -15):
                print(f"  {variant} server exited with {proc.returncode}:\n{server.output()}", flush=True)


def _survey(n: int) -> Any:
    return {**SURVEY, "id": f"s{n}"}


def prepare(backend: Backend, tag: str, surveys: int) -> str:
    """Fresh tables under ``tag`` holding ``surveys`` surveys ``s0``, ``s1``, ...; their URL."""
    store = backend.make_store(tag, survey_sample.TABLES)
    try:

        def create(n: int) -> None:
            run(survey_sample.create_survey(_survey(n)), request_id=f"create-s{n}", store=store)

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, range(surveys)))
        store.flush()
    finally:
        store.close()
    return backend.url(tag)


# -- one cell: N clients against one server ---------------------------------------------------------


@dataclass
class Cell:
    """One variant at one client count in one round."""

    latencies: list[float]
    """Seconds per answered (200) request."""
    seconds: float
    failed: dict[str, int]
    probes: list[float]
    probe_failed: int
    lags: list[float]
    """The server loop's lateness waking from a 5 ms sleep, seconds."""
    cpu: float
    """Server process CPU seconds during the cell."""

    @property
    def answered(self) -> int:
        return len(self.latencies)

    @property
    def throughput(self) -> float:
        return self.answered / self.seconds if self.seconds > 0 else 0.0

    def record(self) -> dict[str, Any]:
        return {
            "answered": self.answered,
            "seconds": round(self.seconds, 4),
            "requests_per_s": round(self.throughput, 2),
            "p50_ms": _q(self.latencies, 50),
            "p95_ms": _q(self.latencies, 95),
            "probe_p50_ms": _q(self.probes, 50),
            "probe_p99_ms": _q(self.probes, 99),
            "probe_max_ms": _q(self.probes, 100),
            "probes": len(self.probes),
            "probe_failed": self.probe_failed,
            "loop_lag_p99_ms": _q(self.lags, 99),
            "loop_lag_max_ms": _q(self.lags, 100),
            "server_cpu_ms_per_request": round(1e3 * self.cpu / max(self.answered, 1), 3),
            "failed": self.failed,
        }


def _q(values: Sequence[float], q: float) -> float | None:
    return round(1e3 * percentile(values, q), 3) if values else None


def _body(i: int) -> dict[str, Any]:
    return {"respondent": f"p{i}", "answers": {QUESTION: OPTIONS[i % 2]}}


async def _respond(load: httpx.AsyncClient, survey: str, key: str, i: int) -> str:
    """One POST; its HTTP status, or the exception's name."""
    try:
        answer = await load.post(f"/surveys/{survey}/responses", json=_body(i), headers={KEY_HEADER: key})
    except httpx.HTTPError as exc:
        return type(exc).__name__
    return str(answer.status_code)


async def warm(load: httpx.AsyncClient, tag: str, count: int) -> None:
    """Untimed requests on the fresh tables: the server's new store opens its client."""
    for i in range(count):
        status = await _respond(load, "s0", f"{tag}-w{i}", 1_000_000 + i)
        if status != "200":
            raise RuntimeError(f"warm-up request answered {status}")


async def measure(
    load: httpx.AsyncClient, admin: httpx.AsyncClient, tag: str, clients: int, requests: int, spread: bool
) -> Cell:
    """``clients`` concurrent clients send ``requests`` responses back to back; a probe meanwhile."""
    latencies: list[float] = []
    failed: dict[str, int] = {}
    probes: list[float] = []
    probe_failed = 0
    numbers = itertools.count()
    done = asyncio.Event()

    async def client(c: int) -> None:
        survey = f"s{c}" if spread else "s0"
        while (i := next(numbers)) < requests:
            start = time.perf_counter()
            status = await _respond(load, survey, f"{tag}-{i}", i)
            took = time.perf_counter() - start
            if status == "200":
                latencies.append(took)
            else:
                failed[status] = failed.get(status, 0) + 1

    async def probe() -> None:
        nonlocal probe_failed
        while not done.is_set():
            start = time.perf_counter()
            try:
                answer = await admin.get("/probe")
                ok = answer.status_code == 200
            except httpx.HTTPError:
                ok = False
            took = time.perf_counter() - start
            if ok:
                probes.append(took)
            else:
                probe_failed += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), max(0.0, PROBE_PERIOD - took))

    (await admin.post("/admin/begin")).raise_for_status()
    prober = asyncio.create_task(probe())
    start = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    seconds = time.perf_counter() - start
    done.set()
    await prober
    ended = await admin.post("/admin/end")
    ended.raise_for_status()
    server = ended.json()
    return Cell(latencies, seconds, failed, probes, probe_failed, server["lags"], float(server["cpu"]))


async def http_part(backend: Backend, sizes: Sizes, spread: bool) -> dict[int, dict[str, list[Cell]]]:
    """Every round, every client count, both variants, on one backend."""
    kind = backend.kind
    cells: dict[int, dict[str, list[Cell]]] = {n: {v: [] for v in VARIANTS} for n in sizes.clients}
    most = max(sizes.clients)
    limits = httpx.Limits(max_connections=most + 8, max_keepalive_connections=most + 8)
    with contextlib.ExitStack() as stack:
        servers: dict[str, Server] = {}
        for variant in VARIANTS:
            url = await asyncio.to_thread(prepare, backend, backend.tag(f"ai{variant[0]}"), 1)
            servers[variant] = stack.enter_context(serve(variant, url))
        async with contextlib.AsyncExitStack() as clients:
            loads: dict[str, httpx.AsyncClient] = {}
            admins: dict[str, httpx.AsyncClient] = {}
            for variant, server in servers.items():
                loads[variant] = await clients.enter_async_context(
                    httpx.AsyncClient(base_url=server.base, limits=limits, timeout=120)
                )
                admins[variant] = await clients.enter_async_context(
                    httpx.AsyncClient(base_url=server.base, timeout=120)
                )
                await warm(loads[variant], f"init{variant}", 3 * sizes.warmup)
            for r in range(sizes.rounds):
                for position, n in enumerate(sizes.clients):
                    order = VARIANTS if (r + position) % 2 == 0 else VARIANTS[::-1]
                    for variant in order:
                        tag = backend.tag(f"a{n}{variant[0]}")
                        url = await asyncio.to_thread(prepare, backend, tag, n if spread else 1)
                        (await admins[variant].post("/admin/store", json={"url": url})).raise_for_status()
                        await warm(loads[variant], tag, sizes.warmup)
                        cell = await measure(
                            loads[variant], admins[variant], tag, n, sizes.requests(n), spread
                        )
                        cells[n][variant].append(cell)
                        print(
                            f"  asyncio_api {kind} round {r + 1}/{sizes.rounds} N={n} {variant}: "
                            f"{cell.throughput:.1f} req/s, p50 {_q(cell.latencies, 50)} ms, "
                            f"probe p99 {_q(cell.probes, 99)} ms, loop lag p99 {_q(cell.lags, 99)} ms"
                            + (f", failed {cell.failed}" if cell.failed else ""),
                            flush=True,
                        )
    return cells


# -- one client, in process ------------------------------------------------------------------------


def one_client(backend: Backend, sizes: Sizes) -> dict[str, list[float]]:
    """Seconds per request of the 2-step workflow, per round: ``run`` on a blocking store against
    ``arun`` on ``open_async_store`` of the same kind (each on tables of its own)."""
    kind = backend.kind
    tables = survey_sample.TABLES
    blocking = backend.store(backend.tag("o1s"), *tables)
    survey_prepare(blocking)
    async_tag = backend.tag("o1a")
    survey_prepare(backend.store(async_tag, *tables))  # creates the tables and the survey
    samples: dict[str, list[float]] = {"sync": [], "async": []}
    counter = itertools.count()

    def sync_batch(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            i = next(counter)
            run(survey_request(i), request_id=f"o1-{i}", store=blocking)
        return (time.perf_counter() - start) / count

    # The loop runs all along on a thread of its own, as a server's would: the asynchronous store's
    # completion writes (tasks) go on during the sync batches, as the blocking store's background
    # thread does during the async ones (a stopped loop would also leave a request half sent, which
    # holds moto's single request thread).
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="asyncio_api-loop", daemon=True)
    thread.start()

    def on_loop(coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result()

    async def opened() -> AsyncStore:
        return open_async_store(backend.url(async_tag))

    aio = on_loop(opened())

    async def async_batch(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            i = next(counter)
            await arun(survey_request(i), request_id=f"o1-{i}", store=aio)
        return (time.perf_counter() - start) / count

    batches: dict[str, Callable[[int], float]] = {
        "sync": sync_batch,
        "async": lambda count: on_loop(async_batch(count)),
    }
    try:
        for batch in batches.values():
            batch(sizes.one_warmup[kind])
        for r in range(sizes.one_rounds):
            for name in ("sync", "async") if r % 2 == 0 else ("async", "sync"):
                samples[name].append(batches[name](sizes.one_per_round[kind]))
    finally:
        on_loop(aio.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
    ratio = paired_ratio(kind, samples["async"], samples["sync"])
    print(
        f"  asyncio_api {kind} one client: sync {1e3 * statistics.median(samples['sync']):.2f} ms, "
        f"async {1e3 * statistics.median(samples['async']):.2f} ms, async/sync {fmt_ratio(ratio)}",
        flush=True,
    )
    return samples


# -- the page -------------------------------------------------------------------------------------


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _med(cells: list[Cell], value: Callable[[Cell], float | None]) -> float | None:
    found = [v for v in (value(c) for c in cells) if v is not None]
    return statistics.median(found) if found else None


def _f(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _ms(values: Sequence[float], q: float) -> float | None:
    return 1e3 * percentile(values, q) if values else None


def _ratio(
    cells: dict[str, list[Cell]], value: Callable[[Cell], float | None], variant: str = "async"
) -> Summary | None:
    pairs = [(value(a), value(t)) for a, t in zip(cells[variant], cells["threadpool"], strict=True)]
    ratios = [a / t for a, t in pairs if a is not None and t is not None and t > 0]
    return summarize(f"{variant}/threadpool", ratios) if ratios else None


def _fr(summary: Summary | None) -> str:
    return "–" if summary is None else fmt_ratio(summary)


def write_http(report: Report, kind: str, cells: dict[int, dict[str, list[Cell]]]) -> None:
    report.add(f"## {LABELS[kind]}: the survey API under N concurrent clients", "")
    rows = []
    for n, variants in cells.items():
        for variant in VARIANTS:
            cs = variants[variant]
            failed: dict[str, int] = {}
            for c in cs:
                for status, count in c.failed.items():
                    failed[status] = failed.get(status, 0) + count
            rows.append(
                [
                    str(n) if variant == VARIANTS[0] else "",
                    variant,
                    f"**{_f(_med(cs, lambda c: c.throughput))}**",
                    _f(_med(cs, lambda c: _ms(c.latencies, 50))),
                    _f(_med(cs, lambda c: _ms(c.latencies, 95))),
                    _f(_med(cs, lambda c: _ms(c.probes, 50)), 2),
                    f"**{_f(_med(cs, lambda c: _ms(c.probes, 99)), 2)}**",
                    _f(max((_ms(c.probes, 99) or 0.0) for c in cs), 2),
                    _f(_med(cs, lambda c: _ms(c.lags, 99)), 2),
                    _f(_med(cs, lambda c: 1e3 * c.cpu / max(c.answered, 1)), 1),
                    str(sum(c.answered for c in cs)),
                    ", ".join(f"{count}× {status}" for status, count in sorted(failed.items())) or "0",
                ]
            )
    report.table(
        [
            "N",
            "variant",
            "requests/s",
            "p50 ms",
            "p95 ms",
            "probe p50 ms",
            "probe p99 ms",
            "probe p99, worst round",
            "server loop lag p99 ms",
            "server CPU ms/request",
            "answered",
            "failed",
        ],
        rows,
    )
    report.add("Ratios to threadpool, per round (median, IQR over rounds):", "")
    rows = []
    for n, variants in cells.items():
        for variant in RATIOS:
            rows.append(
                [
                    str(n) if variant == RATIOS[0] else "",
                    f"{variant} / threadpool",
                    _fr(_ratio(variants, lambda c: c.throughput, variant)),
                    _fr(_ratio(variants, lambda c: _ms(c.latencies, 50), variant)),
                    _fr(_ratio(variants, lambda c: _ms(c.latencies, 95), variant)),
                    _fr(_ratio(variants, lambda c: _ms(c.probes, 99), variant)),
                    _fr(_ratio(variants, lambda c: c.cpu / max(c.answered, 1), variant)),
                ]
            )
    report.table(
        ["N", "ratio", "requests/s", "p50 latency", "p95 latency", "probe p99", "server CPU/request"], rows
    )
    most = max(cells)
    for variant in VARIANTS:
        p99 = _med(cells[most][variant], lambda c: _ms(c.probes, 99))
        if p99 is not None:
            report.headline(
                f"asyncio_api.{kind}.{variant}.probe_p99_ms.{most}",
                round(p99, 2),
                note=f"GET /probe during the survey load, {most} clients, median of rounds",
            )
    throughput = _ratio(cells[most], lambda c: c.throughput)
    if throughput is not None:
        report.headline(
            f"asyncio_api.{kind}.async_over_threadpool_throughput.{most}",
            throughput,
            note=f"survey API, {most} clients",
        )


def figure(out: Path, http: dict[str, dict[int, dict[str, list[Cell]]]]) -> Path:
    from benchmarks._plot import _pyplot, _save

    plt = _pyplot()
    fig, axes = plt.subplots(len(http), 3, figsize=(15, 3.8 * len(http)), squeeze=False)
    measures: list[tuple[str, Callable[[Cell], float | None], bool]] = [
        ("answered requests/s", lambda c: c.throughput, False),
        ("p95 latency (ms)", lambda c: _ms(c.latencies, 95), True),
        ("probe p99 (ms)", lambda c: _ms(c.probes, 99), True),
    ]
    for row, (kind, cells) in enumerate(http.items()):
        ns = list(cells)
        for ax, (what, value, logy) in zip(axes[row], measures, strict=True):
            for variant, marker in zip(VARIANTS, ("o", "^", "s"), strict=True):
                ys = [_med(cells[n][variant], value) for n in ns]
                ax.plot(ns, [float("nan") if y is None else y for y in ys], marker=marker, label=variant)
            if what.startswith("probe"):
                ax.axhline(
                    PROBE_TARGET_MS, color="grey", linestyle="--", label=f"target {PROBE_TARGET_MS:g} ms"
                )
            ax.set_xscale("log", base=2)
            ax.set_xticks(ns, [str(n) for n in ns])
            if logy:
                ax.set_yscale("log")
            ax.set_xlabel("concurrent clients")
            ax.set_ylabel(what)
            ax.set_title(f"{LABELS[kind]}: {what}", fontsize="medium")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize="small")
    return _save(
        plt,
        fig,
        out / "asyncio_api.png",
        "survey API: async (arun), bounded (in_flight=4) and threadpool (run)",
    )


def write(
    report: Report,
    http: dict[str, dict[int, dict[str, list[Cell]]]],
    one: dict[str, dict[str, list[float]]],
    out: Path,
) -> None:
    report.add(
        "The survey sample's `respond` workflow behind three minimal Starlette apps on uvicorn (one",
        "worker each, their own processes): *threadpool* runs `run` on a blocking store through",
        "`run_in_threadpool` (what the samples did before; anyio's default 40 threads), *async* awaits",
        "`Idempotency(store).run` (`arun`) on the store of `open_async_store` (opened in the app's",
        "lifespan), *bounded* the same with `Idempotency(store, in_flight=4)` (at most 4 runs under",
        "way; the other requests wait their turn). The load generator",
        "(this process, one `httpx.AsyncClient`) runs N clients sending responses back to back, each",
        "with a fresh `Idempotency-Key`; meanwhile a probe GETs `/probe` (no store call) every 10 ms",
        "on a connection of its own. Every cell runs on fresh tables after a few untimed requests,",
        "the clients answering one survey on moto (it serialises transactions, so they never conflict,",
        "and every transaction slows with the table: a survey per client would add its rows) and a",
        "survey each on Azurite (a step's read of the survey is checked by an ETag-bumping write: the",
        "clients of one survey would conflict; contention is the `contention` benchmark's subject);",
        "variants interleave cell by cell, the order alternating; values are medians over rounds of",
        "each round's figure (*worst round*: the largest). *server loop lag*: how late the server's",
        "loop woke from a 5 ms sleep during the cell (sampled in the server itself). *server CPU*:",
        "the server process's CPU time during the cell over its answered requests (the probes' and",
        "the sampler's share included: it weighs most at low throughput). Emulators serve one request",
        "at a time (moto) or on one Node thread (Azurite): throughput saturates early for both variants.",
        "",
    )
    for kind, cells in http.items():
        write_http(report, kind, cells)
    if http:
        plot = figure(out, http)
        report.add(f"![asyncio_api]({plot.name})", "")
    else:
        report.add("No server backend chosen: the HTTP part did not run.", "")
    report.add(
        "## The 2-step workflow at one client, in process: `arun` against `run`",
        "",
        "`benchmarks._workloads`' survey request (`respond`: record, checkpoint, count), one at a",
        "time, no HTTP: `run` on the blocking store against `arun` on `open_async_store` of the same",
        "kind (SQLite: the blocking store on 8 threads of its own, `ThreadedStore`), each on tables",
        "of its own; a sample is a round's mean per request, the ratio async / sync is paired by",
        f"round. Target: ≤ {RATIO_TARGET}.",
        "",
    )
    rows = []
    for kind, samples in one.items():
        ratio = paired_ratio(kind, samples["async"], samples["sync"])
        rows.append(
            [
                LABELS[kind],
                f"{1e3 * statistics.median(samples['sync']):.2f}",
                f"{1e3 * statistics.median(samples['async']):.2f}",
                f"**{fmt_ratio(ratio)}**",
                "met" if ratio.median <= RATIO_TARGET else "**missed**",
            ]
        )
        report.headline(
            f"asyncio_api.{kind}.async_over_sync_latency", ratio, note="2-step workflow, 1 client, in process"
        )
    report.table(["store", "run ms/request", "arun ms/request", "async / sync", "target ≤ 1.05"], rows)
    report.data["http"] = {
        kind: {
            str(n): {variant: [c.record() for c in cs] for variant, cs in variants.items()}
            for n, variants in cells.items()
        }
        for kind, cells in http.items()
    }
    report.data["one_client_seconds"] = one
    report.write()


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


if __name__ == "__main__":
    main(sys.argv[1:])
