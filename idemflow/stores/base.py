"""The store protocol: the few primitives every backend implements.

A store knows its backend's API and nothing of workflows. It reads one row
(strongly consistent) and commits a list of operations atomically, checking a
condition on each. The engine above it owns the key layout, memo format,
fingerprints and retries, so a new backend is a small class that passes the
shared conformance suite (``tests/conformance``).

Row keys reaching a store are already encoded by :mod:`idemflow.keys`: data
rows, memo rows and run records live in disjoint key spaces of the same table.
Stores must keep ``table``, ``partition`` and ``key`` exactly (escaping
whatever their backend forbids, injectively).

A commit either applies every operation or none. When a condition fails the
store reports every failing operation it can identify (at least one) and, for
an :class:`Insert` whose row already existed, the existing row, so that a memo
hit costs no extra round trip where the backend returns the old item.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from idemflow.core.ops import COMMITTED as COMMITTED
from idemflow.core.ops import Check as Check
from idemflow.core.ops import CommitOutcome as CommitOutcome
from idemflow.core.ops import Committed as Committed
from idemflow.core.ops import Cond as Cond
from idemflow.core.ops import Conflict as Conflict
from idemflow.core.ops import Delete as Delete
from idemflow.core.ops import Expect as Expect
from idemflow.core.ops import Increment as Increment
from idemflow.core.ops import Insert as Insert
from idemflow.core.ops import Op as Op
from idemflow.core.ops import OpFailure as OpFailure
from idemflow.core.ops import Put as Put
from idemflow.core.row import Row as Row
from idemflow.core.row import RowRef as RowRef
from idemflow.core.row import Version as Version
from idemflow.core.tags import TagFilter


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend can do in one commit, and its limits.

    The engine checks limits before sending, so a bad step fails with a clear
    :class:`LimitExceededError` instead of an SDK error after partial work.
    """

    cross_partition_commit: bool
    """A commit may touch several tables and partitions (the run record rides
    along). Where False, a commit touching two partitions raises BackendError."""
    max_ops_per_commit: int
    """Operations in one atomic commit."""
    max_value_bytes: int
    """Largest encoded JSON value of one row."""
    max_commit_bytes: int
    """Largest sum of encoded values in one commit."""
    max_key_bytes: int
    """Largest encoded row key or partition (UTF-8 bytes)."""
    transaction_surcharge: bool = False
    """A commit of several rows costs more than writing each alone (DynamoDB bills every item of
    a transaction twice): writes that need no atomicity, such as two cache rows, go apart."""
    local_reads: bool = False
    """A point read is a call into this process (an embedded file, memory), not a round trip:
    ``run`` reads a request's run record before it builds anything, so a duplicate of a finished
    request costs that one read, and a new request a few microseconds more. Where a read is a
    round trip, a duplicate learns it from its first commit instead, which a new request needs
    anyway."""


@runtime_checkable
class Store(Protocol):
    """A partitioned table store. See the module docstring for the contract."""

    capabilities: Capabilities

    def read(self, ref: RowRef) -> Row | None:
        """One strongly consistent point read."""
        ...

    def read_many(self, refs: Sequence[RowRef]) -> list[Row | None]:
        """Strongly consistent point reads of rows in any tables and partitions,
        in one round trip where the backend can (DynamoDB ``TransactGetItems``).

        The engine reads the run record together with a first step's first row,
        so a duplicate of a finished request costs one call.
        """
        ...

    def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        """Apply all ``ops`` atomically or none.

        Raises :class:`TransientError` when the outcome is unknown or the
        backend asks to retry; the engine retries the same operations.
        """
        ...

    def commit_cache(self, ops: Sequence[Op]) -> None:
        """Best-effort write of a pure cache (completion records).

        May be deferred off the caller's path and need not be durable; losing
        it only costs a later duplicate a replay. Never raises.
        """
        ...

    def scan(self, table: str, partition: str | None = None) -> Iterator[tuple[str, str, Row]]:
        """Every row of a logical table as ``(partition, key, row)``, sorted.

        For tools, samples, tests and garbage collection; not used on a step's path.
        """
        ...

    def tables(self) -> list[str]:
        """Logical names of the tables this store holds (for tools and garbage collection)."""
        ...

    def create_tables(self, *names: str) -> None:
        """Provision logical tables (a no-op where tables are implicit)."""
        ...

    def flush(self) -> None:
        """Wait until deferred cache writes are done."""
        ...

    def close(self) -> None:
        """Release connections and finish deferred writes."""
        ...

    @property
    def round_trips(self) -> int:
        """Backend calls made so far (reads, commits, cache writes, sweeps).

        The conformance suite holds every backend to its call budget with it (a
        duplicate of a finished request costs one call) and the benchmarks report
        it; counted off the hot path (no lock per call), read rarely.
        """
        ...


@dataclass(frozen=True, slots=True)
class Expired:
    """A row whose ``expires_at`` has passed, as a store's sweep found it (see :mod:`idemflow.stores.expiry`).

    ``text`` is the row's canonical JSON, so a row that must stay can be written back
    unchanged with a later ``expires_at``; it is None for a row that reads as absent
    (an Azure tombstone), which is always deleted.
    """

    ref: RowRef
    version: Version
    expires_at: float
    text: str | None


