"""Carry out the engine's requests on an asynchronous store, on the event loop (``arun``).

The twin of :mod:`idemflow.engine.drive`: the same engine computation, each
request awaited instead of called, so nothing blocks the loop. Effects
that are plain functions run on a worker thread (they usually do blocking
I/O); coroutine functions are awaited. A retry's wait is ``asyncio.sleep``
unless the policy injected a sleep of its own.

A blocking store adapted with :class:`~idemflow.stores.async_adapters.ThreadedStore`
(SQLite) is not called one request per thread hop: the computation itself
runs on the store's threads, answering its store requests there, and comes
back to the loop only for what needs the loop (an effect, a retry's wait, a
turn on a hot partition, the queue). A 2-step workflow then costs one or two
hops instead of one per read and commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from idemflow.core.policy import apause
from idemflow.core.requests import (
    Abandon,
    CallOut,
    Collect,
    Commit,
    CommitCache,
    Launch,
    Read,
    ReadMany,
    Scan,
    Sleep,
    Steps,
    Turn,
)
from idemflow.core.trampoline import atrampoline
from idemflow.engine.drive import STORE_REQUESTS, store_answer
from idemflow.engine.flights import abandon, acollect, alaunch
from idemflow.engine.turns import ASYNC_GATES
from idemflow.errors import EffectTimeoutError
from idemflow.stores.async_adapters import ThreadedStore
from idemflow.stores.base import AsyncStore, Store

T = TypeVar("T")


AsyncAnswers = Callable[[object], Awaitable[Any]]
"""Answers to the requests the driver leaves to its caller (the worklist's queue requests)."""


async def adrive(steps: Steps[T], store: AsyncStore, more: AsyncAnswers | None = None) -> T:
    """Run ``steps`` to their value on ``store`` without blocking the loop; ``more`` answers what
    a store, the clock and an effect do not (see :func:`idemflow.engine.drive.drive`)."""
    if type(store) is ThreadedStore:  # exactly, as sync_reader: its calls are bypassed there
        return await _on_threads(steps, store, more)

    async def answer(request: object) -> Any:
        kind = type(request)
        if kind is Commit:
            return await store.commit(request.ops)  # type: ignore[attr-defined]
        if kind is Read:
            return await store.read(request.ref)  # type: ignore[attr-defined]
        if kind is ReadMany:
            return await store.read_many(request.refs)  # type: ignore[attr-defined]
        if kind is CommitCache:
            return await store.commit_cache(request.ops)  # type: ignore[attr-defined]
        return await _other(request, store, more)

    return await atrampoline(steps, answer)


class _Done:
    """A computation that finished on a store thread, with its value."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


async def _on_threads(steps: Steps[T], store: ThreadedStore, more: AsyncAnswers | None) -> T:
    """:func:`adrive` for a blocking store: run ``steps`` on its threads, come back for the rest."""
    blocking = store.store
    cancelled = threading.Event()
    value: Any = None
    failure: BaseException | None = None
    while True:
        job = asyncio.wrap_future(
            store.pool.submit(
                contextvars.copy_context().run, _segment, steps, blocking, value, failure, cancelled
            )
        )
        try:
            got = await asyncio.shield(job)
        except asyncio.CancelledError:
            # The segment cannot be interrupted on its thread: it unwinds the computation there,
            # at its next request, while the cancellation reaches the caller at once.
            cancelled.set()
            job.add_done_callback(lambda done: _unwind(done, steps, store, cancelled))
            raise
        if type(got) is _Done:
            result: T = got.value
            return result
        value = failure = None
        try:
            value = await _other(got, store, more)
        except BaseException as exc:  # noqa: BLE001 - thrown back where the computation asked
            failure = exc


def _segment(
    steps: Steps[Any], store: Store, value: Any, failure: BaseException | None, cancelled: threading.Event
) -> object:
    """On a store thread: resume ``steps`` and answer its store requests until one needs the loop.

    Answers the request that needs the loop, or :class:`_Done`. Once the caller
    was cancelled, every request is answered by throwing ``CancelledError`` in,
    so the computation's ``finally`` blocks run here.
    """
    while True:
        try:
            request = steps.send(value) if failure is None else steps.throw(failure)
        except StopIteration as stop:
            return _Done(stop.value)
        value = failure = None
        if cancelled.is_set():
            failure = asyncio.CancelledError()
        elif type(request) in STORE_REQUESTS:
            try:
                value = store_answer(store, request)
            except BaseException as exc:  # noqa: BLE001 - thrown back where the computation asked
                failure = exc
        else:
            return request


def _unwind(
    done: asyncio.Future[object], steps: Steps[Any], store: ThreadedStore, cancelled: threading.Event
) -> None:
    """After a cancelled caller: a segment that stopped at a request the loop would have answered
    unwinds the computation on a store thread; errors have no one left to hear them."""
    if done.cancelled() or done.exception() is not None or type(done.result()) is _Done:
        return
    store.pool.submit(_quietly, steps, store.store, cancelled)


def _quietly(steps: Steps[Any], store: Store, cancelled: threading.Event) -> None:
    with contextlib.suppress(BaseException):  # the caller was cancelled and is gone
        _segment(steps, store, None, asyncio.CancelledError(), cancelled)


async def _other(request: object, store: AsyncStore, more: AsyncAnswers | None) -> Any:
    match request:
        case Scan(table, partition):
            return await store.scan(table, partition)
        case Sleep():
            return await apause(request)
        case Turn(table, partition, until):
            return await ASYNC_GATES.take(store, table, partition, until)
        case CallOut(function, key, _lease, timeout, name):
            if timeout is None:
                return await acall_out(function, key)
            try:
                async with asyncio.timeout(timeout) as within:
                    return await acall_out(function, key)
            except TimeoutError:
                if within.expired():  # not a TimeoutError the call raised itself
                    raise EffectTimeoutError(name, timeout) from None
                raise
        case Launch(launched):  # a branch of all_of / any_of: a task of its own
            return alaunch(_other(launched, store, more))
        case Collect(flights):
            return await acollect(flights)
        case Abandon(flights):
            return abandon(flights)
    if more is not None:
        return await more(request)
    raise TypeError(f"not an engine request: {request!r}")


async def acall_out(function: Callable[[str], Any], key: str) -> Any:
    """An effect on the loop: awaited if it is a coroutine function, else run on a thread."""
    if inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        getattr(function, "__call__", None)  # noqa: B004 - an object whose __call__ is async
    ):
        return await function(key)
    result = await asyncio.to_thread(function, key)
    return await result if inspect.isawaitable(result) else result
