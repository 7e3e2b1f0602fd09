"""A store wrapper that counts what idemflow asks of a store: calls and bytes.

It is a :class:`idemflow.testing.faults.StoreWrapper`: every call goes on to
the real backend, so the workflow runs there and the counts are what that
backend received.

Bytes written are logical: for each written row the UTF-8 bytes of its
partition, row key and encoded value (an increment counts its partition, key
and 8 bytes for the number). Baselines count the same way (:class:`Tally`), so
the two are comparable; neither is wire bytes (SDK envelopes differ by backend).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

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
