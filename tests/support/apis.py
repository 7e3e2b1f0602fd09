"""The two APIs the conformance suite runs on, behind one interface: ``api``.

A conformance test that runs workflows takes the ``api`` fixture
(``tests/conformance/conftest.py``) and calls ``api.run``, ``api.run_result``,
``api.submit``, ``api.status`` and ``api.worker``; it runs once per API.
:class:`BlockingApi` calls :func:`idemflow.run` and the blocking worklist;
:class:`AsyncioApi` awaits :func:`idemflow.arun` and the asyncio worklist on
one event loop shared by the session (a test's threads then race on that
loop, as an ASGI server's requests do). Each counts the calls that reached
its API, so a test that never did fails instead of passing on the other API.
On the asyncio API, each store is replaced by the twin its backend's registry
entry gives (DynamoDB and Azure on the SDKs' own asynchronous clients); a memory store is awaited without the
drivers' shortcut (:class:`AwaitedStore`: bodies' reads are prefetched, as on
DynamoDB and Azure); SQLite and wrapped stores (fault injection) run on
threads.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable
from typing import Any, Literal, Protocol, TypeVar

from returns.result import Result

import idemflow
from idemflow import Idem
from idemflow.errors import WorkflowAborted
from idemflow.stores import async_twin as stores_async_twin
from idemflow.stores.async_adapters import InlineStore, ThreadedStore
from idemflow.stores.base import AsyncStore, Store
from idemflow.stores.memory import MemoryStore

T = TypeVar("T")


class LoopThread:
    """An event loop on a daemon thread, for blocking callers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="idemflow-test-loop", daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()


class AwaitedStore(InlineStore):
    """A memory store behind awaited calls the drivers know nothing about.

    ``to_async`` gives a memory store's bodies direct reads (``InlineStore``
    itself); the drivers take this subclass for any asynchronous store, so
    the path of the SDKs' stores, where a body's reads are prefetched and the
    body runs again, stays covered without a server.
    """

    async def tables(self) -> list[str]:
        """As the SDKs' stores list theirs (``acollect`` asks)."""
        return self.store.tables()


LOOP = LoopThread()
_TWINS: dict[int, tuple[Store, AsyncStore]] = {}
_TWINS_LOCK = threading.Lock()


def async_twin(store: Store) -> AsyncStore:
    """The store on its SDK's asynchronous client (same tables), or on threads of its own:
    whatever its backend's registry entry gives (:func:`idemflow.stores.async_twin`)."""
    with _TWINS_LOCK:
        known = _TWINS.get(id(store))
        if known is not None and known[0] is store:
            return known[1]
        twin = AwaitedStore(store) if type(store) is MemoryStore else stores_async_twin(store)
        _TWINS[id(store)] = (store, twin)
        return twin


def _own_clients(twin: object) -> bool:
    """Whether a twin holds SDK clients of its own (an adapter only borrows the blocking store)."""
    return not isinstance(twin, (InlineStore, ThreadedStore))


def close_twins() -> None:
    """Close the asynchronous twins made so far (their clients belong to the shared loop)."""
    with _TWINS_LOCK:
        twins = list(_TWINS.values())
        _TWINS.clear()
    for _, twin in twins:
        if _own_clients(twin):
            LOOP.run(twin.close())


async def _flushed(store: AsyncStore, coroutine: Coroutine[Any, Any, T]) -> T:
    try:
        return await coroutine
    finally:  # the test may then flush() the blocking store, not this twin: flush it here
        await store.flush()


def async_queue_twin(queue: Any) -> Any:
    """The queue on its SDK's asynchronous client (same queue), or on threads of its own."""
    from idemflow.async_worklist.queues import async_queue_twin as queues_async_twin

    return queues_async_twin(queue)


def _own_queue_clients(twin: Any) -> bool:
    from idemflow.async_worklist.queues import ThreadedQueue

    return not isinstance(twin, ThreadedQueue)


ApiName = Literal["blocking", "asyncio"]


