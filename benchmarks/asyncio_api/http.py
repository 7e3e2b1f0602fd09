"""The HTTP part of ``asyncio_api``: each variant's app (:mod:`benchmarks.asyncio_api.app`) on
uvicorn in a subprocess, surveys created on fresh tables, N concurrent clients POSTing responses
while a probe GETs ``/probe``, and what each cell measured.

Why apart: it is the load generator and its servers, a job of its own beside the in-process
comparison and the page.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.asyncio_api.params import PROBE_PERIOD, VARIANTS, Sizes
from benchmarks.common.backends import Backend
from benchmarks.common.stats import percentile
from benchmarks.common.workload_survey import OPTIONS, QUESTION, SURVEY
from idemflow import run
from samples.survey import workflows as survey_sample

ROOT = Path(__file__).resolve().parents[2]
KEY_HEADER = "Idempotency-Key"


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
    """``benchmarks.asyncio_api.app`` on uvicorn in a subprocess, ready (its lifespan has opened the
    store)."""
    from idemflow.testing.servers import free_port, stop_process, wait_for_port

    port = free_port()
    cmd = [sys.executable, "-m", "benchmarks.asyncio_api.app", "--variant", variant, "--store", url]
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
