"""Garbage collection of memo rows, events, stream values and run records of finished requests,
on demand.

DynamoDB expires them by TTL (``expires_at``), and SQLite, Azure Tables and
the memory store by themselves (:mod:`idemflow.stores.expiry`), once
``RetryPolicy.retention`` has passed. ``idemflow gc`` collects by another
measure, at once, with the same conditional deletes: only requests whose run
record says they finished (completed or aborted) more than ``older_than``
seconds ago are collected: a request that is not finished keeps every row it
needs to resume. Memos, events and stream values go first and the run record last, so a duplicate
arriving during collection still finds the finished record and returns it.
After collection a duplicate of that request id is a new request: the
retention window is the deduplication window. On SQLite the pages the deletes
freed go back to the file system (``incremental_vacuum``, files made with
``auto_vacuum=INCREMENTAL``); :func:`expired_stats` counts the expired rows
still present (``idemflow gc --stats``).

>>> from idemflow import atomic, run
>>> from idemflow.stores import MemoryStore
>>> store = MemoryStore()
>>> run(atomic("items", "p", lambda tx: tx.put("k", 1)), request_id="r", store=store)
>>> collect(store, older_than=0.0, now=lambda: 1e12).requests
1
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from idemflow.core.policy import each_resent, resent_until_deadline
from idemflow.core.requests import Scan, Steps
from idemflow.engine.drive import drive
from idemflow.engine.drive_asyncio import adrive
from idemflow.errors import InvalidInputError
from idemflow.keys import RUNS_TABLE, parse_inbox_key, parse_memo_key, parse_outbox_key, parse_published_key
from idemflow.records import RunRecord
from idemflow.stores.async_adapters import sync_reader, to_async
from idemflow.stores.base import (
    AsyncStore,
    Capabilities,
    Delete,
    ExpiredRows,
    Op,
    Row,
    RowRef,
    Shrinking,
    Store,
)
from idemflow.stores.expiry import commit_each, owner

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GcReport:
    """What one collection removed."""

    requests: int
    memo_rows: int
    run_records: int
    pages_released: int = 0
    """Free pages given back to the file system afterwards (SQLite)."""
    published_rows: int = 0
    """Events and stream values the requests published (deleted with their memos)."""


def collect(store: Store, *, older_than: float, now: Callable[[], float] = time.time) -> GcReport:
    """Delete bookkeeping rows of requests finished more than ``older_than`` seconds ago.

    The same conditional deletes as a store's own expiry (:func:`idemflow.stores.expiry.commit_each`):
    a row rewritten since the scan read it is left alone.
    """
    report = drive(collect_steps(store.tables(), now() - older_than, store.capabilities), store)
    released = store.release() if isinstance(store, Shrinking) else 0
    return dataclasses.replace(report, pages_released=released)


async def acollect(
    store: Store | AsyncStore, *, older_than: float, now: Callable[[], float] = time.time
) -> GcReport:
    """:func:`collect`, awaitable: the same scans and conditional deletes, awaited.

    >>> import asyncio
    >>> from idemflow.stores import MemoryStore
    >>> asyncio.run(acollect(MemoryStore(), older_than=0.0)).requests
    0
    """
    target = to_async(store)
    cutoff = now() - older_than
    blocking = sync_reader(target)
    listed = getattr(target, "tables", None)
    if blocking is not None:
        tables = blocking.tables()
    elif listed is not None:
        tables = await listed()
    else:
        raise InvalidInputError(f"{type(store).__name__} cannot list its tables: collect needs them")
    report = await adrive(collect_steps(tables, cutoff, target.capabilities), target)
    if isinstance(blocking, Shrinking):
        report = dataclasses.replace(report, pages_released=blocking.release())
    return report


def collect_steps(tables: Sequence[str], cutoff: float, capabilities: Capabilities) -> Steps[GcReport]:
    """:func:`collect` as the engine's computation, for both APIs: memos first, records last."""
    finished: dict[RowRef, Row] = {}
    for partition, key, row in (yield from resent_until_deadline(Scan(RUNS_TABLE, None))):
        ref = RowRef(RUNS_TABLE, partition, key)
        if owner(ref) != ref:  # a table-less step's memo or an outbox entry
            continue
        try:
            record = RunRecord.from_json(row.value)
        except (KeyError, TypeError, ValueError):
            continue
        if record.status.final and record.finished_at is not None and record.finished_at <= cutoff:
            finished[ref] = row
    memos: list[Op] = []
    published: list[Op] = []
    for table in tables:
        for partition, key, row in (yield from resent_until_deadline(Scan(table, None))):
            ref = RowRef(table, partition, key)
            if parse_memo_key(key) is not None and owner(ref) in finished:
                memos.append(Delete(ref, expect=row.version))
            elif table == RUNS_TABLE and parse_published_key(key) is not None and owner(ref) in finished:
                published.append(Delete(ref, expect=row.version))
    records: list[Op] = [Delete(ref, expect=row.version) for ref, row in finished.items()]
    memo_rows = len((yield from each_resent(commit_each(memos, capabilities))))
    published_rows = len((yield from each_resent(commit_each(published, capabilities))))
    run_records = len((yield from each_resent(commit_each(records, capabilities))))
    return GcReport(len(finished), memo_rows, run_records, published_rows=published_rows)


