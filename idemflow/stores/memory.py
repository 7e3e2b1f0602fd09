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
import time
from collections.abc import Callable, Iterator, Sequence

from idemflow.keys import RUN, RUNS_TABLE
from idemflow.serialization import decode
from idemflow.stores._expiring import EXPIRE_EVERY, LIMIT, Backlog, Schedule, swept
from idemflow.stores._local import Stored, commit_locally
from idemflow.stores._runs_order import NEWEST_FIRST, newest_first
from idemflow.stores.base import (
    Capabilities,
    CommitOutcome,
    Expired,
    ExpiryReport,
    Op,
    Row,
    RowRef,
    RunQuery,
    RunRow,
)
from idemflow.stores.expiry import apply

_UNLIMITED = 1 << 62
_START = (float("-inf"), ("", "", ""))

MEMORY_CAPABILITIES = Capabilities(
    cross_partition_commit=True,
    max_ops_per_commit=_UNLIMITED,
    max_value_bytes=_UNLIMITED,
    max_commit_bytes=_UNLIMITED,
    max_key_bytes=_UNLIMITED,
    local_reads=True,
)


class MemoryStore:
    """Rows in a dict keyed by (table, partition, key), guarded by a lock.

    Rows expire as on SQLite (:mod:`idemflow.stores.expiry`): a ``commit`` sweeps at
    most once per ``expire_every`` seconds (None: never), by a scan, in expiry
    order from where the last sweep stopped: a row it must leave (a finished run
    record in its hold) is met once per pass, and never stands before the rows
    that expired after it.
    """

    capabilities = MEMORY_CAPABILITIES

    def __init__(self, *, expire_every: float | None = EXPIRE_EVERY) -> None:
        self._rows: dict[tuple[str, str, str], Stored] = {}
        self._expires: dict[tuple[str, str, str], float] = {}
        self._expiry = Schedule(expire_every)
        self._cursor: tuple[float, tuple[str, str, str]] = _START  # the last row a sweep met
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
        with self._lock:
            self._round_trips += 1
            outcome, self._floor = commit_locally(ops, self._lookup, self._write, self._remove, self._floor)
        if self._expiry.ticks() >= self._expiry.next_at and self._expiry.due():
            swept(self.expire, self._expiry, "memory store")
        return outcome

    def _lookup(self, ref: RowRef) -> Stored | None:
        return self._rows.get((ref.table, ref.partition, ref.key))

    def _write(self, ref: RowRef, text: str, version: int, expires_at: float | None) -> None:
        key = (ref.table, ref.partition, ref.key)
        self._rows[key] = (text, version)
        if expires_at is None:
            self._expires.pop(key, None)
        else:
            self._expires[key] = expires_at

    def _remove(self, ref: RowRef) -> None:
        key = (ref.table, ref.partition, ref.key)
        del self._rows[key]
        self._expires.pop(key, None)

    def expire(self, now: float | None = None, limit: int = LIMIT) -> ExpiryReport:
        """Settle the ``limit`` rows that expired first, before ``now`` (see
        :mod:`idemflow.stores.expiry`)."""
        at = self._expiry.clock() if now is None else now
        after = self._cursor
        with self._lock:
            due = sorted(
                (when, key) for key, when in self._expires.items() if when < at and (when, key) > after
            )
            due = due[:limit]
            found = [Expired(RowRef(*key), self._rows[key][1], when, self._rows[key][0]) for when, key in due]
        wrapped = len(due) < limit
        self._cursor = _START if wrapped else due[-1]

        report = apply(self, found, at)
        self._expiry.passes.note(report, len(found), wrapped, at)
        return report

    @property
    def expiry_backlog(self) -> Backlog | None:
        """What the last complete pass of the sweeps met (:class:`~idemflow.stores._expiring.Backlog`)."""
        return self._expiry.backlog

    def expired_rows(self, now: float | None = None) -> Iterator[tuple[RowRef, float]]:
        """Every row whose ``expires_at`` passed (by ``now``), with it."""
        at = self._expiry.clock() if now is None else now
        with self._lock:
            found = sorted((key, when) for key, when in self._expires.items() if when < at)
        for key, when in found:
            yield RowRef(*key), when

    def schedule_expiry(self, every: float | None, *, clock: Callable[[], float] = time.time) -> None:
        """Sweep from ``commit`` at most once per ``every`` seconds (None: never), rows expiring
        by ``clock`` (wall time; tests pass a fixed one)."""
        self._expiry = Schedule(every, clock)

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

    runs_order = NEWEST_FIRST

    def run_page(self, query: RunQuery) -> list[RunRow]:
        """Run records newest first (:class:`~idemflow.stores.base.PagedRuns`), by a scan: the
        memory store keeps no index a commit would have to maintain."""
        with self._lock:
            self._round_trips += 1
            records = [
                (part, key, row)
                for (tbl, part, key), row in self._rows.items()
                if tbl == RUNS_TABLE and key.startswith(RUN)
            ]
        rows = ((RUNS_TABLE, part, key, Row(decode(text), version)) for part, key, (text, version) in records)
        return newest_first(rows, query)

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

        Part of the :class:`~idemflow.stores.base.Store` protocol.
        """
        return self._round_trips
