"""The survey API's response endpoint twice over, served by uvicorn for ``benchmarks.asyncio_api``.

``python -m benchmarks.asyncio_api.app --variant threadpool|async --store URL --port P`` serves,
on ``127.0.0.1`` with one worker:

- ``POST /surveys/{survey}/responses`` (``Idempotency-Key`` header, body as
  :func:`samples.survey.workflows.parse_response` takes it): the sample's ``respond`` workflow,
  run by ``await run_in_threadpool(run, m, ...)`` on a blocking store (*threadpool*: what the
  samples did before the asyncio API) or by ``await Idempotency(store).run(m, ...)`` on the
  store of ``open_async_store(url)`` (*async*: ``arun`` under the ASGI helper, no bound), or
  the same with ``Idempotency(store, in_flight=4)`` (*bounded*); 200 with the workflow's
  answer, 409 for a refusal, 503 for a busy store;
- ``GET /probe``: ``{"ok": true}``, no store call — its latency under load shows whether
  the event loop ever stalls;
- ``POST /admin/store`` ``{"url": ...}``: close the store and open the one at ``url`` (the
  benchmark gives every cell fresh tables: moto copies a table on every transaction);
- ``POST /admin/begin`` and ``POST /admin/end``: between them a task samples the loop's own
  lag (how late a 5 ms sleep wakes up); ``end`` returns those lags and the process CPU seconds
  used since ``begin``.

The store is opened in the app's lifespan and closed at shutdown (``await store.close()`` for
the asynchronous one).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from idemflow import ConflictError, TransientError, WorkflowAborted, open_async_store, open_store, run
from idemflow.asgi import Idempotency
from idemflow.stores import Store
from idemflow.stores.base import AsyncStore
from samples.survey import workflows

VARIANTS = ("threadpool", "async", "bounded")
BOUND = 4
"""``in_flight`` of the *bounded* variant."""
KEY_HEADER = "Idempotency-Key"
LAG_PERIOD = 0.005
"""Seconds the loop-lag sampler sleeps between samples."""


class _Stores:
    """The app's one store, blocking (threadpool) or asynchronous (async), replaceable."""

    def __init__(self, variant: str, url: str) -> None:
        self.variant = variant
        self.url = url
        self.blocking: Store | None = None
        self.aio: AsyncStore | None = None
        self.idem: Idempotency | None = None

    async def open(self, url: str) -> None:
        await self.close()
        self.url = url
        if self.variant != "threadpool":
            self.aio = open_async_store(url)  # on the loop that uses it
            self.idem = Idempotency(self.aio, in_flight=BOUND if self.variant == "bounded" else None)
        else:
            self.blocking = await run_in_threadpool(open_store, url)

    async def close(self) -> None:
        aio, blocking, self.aio, self.blocking, self.idem = self.aio, self.blocking, None, None, None
        if aio is not None:
            await aio.close()
        if blocking is not None:
            await run_in_threadpool(blocking.close)


class _LagSampler:
    """How late the loop wakes from a short sleep, sampled while a measurement runs."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.cpu = 0.0
        self.task: asyncio.Task[None] | None = None

    async def _sample(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            start = loop.time()
            await asyncio.sleep(LAG_PERIOD)
            self.lags.append(loop.time() - start - LAG_PERIOD)

    def begin(self) -> None:
        self.end()
        self.lags = []
        self.cpu = time.process_time()
        self.task = asyncio.get_running_loop().create_task(self._sample())

    def end(self) -> dict[str, Any]:
        if self.task is not None:
            self.task.cancel()
            self.task = None
        return {"lags": self.lags, "cpu": time.process_time() - self.cpu}


def create_app(variant: str, url: str) -> Starlette:
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r}: one of {VARIANTS}")
    stores = _Stores(variant, url)
    sampler = _LagSampler()

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await stores.open(url)
        try:
            yield
        finally:
            sampler.end()
            await stores.close()

    async def respond(request: Request) -> JSONResponse:
        key = request.headers.get(KEY_HEADER)
        if not key:
            return JSONResponse({"error": "missing_idempotency_key"}, 400)
        try:
            response = workflows.parse_response(request.path_params["survey"], await request.json())
        except (ValueError, workflows.Invalid) as exc:
            return JSONResponse({"error": "invalid", "detail": str(exc)}, 422)
        m = workflows.respond(response)
        try:
            if stores.idem is not None:
                counted = await stores.idem.run(m, request_id=key)
            else:
                assert stores.blocking is not None
                counted = await run_in_threadpool(run, m, request_id=key, store=stores.blocking)
        except WorkflowAborted as aborted:
            return JSONResponse({"error": "refused", "detail": str(aborted.reason)}, 409)
        except (ConflictError, TransientError) as exc:
            return JSONResponse({"error": "busy", "detail": str(exc)}, 503)
        return JSONResponse(dict(counted))

    async def probe(_request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    async def reopen(request: Request) -> JSONResponse:
        await stores.open(str((await request.json())["url"]))
        return JSONResponse({"variant": variant})

    async def begin(_request: Request) -> JSONResponse:
        sampler.begin()
        return JSONResponse({"ok": True})

    async def end(_request: Request) -> JSONResponse:
        return JSONResponse(sampler.end())

    return Starlette(
        routes=[
            Route("/surveys/{survey}/responses", respond, methods=["POST"]),
            Route("/probe", probe),
            Route("/admin/store", reopen, methods=["POST"]),
            Route("/admin/begin", begin, methods=["POST"]),
            Route("/admin/end", end, methods=["POST"]),
        ],
        lifespan=lifespan,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.asyncio_api.app", description=__doc__)
    parser.add_argument("--variant", choices=VARIANTS, required=True)
    parser.add_argument("--store", required=True, help="store URL (open_store / open_async_store)")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    uvicorn.run(
        create_app(args.variant, args.store),
        host="127.0.0.1",
        port=args.port,
        workers=1,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
