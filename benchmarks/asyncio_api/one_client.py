"""The in-process part of ``asyncio_api``: the survey workload's 2-step request at one client,
``run`` on a blocking store against ``arun`` on ``open_async_store`` of the same kind, paired
interleaved rounds.

Why apart: it measures the library's own asyncio overhead, with no HTTP, no servers of its own.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from benchmarks.asyncio_api.params import Sizes
from benchmarks.common.backends import Backend
from benchmarks.common.report import fmt_ratio
from benchmarks.common.stats import paired_ratio
from benchmarks.common.workload_survey import survey_prepare, survey_request
from idemflow import arun, open_async_store, run
from idemflow.stores.base import AsyncStore
from samples.survey import workflows as survey_sample

T = TypeVar("T")


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