class Calls:
    """How many calls reached one API during a test (from any of the test's threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def note(self) -> None:
        with self._lock:
            self.count += 1


class BlockingApi:
    """idemflow's blocking API: :func:`idemflow.run`, ``submit``, ``status``, ``Worker``."""

    name: ApiName = "blocking"

    def __init__(self) -> None:
        self.calls = Calls()

    def run(self, m: Idem[T], *, request_id: str, store: Store, **options: Any) -> T:
        self.calls.note()
        return idemflow.run(m, request_id=request_id, store=store, **options)

    def run_result(
        self, m: Idem[T], *, request_id: str, store: Store, **options: Any
    ) -> Result[T, WorkflowAborted]:
        self.calls.note()
        return idemflow.run_result(m, request_id=request_id, store=store, **options)

    def submit(self, m: Idem[Any], *, request_id: str, store: Store, queue: Any, **options: Any) -> Any:
        from idemflow.client import submit

        self.calls.note()
        return submit(m, request_id=request_id, store=store, queue=queue, **options)

    def status(self, store: Store, workflow: str, request_id: str) -> Any:
        from idemflow.client import status

        self.calls.note()
        return status(store, workflow, request_id)

    def get_event(self, store: Store, workflow: str, request_id: str, key: str, **options: Any) -> Any:
        """:func:`idemflow.client.get_event`."""
        from idemflow.client import get_event

        self.calls.note()
        return get_event(store, workflow, request_id, key, **options)

    def read_stream(
        self, store: Store, workflow: str, request_id: str, key: str, **options: Any
    ) -> list[Any]:
        """Every value :func:`idemflow.client.read_stream` yields, until the stream is over."""
        from idemflow.client import read_stream

        self.calls.note()
        return list(read_stream(store, workflow, request_id, key, **options))

    def abort_request(
        self, store: Store, workflows: Iterable[Any], workflow: str, request_id: str, **options: Any
    ) -> Any:
        """An operator's abort (:func:`idemflow.admin.abort_request`): the record it ends with."""
        from idemflow.admin import abort_request

        self.calls.note()
        return abort_request(store, workflows, workflow, request_id, **options)

    def cancel(self, store: Store, workflow: str, request_id: str, **options: Any) -> Any:
        """An operator's cancel (:func:`idemflow.admin.cancel`): the status the request had."""
        from idemflow.admin import cancel

        self.calls.note()
        return cancel(store, workflow, request_id, **options)

    def result(self, store: Store, workflow: str, request_id: str, **options: Any) -> Any:
        """A handle's ``result()`` (:class:`~idemflow.client.Pending`) for the request; its polls
        never sleep here: a test that needs one fails instead of waiting."""
        from idemflow.client import Pending

        self.calls.note()
        return Pending(store, workflow, request_id, sleep=_no_sleep).result(**options)

    def worker(self, workflows: Iterable[Any], *, store: Store, queue: Any, **options: Any) -> Any:
        from idemflow.worker import Worker

        self.calls.note()
        return Worker(workflows, store=store, queue=queue, **options)

    def close(self) -> None:
        """Nothing of its own to close."""


