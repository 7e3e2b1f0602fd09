"""The HTTP plumbing the samples' APIs share (Starlette on uvicorn, asyncio throughout).

Each sample's API is a service class whose ``async`` methods run the
workflows through :class:`idemflow.asgi.Idempotency` (``arun`` and
``asubmit`` under the client's ``Idempotency-Key``) and read with the
awaitable reads, answering Starlette responses; its Starlette app is a thin
layer of routes over it. Nothing runs on a thread per request: the store is
an asynchronous one (``open_async_store``), opened in the app's lifespan.
:mod:`idemflow.asgi` reads the key, answers the library's errors, the ``202``
of a submitted request and its status URL; what it does not do lives here:

- :class:`Service`: what a sample's service holds (store, queue, signing key,
  clock, the :class:`~idemflow.asgi.Idempotency` over them, which opens URLs
  on the loop in the app's lifespan and closes them);
  :meth:`Service.failure` answers what a method raised: the sample's
  exception for a body of the wrong shape ``422 invalid``, the library's
  errors as :func:`idemflow.asgi.answer` does with the sample's refusal statuses;
- :func:`application`: the Starlette app of a service's routes (lifespan,
  error handlers, ``/healthz``), built from :func:`post` and :func:`get_`;
- :class:`Answer` and :class:`Direct`: an answer as data, what the load
  generators compare, and a service's methods called from the load's threads
  without HTTP (``load --store``);
- :func:`serve`.

>>> import asyncio
>>> from idemflow import WorkflowAborted
>>> from idemflow.stores import MemoryStore
>>> service = Service(MemoryStore())
>>> refused = WorkflowAborted({"code": "too_low", "message": "5 does not beat 7"}, "bid", "k")
>>> answer_of(service.failure(refused))
Answer(status=409, body={'error': 'too_low', 'detail': '5 does not beat 7'})
>>> answer_of(service.failure(ValueError("'amount' must be a number")))
Answer(status=422, body={'error': 'invalid', 'detail': "'amount' must be a number"})
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar, Generic, ParamSpec, TypeVar

import uvicorn
from anyio.from_thread import BlockingPortal, start_blocking_portal
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from idemflow import Idem, IdemflowError
from idemflow.asgi import Idempotency, answer, error
from idemflow.stores import AsyncStore, Store
from idemflow.worker import AsyncQueue, Queue

P = ParamSpec("P")
S = TypeVar("S", bound="Service")


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer as data: what the load generator compares (copies of a request must agree)."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)


def answer_of(response: Response) -> Answer:
    """A JSON response as an :class:`Answer`."""
    return Answer(response.status_code, json.loads(bytes(response.body)))


class Service:
    """The base of the samples' services.

    ``store`` is an asynchronous store, a blocking one (its calls then run on
    threads of its own) or a store URL, opened with ``open_async_store`` by
    :meth:`connect` (the app's lifespan) on the loop that uses it; its tables
    must exist (``serve`` creates them). ``queue``, for the asynchronous
    variant (submitted requests are answered at their checkpoint, workers
    finish them), is likewise a queue or a URL; ``signing_key`` signs its
    messages; ``clock`` is the time the workflows run by. A sample sets its
    refusal codes' HTTP ``statuses``, its ``invalid`` exception (a body of the
    wrong shape, 422) and the ``status_url`` of its submitted requests.
    """

    statuses: ClassVar[Mapping[str, int]] = {}
    invalid: ClassVar[type[Exception]] = ValueError
    status_url: ClassVar[str] = "/requests/{workflow}/{request_id}"

    def __init__(
        self,
        store: str | Store | AsyncStore,
        queue: str | Queue | AsyncQueue | None = None,
        *,
        signing_key: bytes | str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.signing_key = signing_key
        self.clock = clock
        self._given_queue = queue
        self._idem = Idempotency(
            store,
            queue=queue,
            signing_key=signing_key,
            status_url=self.status_url,
            refusals=self.statuses,
            clock=clock,
        )

    async def connect(self) -> None:
        """Open the store and queue given as URLs, on the running loop (:meth:`Idempotency.open`)."""
        await self._idem.open()

    async def disconnect(self) -> None:
        """Close what :meth:`connect` opened (the completion records still being written finish first)."""
        await self._idem.close()

    @property
    def idem(self) -> Idempotency:
        """The ``Idempotency-Key`` handling over this service's store and queue."""
        return self._idem

    @property
    def store(self) -> Store | AsyncStore:
        return self.idem.store

    @property
    def queue(self) -> str | Queue | AsyncQueue | None:
        """The queue of the asynchronous variant (its URL until :meth:`connect`), or None."""
        if isinstance(self._given_queue, str):
            try:
                return self.idem.queue
            except RuntimeError:
                return self._given_queue
        return self.idem.queue

    async def run(self, m: Idem[Any], key: str) -> Any:
        """Await ``m`` under the client's key (a duplicate gets the first answer)."""
        return await self.idem.run(m, request_id=key)

    async def submit(
        self, m: Idem[Any], key: str, *, done: int, accepted: Mapping[str, Any] | None = None
    ) -> Response:
        """The asynchronous variant: submit ``m`` and answer once it reached its checkpoint.

        ``202 {"request_id", "status": "running", "status_url", **accepted}`` while workers
        finish it; ``done`` with the result if it had already finished (a duplicate).
        """
        found = await self.idem.submit(m, request_id=key, accepted=accepted)
        return found if isinstance(found, Response) else JSONResponse(found, done)

    def failure(self, exc: Exception) -> Response | None:
        """The answer to what a method raised, or None for an error that is the server's fault."""
        if isinstance(exc, IdemflowError):  # first: InvalidInputError is a ValueError too
            return answer(exc, self.statuses)
        if isinstance(exc, self.invalid):
            return error(422, "invalid", str(exc))
        return None


