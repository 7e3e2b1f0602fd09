"""Asynchronous stores: the :class:`~idemflow.stores.base.AsyncStore` contract for event loops.

DynamoDB and Azure have stores on their SDKs' own asynchronous clients
(:mod:`idemflow.stores.dynamodb_async`, :mod:`idemflow.stores.azure_tables_async`).
Every other store is a blocking :class:`~idemflow.stores.base.Store` whose
calls are handed to threads of its own (:class:`ThreadedStore`): SQLite's
calls wait on the disk, and the loop must never wait. :class:`MemoryStore`'s
calls never wait on I/O, so they run on the loop itself (:class:`InlineStore`).

``arun``, ``asubmit`` and the asyncio worker accept either kind; a blocking
store is adapted with :func:`to_async` (once per store).

>>> import asyncio
>>> from idemflow import arun, atomic
>>> from idemflow.stores import MemoryStore
>>> step = atomic("accounts", "ann", lambda tx: tx.get("n", 0))
>>> asyncio.run(arun(step, request_id="r", store=MemoryStore()))
0
"""

from __future__ import annotations

import asyncio
import inspect
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from idemflow.stores.base import AsyncStore, CommitOutcome, Op, Row, RowRef, Store
from idemflow.stores.memory import MemoryStore

T = TypeVar("T")

THREADS = 8
"""Threads of a :class:`ThreadedStore`: SQLite commits serialise anyway; reads run side by side."""


class ThreadedStore:
    """A blocking store whose calls run on a thread pool of its own.

    ``arun`` and the asyncio worker do not call it one method at a time: their
    driver runs the whole computation on :attr:`pool` and comes back to the loop
    only for what needs the loop (one thread hop per run instead of one per call).
    """

    def __init__(self, store: Store, *, threads: int = THREADS) -> None:
        self.store = store
        self.capabilities = store.capabilities
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="idemflow-store")
        """The threads its calls run on (:func:`idemflow.engine.drive_asyncio.adrive` runs whole
        computations there)."""

    async def _call(self, function: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.pool, function, *args)

    async def read(self, ref: RowRef) -> Row | None:
        return await self._call(self.store.read, ref)

    async def read_many(self, refs: Sequence[RowRef]) -> list[Row | None]:
        return await self._call(self.store.read_many, refs)

    async def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        return await self._call(self.store.commit, ops)

    async def commit_cache(self, ops: Sequence[Op]) -> None:
        await self._call(self.store.commit_cache, ops)

    async def scan(self, table: str, partition: str | None = None) -> list[tuple[str, str, Row]]:
        return await self._call(lambda: list(self.store.scan(table, partition)))

    async def flush(self) -> None:
        await self._call(self.store.flush)

    async def close(self) -> None:
        """Close the store and stop the threads (the pool's queued calls finish first)."""
        await self._call(self.store.close)
        self.pool.shutdown(wait=False)

    @property
    def round_trips(self) -> int:
        return self.store.round_trips

    def __repr__(self) -> str:
        return f"ThreadedStore({self.store!r})"


class InlineStore:
    """A store whose calls never wait on I/O (memory), called on the loop itself."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.capabilities = store.capabilities

    async def read(self, ref: RowRef) -> Row | None:
        return self.store.read(ref)

    async def read_many(self, refs: Sequence[RowRef]) -> list[Row | None]:
        return self.store.read_many(refs)

    async def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        return self.store.commit(ops)

    async def commit_cache(self, ops: Sequence[Op]) -> None:
        self.store.commit_cache(ops)

    async def scan(self, table: str, partition: str | None = None) -> list[tuple[str, str, Row]]:
        return list(self.store.scan(table, partition))

    async def flush(self) -> None:
        self.store.flush()

    async def close(self) -> None:
        self.store.close()

    @property
    def round_trips(self) -> int:
        return self.store.round_trips

    def __repr__(self) -> str:
        return f"InlineStore({self.store!r})"


_ADAPTED: weakref.WeakKeyDictionary[Store, AsyncStore] = weakref.WeakKeyDictionary()


def sync_reader(store: AsyncStore) -> Store | None:
    """The blocking store under an adapted one, for step bodies' reads, else None.

    The drivers run a :class:`ThreadedStore`'s computations on its threads and an
    :class:`InlineStore`'s reads never wait, so their bodies may read directly
    instead of being run again once prefetched rows arrive.
    """
    if type(store) is ThreadedStore or type(store) is InlineStore:  # exactly: a subclass may await
        return store.store
    return None


def is_async(store: object) -> bool:
    """Is ``store`` an :class:`AsyncStore` (its commit a coroutine function)?"""
    return inspect.iscoroutinefunction(getattr(type(store), "commit", None))


def to_async(store: Store | AsyncStore) -> AsyncStore:
    """``store`` as an :class:`AsyncStore`: itself if it is one, else adapted (once per store)."""
    if is_async(store):
        return store  # type: ignore[return-value]
    assert isinstance(store, Store)
    adapted = _ADAPTED.get(store)
    if adapted is None:
        adapted = InlineStore(store) if type(store) is MemoryStore else ThreadedStore(store)
        _ADAPTED[store] = adapted
    return adapted
