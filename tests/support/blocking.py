"""A test-only blocking facade over an :class:`~idemflow.stores.base.AsyncStore`.

:class:`Blocking` runs the asynchronous store on a private event loop in a
background thread and presents the blocking :class:`~idemflow.stores.base.Store`
methods, so the store contract (``tests/conformance/test_store_contract.py``)
runs unchanged against an asynchronous store. ``tables`` and
``create_tables`` (tools, not on a step's path) go to a companion blocking
store on the same tables; ``scan`` is the asynchronous store's own.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator, Sequence
from typing import Any, TypeVar

from idemflow.stores.base import AsyncStore, CommitOutcome, Op, Row, RowRef, Store

T = TypeVar("T")


class Blocking:
    """``store`` (asynchronous) behind blocking methods; tools delegated to ``companion``.

    Any number of threads may call it at once: their calls run side by side on the one loop.
    :meth:`close` closes ``store`` and stops the loop; ``companion`` stays its owner's to close.
    """

    def __init__(self, store: AsyncStore, companion: Store) -> None:
        self.store = store
        self.companion = companion
        self.capabilities = companion.capabilities
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="blocking-facade", daemon=True)
        self._thread.start()
        self._closed = False

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def read(self, ref: RowRef) -> Row | None:
        return self._run(self.store.read(ref))

    def read_many(self, refs: Sequence[RowRef]) -> list[Row | None]:
        return self._run(self.store.read_many(refs))

    def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        return self._run(self.store.commit(ops))

    def commit_cache(self, ops: Sequence[Op]) -> None:
        self._run(self.store.commit_cache(ops))

    def flush(self) -> None:
        self._run(self.store.flush())

    def scan(self, table: str, partition: str | None = None) -> Iterator[tuple[str, str, Row]]:
        return iter(self._run(self.store.scan(table, partition)))

    def tables(self) -> list[str]:
        return self.companion.tables()

    def create_tables(self, *names: str) -> None:
        self.companion.create_tables(*names)

    @property
    def round_trips(self) -> int:
        """The asynchronous store's count (stores that keep one)."""
        return self.store.round_trips

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self.store.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def __repr__(self) -> str:
        return f"Blocking({self.store!r})"
