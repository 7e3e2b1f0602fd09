"""An in-memory store: a real backend for tests and docs, not a mock.

It implements the full protocol (conditions, atomic multi-row commits,
conflict reports) under one lock, so workflows behave exactly as on the
durable stores and the conformance suite runs against it unchanged.

>>> from idemflow.stores import MemoryStore
>>> store = MemoryStore()
>>> store.capabilities.cross_partition_commit
True
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from idemflow.serialization import decode
from idemflow.stores._local import Stored, commit_locally
from idemflow.stores.base import Capabilities, CommitOutcome, Op, Row, RowRef

_UNLIMITED = 1 << 62

MEMORY_CAPABILITIES = Capabilities(
    cross_partition_commit=True,
    max_ops_per_commit=_UNLIMITED,
    max_value_bytes=_UNLIMITED,
    max_commit_bytes=_UNLIMITED,
    max_key_bytes=_UNLIMITED,
)


class MemoryStore:
    """Rows in a dict keyed by (table, partition, key), guarded by a lock."""

    capabilities = MEMORY_CAPABILITIES

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str, str], Stored] = {}
        self._floor = 0  # the highest version a deleted row had (see stores._local)
        self._lock = threading.Lock()
        self._round_trips = 0

    def read(self, ref: RowRef) -> Row | None:
        with self._lock:
            self._round_trips += 1
            row = self._rows.get((ref.table, ref.partition, ref.key))
        return None if row is None else Row(decode(row[0]), row[1])

    def read_many(self, refs: Sequence[RowRef]) -> list[Row | None]:
        with self._lock:
            self._round_trips += 1
            found = [self._rows.get((ref.table, ref.partition, ref.key)) for ref in refs]
        return [None if row is None else Row(decode(row[0]), row[1]) for row in found]

    def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        rows = self._rows

        def lookup(ref: RowRef) -> Stored | None:
            return rows.get((ref.table, ref.partition, ref.key))

        def write(ref: RowRef, text: str, version: int, expires_at: float | None) -> None:
            rows[(ref.table, ref.partition, ref.key)] = (text, version)

        def remove(ref: RowRef) -> None:
            del rows[(ref.table, ref.partition, ref.key)]

        with self._lock:
            self._round_trips += 1
            outcome, self._floor = commit_locally(ops, lookup, write, remove, self._floor)
            return outcome

    def commit_cache(self, ops: Sequence[Op]) -> None:
        self.commit(ops)

    def scan(self, table: str, partition: str | None = None) -> Iterator[tuple[str, str, Row]]:
        with self._lock:
            selected = [
                (part, key, row)
                for (tbl, part, key), row in self._rows.items()
                if tbl == table and (partition is None or part == partition)
            ]
        for part, key, (text, version) in sorted(selected):
            yield part, key, Row(decode(text), version)

    def tables(self) -> list[str]:
        with self._lock:
            return sorted({table for table, _, _ in self._rows})

    def create_tables(self, *names: str) -> None:
        """Tables are implicit in memory."""

    def flush(self) -> None:
        """Nothing is deferred."""

    def close(self) -> None:
        """Nothing to release."""

    @property
    def round_trips(self) -> int:
        """Backend calls made so far (reads, commits, cache writes), for tests and benchmarks.

        This store's own count, not part of the Store protocol: code given any Store must not use it.
        """
        return self._round_trips
