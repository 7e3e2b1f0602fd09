"""A store wrapper that counts what idemflow asks of a store: calls and bytes.

It is a :class:`idemflow.testing.faults.StoreWrapper`: every call goes on to
the real backend, so the workflow runs there and the counts are what that
backend received.

Bytes written are logical: for each written row the UTF-8 bytes of its
partition, row key and encoded value (an increment counts its partition, key
and 8 bytes for the number). Baselines count the same way (:class:`Tally`), so
the two are comparable; neither is wire bytes (SDK envelopes differ by backend).

Backend calls (:func:`backend_calls`, :attr:`CountingStore.backend_calls`)
are the store's own count of the calls it made to its backend, including
calls inside one protocol call (the Azure store's read behind an increment)
and its cache writes. Every idemflow store keeps that count, but it is not
part of the :class:`~idemflow.stores.base.Store` protocol, so benchmarks
read it here only.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from idemflow.stores.base import (
    CommitOutcome,
    Delete,
    Increment,
    Insert,
    Op,
    Put,
    Row,
    RowRef,
    Store,
)
from idemflow.testing.faults import StoreWrapper

NUMBER_BYTES = 8


def _utf8(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def op_bytes(op: Op) -> int:
    """Logical bytes one operation writes (0 for a condition check)."""
    ref = op.ref
    where = _utf8(ref.partition) + _utf8(ref.key)
    if isinstance(op, (Put, Insert)):
        return where + _utf8(op.text)
    if isinstance(op, Increment):
        return where + NUMBER_BYTES
    if isinstance(op, Delete):
        return where
    return 0


@dataclass
class Tally:
    """Calls and bytes of one variant (thread-safe increments)."""

    reads: int = 0
    commits: int = 0
    cache_writes: int = 0
    rows_written: int = 0
    bytes_written: int = 0
    cache_bytes: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def read(self, calls: int = 1) -> None:
        with self._lock:
            self.reads += calls

    def wrote(self, rows: int, nbytes: int, calls: int = 1) -> None:
        with self._lock:
            self.commits += calls
            self.rows_written += rows
            self.bytes_written += nbytes

    def cached(self, nbytes: int) -> None:
        with self._lock:
            self.cache_writes += 1
            self.cache_bytes += nbytes

    def reset(self) -> None:
        with self._lock:
            self.reads = self.commits = self.cache_writes = 0
            self.rows_written = self.bytes_written = self.cache_bytes = 0


def row_bytes(partition: str, key: str, value: str) -> int:
    """Logical bytes of a row a baseline writes (``value`` as the text it sends)."""
    return _utf8(partition) + _utf8(key) + _utf8(value)


def counter_bytes(partition: str, key: str) -> int:
    """Logical bytes of a counter a baseline adds to."""
    return _utf8(partition) + _utf8(key) + NUMBER_BYTES


@runtime_checkable
class _CountsCalls(Protocol):
    @property
    def round_trips(self) -> int: ...


def backend_calls(store: Store) -> int:
    """Backend calls ``store`` has made so far, by its own count (through any :class:`StoreWrapper`).

    Reads a counter outside the Store protocol, so it may be called without a
    wrapper on the timed path: latency is measured on the bare store.
    """
    while isinstance(store, StoreWrapper):
        store = store.inner
    if not isinstance(store, _CountsCalls):
        raise TypeError(f"{type(store).__name__} keeps no count of its backend calls")
    return store.round_trips


class CountingStore(StoreWrapper):
    """Delegates to ``inner`` and tallies reads, commits, cache writes and bytes."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.tally = Tally()

    def read(self, ref: RowRef) -> Row | None:
        self.tally.read()
        return self.inner.read(ref)

    def read_many(self, refs: Sequence[RowRef]) -> list[Row | None]:
        self.tally.read()
        return self.inner.read_many(refs)

    def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        sizes = [op_bytes(op) for op in ops]
        self.tally.wrote(sum(1 for size in sizes if size > 0), sum(sizes))
        return self.inner.commit(ops)

    def commit_cache(self, ops: Sequence[Op]) -> None:
        self.tally.cached(sum(op_bytes(op) for op in ops))
        self.inner.commit_cache(ops)

    @property
    def backend_calls(self) -> int:
        """Backend calls the wrapped store has made so far (see :func:`backend_calls`)."""
        return backend_calls(self.inner)