@dataclass(frozen=True, slots=True)
class ExpiryReport:
    """What one expiry sweep did."""

    found: int
    """Expired rows the sweep looked at (at most its ``limit`` per table)."""
    deleted: int
    """Rows of finished (or vanished) requests deleted, and tombstones."""
    kept: int
    """Rows of unfinished requests given a later ``expires_at`` instead."""
    raced: int = 0
    """Rows a writer changed between the sweep's read and its commit: left as they are."""
    late: float = 0.0
    """Most seconds past its ``expires_at`` of a row deleted: how far behind the sweeps run."""

    def __add__(self, other: ExpiryReport) -> ExpiryReport:
        return ExpiryReport(
            self.found + other.found,
            self.deleted + other.deleted,
            self.kept + other.kept,
            self.raced + other.raced,
            max(self.late, other.late),
        )


NO_EXPIRY = ExpiryReport(0, 0, 0)


@runtime_checkable
class Expiring(Protocol):
    """A blocking store that expires rows by itself (SQLite, Azure Tables, memory).

    Optional, beside :class:`Store`: DynamoDB needs no sweep (its TTL deletes
    rows by ``expires_at``). Such a store sweeps by itself, from ``commit``, at
    most once per ``expire_every`` seconds; :meth:`expire` runs one sweep now.
    """

    def expire(self, now: float | None = None, limit: int = 100) -> ExpiryReport:
        """Settle at most ``limit`` rows (per table) whose ``expires_at`` is before ``now``
        (wall time by default), by the rules of :mod:`idemflow.stores.expiry`."""
        ...

    def schedule_expiry(self, every: float | None, *, clock: Callable[[], float] = time.time) -> None:
        """Sweep from ``commit`` at most once per ``every`` seconds (None: never), rows expiring
        by ``clock`` (wall time by default; tests pass one they move)."""
        ...


@runtime_checkable
class ExpiredRows(Protocol):
    """A store that can list every row whose ``expires_at`` passed (SQLite, memory): what
    ``idemflow gc --stats`` counts. A full read, for operators; sweeps never call it."""

    def expired_rows(self, now: float | None = None) -> Iterator[tuple[RowRef, float]]:
        """``(row, expires_at)`` of every row expired by ``now`` (wall time by default)."""
        ...


@runtime_checkable
class Shrinking(Protocol):
    """A store whose file can give space back (SQLite): deleting rows frees pages inside the
    file, and only these calls return them to the file system."""

    def release(self, pages: int | None = None) -> int:
        """Give back at most ``pages`` free pages (None: all), in bounded steps; how many."""
        ...

    def vacuum(self) -> tuple[int, int]:
        """Rewrite the whole file (every writer waits meanwhile); ``(bytes before, bytes after)``."""
        ...


@dataclass(frozen=True, slots=True)
class RunQuery:
    """One page of run records a :class:`PagedRuns` store is asked for.

    ``after`` is a position this store gave (a :class:`RunRow`'s); the filters are hints a store
    applies where it can do so cheaply (the caller checks every row again), except that a
    store must honour ``open_only`` and ``workflow`` exactly if it honours them at all.
    """

    limit: int
    after: str | None = None
    workflow: str | None = None
    status: str | None = None
    open_only: bool = False
    """Only requests not finished: the store's index of open runs where it keeps one."""
    started_by: float | None = None
    """Only requests started at or before this time (epoch seconds), where the order is by start."""
    tags: TagFilter = ()
    """Only requests whose tags (``tg``) include every ``(key, value)`` here."""


@dataclass(frozen=True, slots=True)
class RunRow:
    """A run record as a page lists it, with the position to resume after it."""

    position: str
    partition: str
    key: str
    row: Row


@runtime_checkable
class PagedRuns(Protocol):
    """A store that lists run records a page at a time, resuming after a position it gave.

    Optional, beside :class:`Store`. ``runs_order`` says in which order pages come:
    ``"newest first"`` (by start time, then workflow and request id, both descending: SQLite's
    index on the start time, the memory store), or ``"key order"`` (the backend's own order of a
    paged scan or index query, which has no order by time: DynamoDB, Azure Tables).
    """

    runs_order: str

    def run_page(self, query: RunQuery) -> list[RunRow]:
        """At most ``query.limit`` run records after ``query.after``, in :attr:`runs_order`;
        fewer only when none are left. Raises ``InvalidInputError`` for a position it never gave."""
        ...


class AsyncStore(Protocol):
    """The same store contract for an event loop: every call that may wait is awaited.

    Stores on the SDKs' own asynchronous clients (aiobotocore, the Azure SDK's
    ``aio`` clients) implement it, and :func:`idemflow.stores.async_adapters.to_async`
    gives it to any blocking :class:`Store` (SQLite, memory) on threads of
    its own. ``arun``, ``asubmit`` and the asyncio worker take one.
    """

    capabilities: Capabilities

    async def read(self, ref: RowRef) -> Row | None:
        """One strongly consistent point read."""
        ...

    async def read_many(self, refs: Sequence[RowRef]) -> list[Row | None]:
        """Strongly consistent point reads, batched where the backend can."""
        ...

    async def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        """Apply all ``ops`` atomically or none (see :meth:`Store.commit`)."""
        ...

    async def commit_cache(self, ops: Sequence[Op]) -> None:
        """Best-effort cache write, deferred off the caller's path where possible. Never raises."""
        ...

    async def scan(self, table: str, partition: str | None = None) -> list[tuple[str, str, Row]]:
        """Every row of a logical table (or one partition), sorted: for reads and tools, not steps."""
        ...

    async def flush(self) -> None:
        """Wait until deferred cache writes are done."""
        ...

    async def close(self) -> None:
        """Finish deferred writes and release connections."""
        ...

    @property
    def round_trips(self) -> int:
        """Backend calls made so far (see :attr:`Store.round_trips`)."""
        ...
