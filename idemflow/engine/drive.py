"""Carry out the engine's requests on a blocking store, in the caller's thread (``run``).

The engine (:mod:`idemflow.engine.execution`) yields what it needs (:mod:`idemflow.core.requests`);
this loop answers each request with the store's call, or throws the store's
exception back in where the engine asked, so the engine handles it exactly
as if it had made the call itself.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from idemflow.core.policy import pause
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
from idemflow.core.trampoline import trampoline
from idemflow.engine.flights import abandon, collect, launch
from idemflow.engine.turns import GATES
from idemflow.errors import EffectTimeoutError
from idemflow.stores.base import Store

T = TypeVar("T")


STORE_REQUESTS = frozenset({Commit, Read, ReadMany, CommitCache, Scan})
"""The requests a blocking store answers by itself (the rest need the queue, the clock or an effect)."""


Answers = Callable[[object], Any]
"""Answers to the requests the driver leaves to its caller (the worklist's queue requests)."""


def drive(steps: Steps[T], store: Store, more: Answers | None = None) -> T:
    """Run ``steps`` to their value on ``store``; ``more`` answers what a store, the clock and an
    effect do not (``submit`` and workers pass their queue's answers)."""

    def answer(request: object) -> Any:
        if type(request) in STORE_REQUESTS:
            return store_answer(store, request)
        return _other(request, store, more)

    return trampoline(steps, answer)


def store_answer(store: Store, request: object) -> Any:
    """Answer one of :data:`STORE_REQUESTS` with the store's blocking call."""
    kind = type(request)  # the most frequent first
    if kind is Commit:
        return store.commit(request.ops)  # type: ignore[attr-defined]
    if kind is Read:
        return store.read(request.ref)  # type: ignore[attr-defined]
    if kind is ReadMany:
        return store.read_many(request.refs)  # type: ignore[attr-defined]
    if kind is CommitCache:
        return store.commit_cache(request.ops)  # type: ignore[attr-defined]
    assert isinstance(request, Scan), request
    return list(store.scan(request.table, request.partition))


def _other(request: object, store: Store, more: Answers | None) -> Any:
    match request:
        case Sleep():
            return pause(request)
        case Turn(table, partition, until):
            return GATES.take(store, table, partition, until)
        case CallOut(function, key, _lease, timeout, name):
            return call_out(function, key) if timeout is None else _timed(function, key, timeout, name)
        case Launch(launched):  # a branch of all_of / any_of: on a thread of its own
            return launch(lambda: _other(launched, store, more))
        case Collect(flights):
            return collect(flights)
        case Abandon(flights):
            return abandon(flights)
    if more is not None:
        return more(request)
    raise TypeError(f"not an engine request: {request!r}")


def call_out(function: Callable[[str], Any], key: str) -> Any:
    """An effect in a blocking run: a coroutine function is run to completion on its own loop."""
    result = function(key)
    if inspect.isawaitable(result):
        return _wait(result)
    return result


def _timed(function: Callable[[str], Any], key: str, timeout: float, name: str) -> Any:
    """:func:`call_out` bounded by ``timeout``: the call goes on in a daemon thread that nobody
    waits for once the time is up (Python cannot stop a thread); its answer is dropped."""
    box: list[Any] = []
    errors: list[BaseException] = []

    def runner() -> None:
        try:
            box.append(call_out(function, key))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            errors.append(exc)

    thread = threading.Thread(target=runner, name="idemflow-effect", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise EffectTimeoutError(name, timeout)
    if errors:
        raise errors[0]
    return box[0]


def _wait(awaitable: Awaitable[Any]) -> Any:
    async def waited() -> Any:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop in this thread: the usual case for run()
        return asyncio.run(waited())
    # run() called from a thread that runs an event loop: finish it on another thread
    box: list[Any] = []
    errors: list[BaseException] = []

    def runner() -> None:
        try:
            box.append(asyncio.run(waited()))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            errors.append(exc)

    thread = threading.Thread(target=runner, name="idemflow-effect")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return box[0]