class AsyncioApi:
    """idemflow's asyncio API awaited on the session's loop: :func:`idemflow.arun`,
    ``asubmit``, ``astatus``, ``AsyncWorker``, on the asynchronous twin of the store given."""

    name: ApiName = "asyncio"

    def __init__(self) -> None:
        self.calls = Calls()

    def run(self, m: Idem[T], *, request_id: str, store: Store, **options: Any) -> T:
        self.calls.note()
        twin = async_twin(store)
        return LOOP.run(_flushed(twin, idemflow.arun(m, request_id=request_id, store=twin, **options)))

    def run_result(
        self, m: Idem[T], *, request_id: str, store: Store, **options: Any
    ) -> Result[T, WorkflowAborted]:
        self.calls.note()
        twin = async_twin(store)
        return LOOP.run(_flushed(twin, idemflow.arun_result(m, request_id=request_id, store=twin, **options)))

    def submit(self, m: Idem[Any], *, request_id: str, store: Store, queue: Any, **options: Any) -> Any:
        """``asubmit`` on the shared loop; the handle it gives is asked through the blocking store."""
        from idemflow.client import AsyncPending, Pending, asubmit

        self.calls.note()
        twin, sink = async_twin(store), async_queue_twin(queue)

        async def submitted() -> AsyncPending:
            try:
                return await asubmit(m, request_id=request_id, store=twin, queue=sink, **options)
            finally:
                if sink is not queue and _own_queue_clients(sink):
                    await sink.close()

        pending = LOOP.run(_flushed(twin, submitted()))
        return Pending(store, pending.workflow, request_id, outcome=pending.outcome)

    def status(self, store: Store, workflow: str, request_id: str) -> Any:
        from idemflow.client import astatus

        self.calls.note()
        return LOOP.run(astatus(async_twin(store), workflow, request_id))

    def get_event(self, store: Store, workflow: str, request_id: str, key: str, **options: Any) -> Any:
        """:func:`idemflow.client.aget_event` on the store's asynchronous twin."""
        from idemflow.client import aget_event

        self.calls.note()
        return LOOP.run(aget_event(async_twin(store), workflow, request_id, key, **options))

    def read_stream(
        self, store: Store, workflow: str, request_id: str, key: str, **options: Any
    ) -> list[Any]:
        """Every value :func:`idemflow.client.aread_stream` yields, on the store's asynchronous twin."""
        from idemflow.client import aread_stream

        self.calls.note()
        twin = async_twin(store)

        async def read() -> list[Any]:
            return [value async for value in aread_stream(twin, workflow, request_id, key, **options)]

        return LOOP.run(read())

    def abort_request(
        self, store: Store, workflows: Iterable[Any], workflow: str, request_id: str, **options: Any
    ) -> Any:
        """:func:`idemflow.admin.aabort_request` on the store's asynchronous twin."""
        from idemflow.admin import aabort_request

        self.calls.note()
        twin = async_twin(store)
        return LOOP.run(_flushed(twin, aabort_request(twin, workflows, workflow, request_id, **options)))

    def cancel(self, store: Store, workflow: str, request_id: str, **options: Any) -> Any:
        """:func:`idemflow.admin.acancel` on the store's asynchronous twin."""
        from idemflow.admin import acancel

        self.calls.note()
        twin = async_twin(store)
        return LOOP.run(_flushed(twin, acancel(twin, workflow, request_id, **options)))

    def result(self, store: Store, workflow: str, request_id: str, **options: Any) -> Any:
        """:meth:`~idemflow.client.AsyncPending.result` on the store's asynchronous twin, polling
        once an hour: a test that needs a second look fails on the minute it is given instead."""
        from idemflow.client import AsyncPending

        self.calls.note()
        handle = AsyncPending(async_twin(store), workflow, request_id)
        return LOOP.run(asyncio.wait_for(handle.result(poll=3600.0, **options), 60.0))

    def worker(self, workflows: Iterable[Any], *, store: Store, queue: Any, **options: Any) -> Any:
        return AsyncWorkerBlocking(workflows, store=store, queue=queue, calls=self.calls, **options)

    def close(self) -> None:
        """Close the twins this test's calls made (their clients belong to the shared loop)."""
        close_twins()


Api = BlockingApi | AsyncioApi


def _no_sleep(seconds: float) -> None:
    raise AssertionError(f"a handle's result() polled again (for {seconds} s): it should have answered")


class Handles(Protocol):
    """What message-by-message tests use of a worker, blocking or asyncio (``api.worker``)."""

    def handle(self, message: Any) -> bool: ...


class AsyncWorkerBlocking:
    """An :class:`~idemflow.worker.AsyncWorker` behind ``Worker``'s blocking methods.

    Built from ``Worker``'s arguments; its store and queue are the asynchronous twins of the
    ones given, and its calls run on the shared loop (each counted as a call of the asyncio API:
    building a worker runs nothing).
    """

    def __init__(self, workflows: Any, *, store: Store, queue: Any, calls: Calls, **options: Any) -> None:
        from idemflow.worker import AsyncWorker

        self._calls = calls
        self._queue = async_queue_twin(queue)
        self._own_queue = self._queue is not queue and _own_queue_clients(self._queue)
        self._twin = async_twin(store)
        self.inner = AsyncWorker(workflows, store=self._twin, queue=self._queue, **options)

    @property
    def stats(self) -> Any:
        return self.inner.stats

    def run(self, idle_timeout: float | None = None, **options: Any) -> Any:
        self._calls.note()
        return LOOP.run(_flushed(self._twin, self.inner.run(idle_timeout, **options)))

    def handle(self, message: Any) -> bool:
        self._calls.note()
        return LOOP.run(_flushed(self._twin, self.inner.handle(message)))

    def relay(self) -> int:
        self._calls.note()
        return LOOP.run(self.inner.relay())

    def stop(self) -> None:
        LOOP.loop.call_soon_threadsafe(self.inner.stop)

    def __del__(self) -> None:
        if self._own_queue and not LOOP.loop.is_closed():
            asyncio.run_coroutine_threadsafe(self._queue.close(), LOOP.loop)
