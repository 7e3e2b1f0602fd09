"""``Idempotency-Key`` for Starlette and FastAPI: run or submit a workflow per key, answer in HTTP.

:class:`Idempotency` holds a store (and a queue, for requests answered at
their checkpoint). Its :meth:`~Idempotency.key` reads and checks the
request's ``Idempotency-Key`` header (a FastAPI dependency as it is:
``key: str = Depends(idem.key)``); :meth:`~Idempotency.run` and
:meth:`~Idempotency.submit` await the workflow under that key; and
:meth:`~Idempotency.install` maps the library's errors to answers, so a
route only says what to run:

==============================================  =====================================================
what happened                                    answer
==============================================  =====================================================
no ``Idempotency-Key``, or one no store holds    400 ``missing_idempotency_key`` / ``invalid_input``
two different ``Idempotency-Key`` headers        400 ``invalid_input`` (one value repeated is that key)
input not JSON, too large, a bad name            400 ``invalid_input`` (before anything is written)
the key was used for another request             422 ``idempotency_key_reused``
submitted, workers still running it              202 ``{"status": "running", "status_url"}`` + ``Location``
the workflow aborted (a refusal)                 409 ``aborted`` (or the status its reason's code maps to)
a message to a request that finished             409 ``not_delivered`` (nothing was written)
a step kept failing (worklist)                   500 ``failed``
an operator cancelled the request                409 ``cancelled``
a hot partition or the store is busy             503 ``busy`` + ``Retry-After`` (retry with the same key)
an outside call timed out or found no service    503 ``unavailable`` + ``Retry-After`` (the same)
a workflow's concurrency or rate limit is full   429 ``limit_reached`` + ``Retry-After`` (nothing ran)
==============================================  =====================================================

Errors are ``{"error": code, "detail": message}``. Needs Starlette (the
``asgi`` extra); FastAPI is Starlette underneath.

>>> from starlette.applications import Starlette
>>> from idemflow import atomic, workflow
>>> from idemflow.stores import MemoryStore
>>> @workflow("order")
... def order(body):
...     yield atomic("orders", body["id"], lambda tx: tx.increment("placed"))
...     return {"placed": body["id"]}
>>> idem = Idempotency(MemoryStore())
>>> async def place(request):
...     return JSONResponse(await idem.run(order(await request.json()), request_id=await idem.key(request)))
>>> app = Starlette()
>>> app.add_route("/orders", place, methods=["POST"])
>>> idem.install(app)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from idemflow.async_worklist._handles import astatus
from idemflow.async_worklist._submission import asubmit
from idemflow.async_worklist.deliver import arun_announcing
from idemflow.async_worklist.queues import open_async_queue
from idemflow.async_worklist.queues.async_adapters import AsyncQueue
from idemflow.async_worklist.queues.base import Queue
from idemflow.core.policy import RetryPolicy
from idemflow.engine.monad import Idem
from idemflow.errors import IdemflowError, InvalidInputError, WorkflowAborted, deprecated_error
from idemflow.errors import MissingIdempotencyKeyError as MissingIdempotencyKeyError  # importable here before
from idemflow.integrations.http_answers import KEY_HEADER, OUTSIDE_FAILURES, Refusal, one_key, refusal
from idemflow.records import RunStatus
from idemflow.running.runner_asyncio import arun
from idemflow.stores._opening import open_async_store
from idemflow.stores.base import AsyncStore, Store

if TYPE_CHECKING:
    from idemflow.client import Priority


def error(status: int, code: str, detail: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    """A JSON error answer: ``{"error": code, "detail": detail}``.

    A detail may quote what the client sent, a lone surrogate included (JSON can escape one),
    which no UTF-8 body can carry: it is escaped (``\\udc00``), so a 400 never becomes a 500."""
    return JSONResponse(Refusal(status, code, detail).body(), status, headers=headers)


def answer(exc: Exception, refusals: Mapping[str, int] | None = None) -> Response | None:
    """The HTTP answer for one of the library's errors (or an outside call's timeout or
    unreachable service: 503), or None for one that is the server's fault.

    ``refusals`` maps an abort reason's ``"code"`` (``tx.abort({"code": "sold_out", ...})``)
    to its status; other aborts answer 409.
    """
    found = refusal(exc, refusals)
    return None if found is None else error(found.status, found.code, found.detail, found.headers)


class Idempotency:
    """Idempotency-Key handling for the routes of one Starlette or FastAPI app.

    ``store`` (and ``queue``, for :meth:`submit`) are asynchronous ones or
    blocking ones used from threads of their own. ``status_url`` formats
    where a submitted request's status is (``{workflow}`` and
    ``{request_id}``, URL-quoted); :meth:`status_endpoint` serves it.
    ``refusals`` maps abort reason codes to statuses (see :func:`answer`).

    ``in_flight`` bounds how many runs, submissions and status reads this
    helper has under way at once on one event loop; the rest wait their turn
    in arrival order (nothing is refused). Leave it ``None`` (no bound) while
    the loop mostly waits on I/O. Set it when the loop's CPU is the bottleneck:
    the Azure SDK spends about 25-35 ms of CPU on a 2-step workflow, so one
    loop saturates near 30 requests/s, and past that every extra request under
    way only lengthens the queue that every other callback of the server (a
    health check, a cheap GET) waits in. On Azurite at 128 concurrent clients
    the p99 of a trivial GET fell from 325 ms to 28 ms with ``in_flight=4``,
    at a higher throughput (``benchmarks/results/asyncio_api.md``). A slot is
    held for the whole workflow, its effects' calls included: a workflow that
    waits seconds on an outside service needs a bound above the requests per
    second times those seconds.

    ``store`` and ``queue`` may be URLs (:func:`~idemflow.open_async_store`,
    :func:`~idemflow.worker.open_async_queue`): an asynchronous client belongs to the event
    loop that opened it, so they are opened in the app's lifespan, on the server's loop, and
    closed when it stops. Pass :meth:`lifespan` to the app (``FastAPI(lifespan=idem.lifespan)``)
    or ``async with idem:`` in a lifespan of your own; the helper can be made, and its
    :meth:`key` used in route declarations, before either runs:

    >>> import asyncio
    >>> idem = Idempotency("memory:", queue="memory:")
    >>> async def serving():
    ...     async with idem:
    ...         return type(idem.store).__name__, type(idem.queue).__name__
    >>> asyncio.run(serving())
    ('InlineStore', 'ThreadedQueue')
    """

    def __init__(
        self,
        store: str | Store | AsyncStore,
        *,
        queue: str | Queue | AsyncQueue | None = None,
        signing_key: bytes | str | None = None,
        status_url: str = "/requests/{workflow}/{request_id}",
        refusals: Mapping[str, int] | None = None,
        policy: RetryPolicy | None = None,
        clock: Callable[[], float] = time.time,
        in_flight: int | None = None,
    ) -> None:
        if in_flight is not None and in_flight < 1:
            raise ValueError(f"in_flight must be at least 1 (or None for no bound), not {in_flight!r}")
        self._given = (store, queue)
        self._store = None if isinstance(store, str) else store
        self._queue = None if isinstance(queue, str) else queue
        self._opened: list[AsyncStore | AsyncQueue] = []
        self.signing_key = signing_key
        self.status_url = status_url
        self.refusals = dict(refusals or {})
        self.policy = policy
        self.clock = clock
        self.in_flight = in_flight
        self._turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def store(self) -> Store | AsyncStore:
        """The store; one given as a URL exists once :meth:`open` ran (the app's lifespan)."""
        if self._store is None:
            raise RuntimeError("the store is a URL: open it in the app's lifespan (lifespan=idem.lifespan)")
        return self._store

    @property
    def queue(self) -> Queue | AsyncQueue | None:
        """The queue of submitted requests, or None; a URL is opened by :meth:`open`."""
        if self._queue is None and isinstance(self._given[1], str):
            raise RuntimeError("the queue is a URL: open it in the app's lifespan (lifespan=idem.lifespan)")
        return self._queue

    async def open(self) -> None:
        """Open the store and queue given as URLs on the running loop (nothing for objects given)."""
        store, queue = self._given
        if isinstance(store, str) and self._store is None:
            self._store = open_async_store(store)
            self._opened.append(self._store)
        if isinstance(queue, str) and self._queue is None:
            self._queue = open_async_queue(queue)
            self._opened.append(self._queue)

    async def close(self) -> None:
        """Close what :meth:`open` opened, queue first (completion records being written finish)."""
        opened, self._opened = self._opened, []
        for resource in reversed(opened):
            await resource.close()
        if isinstance(self._given[0], str):
            self._store = None
        if isinstance(self._given[1], str):
            self._queue = None

    async def __aenter__(self) -> Idempotency:
        await self.open()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: object) -> AsyncIterator[None]:
        """An ASGI lifespan that opens the store and queue and closes them at shutdown:
        ``Starlette(lifespan=idem.lifespan)``, ``FastAPI(lifespan=idem.lifespan)``."""
        async with self:
            yield

    @contextlib.asynccontextmanager
    async def _turn(self) -> AsyncIterator[None]:
        """One of the ``in_flight`` slots of the running loop (a semaphore belongs to one loop)."""
        if self.in_flight is None:
            yield
            return
        loop = asyncio.get_running_loop()
        turns = self._turns.get(loop)
        if turns is None:
            turns = self._turns[loop] = asyncio.Semaphore(self.in_flight)
        async with turns:
            yield

    async def key(self, request: Request) -> str:
        """The request's ``Idempotency-Key``, checked (a FastAPI dependency: ``Depends(idem.key)``).

        Raises :class:`~idemflow.errors.MissingIdempotencyKeyError` or
        :class:`~idemflow.errors.InvalidInputError` (400 once :meth:`install` ed), the latter also
        for two header lines with different keys (as ``http_handler`` does); one key repeated is
        that key.
        """
        return one_key(request.headers.getlist(KEY_HEADER))

    async def run(self, m: Idem[Any], *, request_id: str) -> Any:
        """Await ``m`` under ``request_id`` to its result (duplicates get the first answer).

        With a queue, what the workflow's ``send`` and ``start`` steps wake is sent to it at once
        (as workers and ``submit`` do), not left to a worker's relay."""
        async with self._turn():
            if self.queue is None:
                return await arun(
                    m, request_id=request_id, store=self.store, policy=self.policy, clock=self.clock
                )
            return await arun_announcing(
                m,
                request_id=request_id,
                store=self.store,
                queue=self.queue,
                signing_key=self.signing_key,
                policy=self.policy,
                clock=self.clock,
            )

    async def submit(
        self,
        m: Idem[Any],
        *,
        request_id: str,
        accepted: Mapping[str, Any] | None = None,
        delay: float | timedelta | None = None,
        not_before: float | datetime | None = None,
        priority: Priority = "normal",
    ) -> Any:
        """Submit ``m``: its result if it already finished, else a 202 answer with the status URL.

        The 202 body is ``{"request_id", "status": "running", "status_url", **accepted}``
        and its ``Location`` header the status URL. A refusal before the checkpoint
        raises :class:`~idemflow.errors.WorkflowAborted` (answered 409). ``delay``,
        ``not_before`` and ``priority`` are ``submit``'s (``docs/scheduling.md``).
        """
        if self.queue is None:
            raise InvalidInputError("Idempotency.submit needs a queue: Idempotency(store, queue=...)")
        async with self._turn():
            pending = await asubmit(
                m,
                request_id=request_id,
                store=self.store,
                queue=self.queue,
                signing_key=self.signing_key,
                policy=self.policy,
                clock=self.clock,
                delay=delay,
                not_before=not_before,
                priority=priority,
            )
        now = pending.outcome  # final when submit saw the request finish; else workers have it
        if now is not None and now.status is RunStatus.ABORTED:
            raise WorkflowAborted(now.reason, pending.workflow, request_id)
        if now is not None and now.status is RunStatus.COMPLETED:
            return now.result
        url = self.status_url.format(
            workflow=quote(pending.workflow, safe=""), request_id=quote(request_id, safe="")
        )
        body = {"request_id": request_id, "status": "running", "status_url": url, **(accepted or {})}
        return JSONResponse(body, 202, headers={"Location": url})

    async def status(self, workflow: str, request_id: str) -> Response:
        """Where a request stands: 200 once final (result, reason or failure), 202 while
        running, 404 if no request ``request_id`` of ``workflow`` exists."""
        async with self._turn():
            found = await astatus(self.store, workflow, request_id)
        if found.status is RunStatus.UNKNOWN:
            return error(404, "not_found", f"no request {request_id!r} of {workflow!r}")
        body: dict[str, Any] = {"request_id": request_id, "status": found.status.value}
        if found.status is RunStatus.COMPLETED:
            body["result"] = found.result
        elif found.status in (RunStatus.ABORTED, RunStatus.CANCELLED):
            body["reason"] = found.reason
        elif found.status is RunStatus.FAILED and found.failure is not None:
            body["failure"] = found.failure.to_json()
        elif found.waiting is not None:
            body["waiting"] = found.waiting
        return JSONResponse(body, 202 if found.status is RunStatus.RUNNING else 200)

    def status_endpoint(self) -> Callable[[Request], Awaitable[Response]]:
        """A Starlette endpoint for :attr:`status_url` (path parameters ``workflow``, ``request_id``)."""

        async def endpoint(request: Request) -> Response:
            return await self.status(request.path_params["workflow"], request.path_params["request_id"])

        return endpoint

    def install(self, app: Any) -> None:
        """Answer the library's errors raised by ``app``'s routes (Starlette or FastAPI), and an
        outside call's ``TimeoutError`` or ``ConnectionError`` (503, as ``http_handler`` does)."""
        for kind in (IdemflowError, *OUTSIDE_FAILURES):
            app.add_exception_handler(kind, self.handle)

    async def handle(self, _request: Request, exc: Exception) -> Response:
        """The exception handler :meth:`install` adds; an error that is the server's fault re-raises."""
        found = answer(exc, self.refusals) if isinstance(exc, (IdemflowError, *OUTSIDE_FAILURES)) else None
        if found is None:
            raise exc
        return found


__all__ = ["KEY_HEADER", "Idempotency", "answer", "error"]


def __getattr__(name: str) -> Any:
    # MissingIdempotencyKey lived here before 1.0: idemflow.errors.MissingIdempotencyKeyError now.
    return deprecated_error(__name__, name)