KINDS = ("memos", "run records", "outbox/inbox", "events/streams", "other")


@dataclass(frozen=True, slots=True)
class ExpiredStats:
    """Rows whose ``expires_at`` passed that are still in the store, by kind (:data:`KINDS`).

    Some are there by design: a finished run record written before 1.0 stays one more retention
    window (at least a day) after it expired, and an unfinished request's rows stay until it ends.
    A sweep reaches the others some time after they expired (at most one pass). Memos and outbox
    rows of finished requests that stay long past their expiry mean the sweeps fall behind.
    """

    rows: dict[str, int]
    oldest: dict[str, float]
    """Seconds past expiry of the oldest such row, by kind (0.0: none)."""

    def to_json(self) -> dict[str, dict[str, float]]:
        return {"expired_rows": dict(self.rows), "oldest_seconds_past_expiry": dict(self.oldest)}


def kind(ref: RowRef) -> str:
    """Which of :data:`KINDS` a row is.

    >>> kind(RowRef("accounts", "alice", "mtransfer|t-1|s1")), kind(RowRef(RUNS_TABLE, "t-1", "rtransfer"))
    ('memos', 'run records')
    """
    if parse_memo_key(ref.key) is not None:
        return "memos"
    if ref.table == RUNS_TABLE and owner(ref) == ref:
        return "run records"
    if ref.table == RUNS_TABLE and (parse_outbox_key(ref.key) or parse_inbox_key(ref.key)):
        return "outbox/inbox"
    if ref.table == RUNS_TABLE and parse_published_key(ref.key):
        return "events/streams"
    return "other"


def expired_stats(store: Store, *, now: Callable[[], float] = time.time) -> ExpiredStats:
    """Count the expired rows still in ``store`` (one full read of them: an operator's command).

    Raises :class:`~idemflow.errors.InvalidInputError` for a store that cannot list them
    (DynamoDB: its TTL deletes them, up to days after they expire, and reads never see the lag).
    """
    if not isinstance(store, ExpiredRows):
        raise InvalidInputError(
            f"{type(store).__name__} cannot list its expired rows (SQLite and memory can)"
        )
    at = now()
    rows, oldest = dict.fromkeys(KINDS, 0), dict.fromkeys(KINDS, 0.0)
    for ref, expires_at in store.expired_rows(at):
        found = kind(ref)
        rows[found] += 1
        oldest[found] = max(oldest[found], at - expires_at)
    return ExpiredStats(rows, oldest)


async def aexpired_stats(store: Store | AsyncStore, *, now: Callable[[], float] = time.time) -> ExpiredStats:
    """:func:`expired_stats`, awaitable: the blocking store under an adapted one is read on a thread.

    Only SQLite and memory list their expired rows, and neither has an asynchronous client, so
    an SDK's asynchronous store is refused as its blocking twin is.

    >>> import asyncio
    >>> from idemflow.stores import MemoryStore
    >>> asyncio.run(aexpired_stats(MemoryStore())).rows["memos"]
    0
    """
    blocking = sync_reader(to_async(store))
    if blocking is None:
        raise InvalidInputError(
            f"{type(store).__name__} cannot list its expired rows (SQLite and memory can)"
        )
    return await asyncio.to_thread(expired_stats, blocking, now=now)


def parse_duration(text: str) -> float:
    """Seconds in ``90``, ``90s``, ``15m``, ``12h`` or ``7d``.

    >>> parse_duration("7d"), parse_duration("90")
    (604800.0, 90.0)
    """
    units = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    stripped = text.strip().lower()
    factor = units.get(stripped[-1:])
    number = stripped[:-1] if factor is not None else stripped
    try:
        value = float(number) * (factor or 1.0)
    except ValueError:
        raise InvalidInputError(f"duration {text!r} is not like 90s, 15m, 12h or 7d") from None
    if value < 0:
        raise InvalidInputError(f"duration {text!r} is negative")
    return value
