"""Cache writes off the caller's path on an event loop: the asyncio twin of :mod:`._cache_writer`.

The same rules as the blocking stores' :class:`~idemflow.stores._cache_writer.CacheWriter`,
with tasks for threads: a write returns at once; writes whose first row is the
same apply in the order they were started; transient errors are resent by the
library's one retry layer until the default policy's deadline, or
:data:`~idemflow.stores._cache_writer.CLOSE_GRACE` after :meth:`AsyncCacheWriter.close`;
a write that still fails is logged and dropped (a cache: duplicates replay the memos).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from idemflow.core.policy import DEFAULT_POLICY, apause, resent
from idemflow.core.requests import Commit, Sleep
from idemflow.core.trampoline import atrampoline
from idemflow.stores._cache_writer import CLOSE_GRACE
from idemflow.stores.base import AsyncStore, Conflict, Op


class AsyncCacheWriter:
    """Cache writes of one asynchronous ``store``, as tasks of the loop that started them."""

    def __init__(self, name: str, store: AsyncStore, log: logging.Logger) -> None:
        self._name = name
        self._store = store
        self._log = log
        self._pending: set[asyncio.Task[None]] = set()  # strong references: tasks are weakly held
        self._last: dict[object, asyncio.Task[None]] = {}  # the latest write of each first row
        self.closed = False
        self._closed_at = 0.0

    def submit(self, ops: Sequence[Op]) -> None:
        """Start the write and return at once (dropped, with a warning, once closed)."""
        if self.closed:
            self._log.warning("dropped a cache write (%s): the store is closed", self._name)
            return
        ops = list(ops)
        lane = getattr(ops[0], "ref", None) if ops else None
        task = asyncio.create_task(self._write(ops, self._last.get(lane)))
        self._last[lane] = task
        self._pending.add(task)
        task.add_done_callback(lambda done: self._done(lane, done))

    async def flush(self) -> None:
        """Wait until every write started before this call is done."""
        while self._pending:  # a write waits for the earlier ones of its row: all are in here
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    async def close(self) -> None:
        """Refuse new writes, then finish those under way (resent at most ``CLOSE_GRACE`` more)."""
        if not self.closed:
            self.closed = True
            self._closed_at = time.monotonic()
        await self.flush()

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    async def _write(self, ops: list[Op], after: asyncio.Task[None] | None) -> None:
        try:
            if after is not None:
                await asyncio.wait([after])  # an earlier write of the same row goes first
            retrying = DEFAULT_POLICY.resending(DEFAULT_POLICY.until(), give_up=self._past_grace)
            outcome = await atrampoline(resent(retrying, Commit(ops)), self._answer)
        except Exception as exc:  # noqa: BLE001 - a lost cache write only costs a later replay
            self._log.warning("dropped a cache write (%s, %d operations): %s", self._name, len(ops), exc)
            return
        if isinstance(outcome, Conflict):
            self._log.debug("a cache write (%s) not applied: %s", self._name, outcome)

    async def _answer(self, request: object) -> Any:
        """The commit and the retry waits of :func:`~idemflow.core.policy.resent`: answered here, not by
        the engine's driver, which a store must not import."""
        if isinstance(request, Sleep):
            return await apause(request)
        assert isinstance(request, Commit), request
        return await self._store.commit(request.ops)

    def _done(self, lane: object, task: asyncio.Task[None]) -> None:
        self._pending.discard(task)
        if self._last.get(lane) is task:
            del self._last[lane]

    def _past_grace(self) -> bool:
        return self.closed and time.monotonic() > self._closed_at + CLOSE_GRACE
