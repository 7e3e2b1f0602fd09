"""Carry out the engine's requests on an asynchronous store, on the event loop (``arun``).

The twin of :mod:`idemflow._drive`: the same engine computation, each
request awaited instead of called, so nothing blocks the loop. Effects
that are plain functions run on a worker thread (they usually do blocking
I/O); coroutine functions are awaited. A retry's wait is ``asyncio.sleep``
unless the policy injected a sleep of its own.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import tenacity

from idemflow._gates import ASYNC_GATES
from idemflow._io import CallOut, Commit, CommitCache, Read, ReadMany, Scan, Send, Settle, Sleep, Steps, Turn
from idemflow._trampoline import atrampoline
from idemflow.stores.base import AsyncStore

if TYPE_CHECKING:
    from idemflow.async_worklist.queues.aio import AsyncQueue

T = TypeVar("T")

_BLOCKING_SLEEPS = (tenacity.nap.sleep, time.sleep)


async def adrive(steps: Steps[T], store: AsyncStore, queue: AsyncQueue | None = None) -> T:
    """Run ``steps`` to their value on ``store`` (and ``queue``) without blocking the loop."""

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
        return await _other(request, store, queue)

    return await atrampoline(steps, answer)


async def _other(request: object, store: AsyncStore, queue: AsyncQueue | None) -> Any:
    match request:
        case Scan(table, partition):
            return await store.scan(table, partition)
        case Send(body, delay):
            assert queue is not None, "a computation that sends needs a queue"
            return await queue.send(body, delay=delay)
        case Settle(holder, action, options):
            assert queue is not None, "a computation that settles a message needs a queue"
            async with holder.alock:
                if not holder.lost:
                    await getattr(queue, action)(holder.message, **options)
            return None
        case Sleep(seconds, sleep):
            if sleep in _BLOCKING_SLEEPS:
                await asyncio.sleep(seconds)
                return None
            slept = sleep(seconds)
            return await slept if inspect.isawaitable(slept) else slept
        case Turn(table, partition, until):
            return await ASYNC_GATES.take(store, table, partition, until)
        case CallOut(function, key):
            return await acall_out(function, key)
    raise TypeError(f"not an engine request: {request!r}")


async def acall_out(function: Callable[[str], Any], key: str) -> Any:
    """An effect on the loop: awaited if it is a coroutine function, else run on a thread."""
    if inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        getattr(function, "__call__", None)  # noqa: B004 - an object whose __call__ is async
    ):
        return await function(key)
    result = await asyncio.to_thread(function, key)
    return await result if inspect.isawaitable(result) else result
