"""Take turns on a hot partition inside one process: retries of conflicting steps go one at a time.

Why: when many threads of one process (a web server, a worker with
``concurrency=32``) retry steps on the same partition, they mostly conflict
with *each other*: every retry re-reads, and only one commit per round can
win, so the partition's throughput collapses far below its serial rate
while every request pays more round trips. Letting a process's retries on
one partition run one at a time (a lock per ``(store, table, partition)``)
turns that collapse into a queue. Across processes nothing changes:
optimistic concurrency and the retry deadline still decide, so no process
ever waits on another and a crashed one blocks nobody.

A first attempt never takes the gate (no cost without contention). A retry
waits for the gate at most until its step's deadline, then goes ahead
without it, so even a body that (unusually) runs a nested workflow on a
partition another retrying thread holds cannot deadlock. The gate is
re-entrant for the thread holding it.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_Key = tuple[int, str, str]


class _Gates:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gates: weakref.WeakValueDictionary[_Key, threading.RLock] = weakref.WeakValueDictionary()

    def _gate(self, key: _Key) -> threading.RLock:
        with self._lock:
            gate = self._gates.get(key)
            if gate is None:
                gate = threading.RLock()
                self._gates[key] = gate
            return gate

    def take(self, store: object, table: str, partition: str, until: float) -> Callable[[], None]:
        """Wait for the partition's gate (at most until ``until``); returns how to give it back."""
        gate = self._gate((id(store), table, partition))
        if gate.acquire(timeout=max(until - time.monotonic(), 0.0)):
            return gate.release
        return _nothing

    @contextmanager
    def turn(self, store: object, table: str, partition: str, until: float) -> Iterator[None]:
        """Hold the partition's gate (waiting at most until ``until``, a ``time.monotonic()`` value)."""
        gate = self._gate((id(store), table, partition))  # held by this frame: not collected meanwhile
        acquired = gate.acquire(timeout=max(until - time.monotonic(), 0.0))
        try:
            yield
        finally:
            if acquired:
                gate.release()


GATES = _Gates()


def _nothing() -> None:
    pass


class _AsyncGates:
    """The same turns for executions on an event loop: an ``asyncio.Lock`` per loop and partition.

    Not re-entrant (a body cannot await a nested run); a turn not given within
    the deadline is skipped, as in :class:`_Gates`.
    """

    def __init__(self) -> None:
        self._gates: weakref.WeakValueDictionary[tuple[int, int, str, str], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    async def take(self, store: object, table: str, partition: str, until: float) -> Callable[[], None]:
        key = (id(asyncio.get_running_loop()), id(store), table, partition)
        gate = self._gates.get(key)
        if gate is None:
            gate = asyncio.Lock()
            self._gates[key] = gate
        try:
            await asyncio.wait_for(gate.acquire(), timeout=max(until - time.monotonic(), 0.0))
        except TimeoutError:
            return _nothing
        return gate.release


ASYNC_GATES = _AsyncGates()