# -- Starlette plumbing -------------------------------------------------------------------

Endpoint = Callable[[Request], Awaitable[Response]]


def post(service: Service, call: Callable[[str, Mapping[str, str], object], Awaitable[Response]]) -> Endpoint:
    """An endpoint taking a JSON body: ``call(idempotency key, path params, body)``.

    :meth:`idemflow.asgi.Idempotency.key` reads the key: a missing one is
    answered ``400 missing_idempotency_key``, one no store can hold ``400 invalid_input``.
    """

    async def endpoint(request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            return error(400, "invalid_json", "the request body is not JSON")
        return await call(await service.idem.key(request), request.path_params, body)

    return endpoint


def get_(call: Callable[[Mapping[str, str], Mapping[str, str]], Awaitable[Response]]) -> Endpoint:
    """A read endpoint: ``call(path params, query params)``."""

    async def endpoint(request: Request) -> Response:
        return await call(request.path_params, request.query_params)

    return endpoint


async def healthz(_request: Request) -> Response:
    return JSONResponse({"ok": True})


def application(service: Service, routes: Sequence[BaseRoute]) -> Starlette:
    """The ASGI app of ``routes`` over ``service``: its lifespan opens and closes the service's
    store and queue, what a route raises is answered by :meth:`Service.failure`, and
    ``GET /healthz`` answers 200 once the app is up."""

    lifespan = service.idem.lifespan

    async def handle(_request: Request, exc: Exception) -> Response:
        found = service.failure(exc)
        if found is None:
            raise exc
        return found

    return Starlette(
        routes=[Route("/healthz", healthz), *routes],
        lifespan=lifespan,
        exception_handlers={IdemflowError: handle, service.invalid: handle},
    )


def serve(app: Starlette, host: str, port: int) -> None:
    """Run ``app`` on uvicorn until interrupted (access log off: the load generator is chatty)."""
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)


# -- without HTTP -------------------------------------------------------------------------------


class Direct(Generic[S], AbstractContextManager["Direct[S]"]):
    """A service's methods called from threads, as the load generators call an API.

    Inside ``with Direct(service) as call:``, ``call(service.method, *args)``
    awaits the method on an event loop of its own (a thread, the service's
    store and queue opened there) and gives what it answered, or raised, as
    an :class:`Answer`. Thread-safe: the load's users call it at once.

    >>> from idemflow import atomic, workflow
    >>> from idemflow.stores import MemoryStore
    >>> @workflow("count")
    ... def count(_body):
    ...     return (yield atomic("counts", "all", lambda tx: tx.increment("n") or tx.get("n")))
    >>> class Counting(Service):
    ...     async def count(self, key):
    ...         return JSONResponse({"n": await self.run(count({}), key)})
    >>> service = Counting(MemoryStore())
    >>> with Direct(service) as call:
    ...     for key in ("a", "a", "b", ""):
    ...         call(service.count, key)
    Answer(status=200, body={'n': 1})
    Answer(status=200, body={'n': 1})
    Answer(status=200, body={'n': 2})
    Answer(status=400, body={'error': 'invalid_input', 'detail': "invalid request id '': must not be empty"})
    """

    def __init__(self, service: S) -> None:
        self.service = service
        self._portal: BlockingPortal | None = None
        self._running: AbstractContextManager[BlockingPortal] | None = None

    def __enter__(self) -> Direct[S]:
        self._running = start_blocking_portal()
        self._portal = self._running.__enter__()
        self._portal.call(self.service.connect)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, trace: TracebackType | None
    ) -> None:
        assert self._portal is not None and self._running is not None
        try:
            self._portal.call(self.service.disconnect)
        finally:
            self._running.__exit__(kind, exc, trace)
            self._portal = self._running = None

    def __call__(self, method: Callable[P, Awaitable[Response]], *args: P.args, **kwargs: P.kwargs) -> Answer:
        if self._portal is None:
            raise RuntimeError("call a Direct inside its with block")
        return self._portal.call(self._answer, functools.partial(method, *args, **kwargs))

    async def _answer(self, call: Callable[[], Awaitable[Response]]) -> Answer:
        try:
            response = await call()
        except Exception as exc:
            found = self.service.failure(exc)
            if found is None:
                raise
            response = found
        return answer_of(response)


__all__ = [
    "Answer",
    "Direct",
    "Endpoint",
    "Service",
    "answer_of",
    "application",
    "get_",
    "healthz",
    "post",
    "serve",
]
