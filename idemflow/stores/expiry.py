"""Retention: what happens to a bookkeeping row once its ``expires_at`` has passed.

Memo rows, run records, outbox entries, messages, events and stream values carry
``expires_at = now + RetryPolicy.retention``. DynamoDB deletes them by TTL. SQLite, Azure Tables
and the memory store have no TTL, so they sweep by themselves (see
:class:`~idemflow.stores.base.Expiring`): each finds a bounded batch of rows
whose ``expires_at`` has passed and hands it to :func:`settle`, which decides
per row by the run record of the request the row belongs to:

- a memo, outbox entry, message, event or stream value of a finished (completed or aborted)
  request, or of a request with no run record left, is deleted;
- a finished run record is deleted too: its memos carry its incarnation, so
  one that outlives it is told apart from a later request's of that id (which
  deletes it and runs the step anew). A record written before incarnations
  (format 5) is kept one more retention window (at least :data:`RECHECK`):
  every sweep pass in that window removes its memos before it goes (a sweep
  visits rows in key order, not in expiry order; its memos, which carry no
  incarnation, would be replayed by a later request of that id);
- a row of a request that is not finished (running, failed, waiting) is never
  deleted: it is written back unchanged with ``expires_at`` :data:`RECHECK`
  seconds later, so a stuck request keeps every row it needs to resume and the
  sweep does not meet the row again at once; except a row an earlier incarnation
  of a request that continued as new left (:func:`left_behind`: a memo no later
  incarnation wrote over, a message already taken), which it never reads again;
- a row that reads as absent (an Azure tombstone) is deleted; data rows are
  never touched.

Every delete and write-back is conditional on the version the sweep read, so a
writer racing the sweep always wins: a sweep never removes what was committed
after it looked. Why a decision per row rather than a delete by date, as TTL
does: a request may stay unfinished longer than ``retention``, and its rows
must outlive the window. :mod:`idemflow.operator.collection` (``idemflow gc``) uses the same
rules and commits, with its own "finished more than D ago" selection.

>>> from idemflow import atomic, run
>>> from idemflow.stores import MemoryStore
>>> from idemflow import RetryPolicy
>>> store = MemoryStore(expire_every=None)
>>> two_steps = atomic("items", "p", lambda tx: tx.put("k", 1)).then(
...     atomic("items", "q", lambda tx: tx.put("k", 2)))
>>> run(two_steps, request_id="r", store=store, policy=RetryPolicy(retention=60.0))
>>> report = store.expire(now=1e12)
>>> report.deleted, [key for _, key, _ in store.scan("items")]  # two memos and the run record
(3, ['dk', 'dk'])
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from idemflow.core.memos import incarnation_number, of_earlier_incarnation
from idemflow.core.requests import Commit, ReadMany, Steps
from idemflow.core.trampoline import atrampoline, trampoline
from idemflow.keys import (
    RUN,
    RUNS_TABLE,
    parse_inbox_key,
    parse_memo_key,
    parse_outbox_key,
    parse_published_key,
)
from idemflow.records import RunRecord, run_ref
from idemflow.serialization import decode
from idemflow.stores.base import (
    AsyncStore,
    Capabilities,
    Committed,
    Delete,
    Expired,
    ExpiryReport,
    Op,
    Put,
    Row,
    RowRef,
    Store,
)

T = TypeVar("T")

RECHECK = 24 * 3600.0
"""Seconds a kept row (of an unfinished request) waits before a sweep looks at it again."""
BATCH = 100
"""Most deletes in one commit of a sweep (fewer where the backend allows fewer)."""


class Fate(enum.Enum):
    """What a sweep does with one expired row."""

    DELETE = "delete"
    RECHECK = "recheck"
    """Keep it: written back with a later ``expires_at``."""
    LEAVE = "leave"
    """Not a bookkeeping row: never touched."""


def owner(ref: RowRef) -> RowRef | None:
    """Where the run record of the request ``ref`` belongs to lives (itself for a run record),
    or None for a data row or a key of no known kind.

    >>> owner(RowRef("accounts", "alice", "mtransfer|t-1|s1"))
    RowRef(table='idemflowruns', partition='t-1', key='rtransfer')
    """
    memo = parse_memo_key(ref.key)
    if memo is not None:
        return run_ref(memo[0], memo[1])
    if ref.table != RUNS_TABLE:
        return None
    if ref.key.startswith(RUN):
        return ref
    sent_to = parse_outbox_key(ref.key) or parse_inbox_key(ref.key)  # wake-ups and messages too
    if sent_to is not None:
        return run_ref(*sent_to)
    published = parse_published_key(ref.key)  # events and streams
    return None if published is None else run_ref(published[0], published[1])


def left_behind(ref: RowRef, row: Row, incarnation: str | None) -> bool:
    """Whether ``row`` (at ``ref``) is one an earlier incarnation of its request left, which the
    request, at ``incarnation`` now, never reads again: a memo of an earlier incarnation, or, once
    the request continued as new at least once, a message already taken.

    >>> left_behind(RowRef("t", "p", "mwf|r|s1"), Row({"id": "now", "v": 1, "i": "a1g2"}, 1), "b2g3")
    True
    """
    if incarnation_number(incarnation) == 1:
        return False
    if parse_memo_key(ref.key) is not None:
        return of_earlier_incarnation(row, incarnation)
    value = row.value
    return parse_inbox_key(ref.key) is not None and isinstance(value, dict) and value.get("taken") is True


def _parsed(record: Row) -> RunRecord | None:
    """The run record in ``record``, or None for one this version cannot read (kept, as an
    unfinished request's)."""
    try:
        return RunRecord.from_json(record.value)
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def fate(item: Expired, record: Row | None, now: float) -> Fate:
    """The rule of the module docstring for one row, given its request's run record."""
    if item.text is None:
        return Fate.DELETE
    mine = owner(item.ref)
    if mine is None:
        return Fate.LEAVE
    parsed = None if record is None else _parsed(record)
    if record is not None and (parsed is None or not parsed.status.final):
        if parsed is not None and left_behind(
            item.ref, Row(decode(item.text), item.version), parsed.incarnation
        ):
            return Fate.DELETE  # an earlier incarnation's: the request never reads it again
        return Fate.RECHECK
    older = mine == item.ref and parsed is not None and parsed.incarnation is None
    if older and parsed is not None and now < item.expires_at + _grace(item, parsed):
        return Fate.LEAVE  # an older record outlives its memos (met again on a later pass)
    return Fate.DELETE


def _grace(item: Expired, record: RunRecord) -> float:
    """How long a finished run record stays after it expired: one more retention (at least
    :data:`RECHECK`). A sweep visits rows in key order, not in expiry order, so a memo expiring
    before its run record may still be met after it; a run record deleted first would leave
    memos a later request of that id replays (a partial run). Keeping the record one more
    window lets every pass since the memos expired reach them first."""
    ended = record.finished_at
    retention = item.expires_at - ended if ended is not None else 0.0
    return max(RECHECK, retention)


def settle(found: Sequence[Expired], now: float, capabilities: Capabilities) -> Steps[ExpiryReport]:
    """Apply :func:`fate` to ``found`` (in the order given: expiry order where the store has one).

    Yields one ``ReadMany`` of the run records not among ``found``, then the
    conditional commits of :func:`commit_each`.
    """
    owners = [owner(item.ref) for item in found]
    mine = {item.ref: item for item in found}
    wanted = list(dict.fromkeys(ref for ref in owners if ref is not None and ref not in mine))
    read: list[Row | None] = (yield ReadMany(wanted)) if wanted else []
    records: dict[RowRef, Row | None] = dict(zip(wanted, read, strict=True))
    for item in found:
        if item.text is not None and owner(item.ref) == item.ref:  # a run record met itself
            records[item.ref] = Row(decode(item.text), item.version)
    ops: list[Op] = []
    for item, ref in zip(found, owners, strict=True):
        chosen = fate(item, None if ref is None else records.get(ref), now)
        if chosen is Fate.DELETE:
            ops.append(Delete(item.ref, expect=item.version))
        elif chosen is Fate.RECHECK and item.text is not None:
            later = now + RECHECK
            ops.append(Put(item.ref, decode(item.text), item.text, expect=item.version, expires_at=later))
    applied = yield from commit_each(ops, capabilities)
    gone = {op.ref for op in applied if isinstance(op, Delete)}
    late = max((now - item.expires_at for item in found if item.ref in gone), default=0.0)
    return ExpiryReport(
        len(found), len(gone), len(applied) - len(gone), len(ops) - len(applied), max(late, 0.0)
    )


def commit_each(ops: Sequence[Op], capabilities: Capabilities) -> Steps[list[Op]]:
    """Commit ``ops`` and return those applied: an op whose condition failed (a writer came
    first) is dropped and the rest of its batch resent.

    Deletes go in batches of up to :data:`BATCH`, across partitions where the backend
    commits across them, else one table and partition per commit, in the order given.
    A write-back carries a whole row, so it goes alone (no batch over a byte limit);
    those are rare: one per row of an unfinished request per :data:`RECHECK`.
    """
    size = min(BATCH, capabilities.max_ops_per_commit)
    batches: list[list[Op]] = []
    places: dict[tuple[str, str] | None, list[Op]] = {}
    for op in ops:
        if isinstance(op, Put):
            batches.append([op])
            continue
        place = None if capabilities.cross_partition_commit else (op.ref.table, op.ref.partition)
        batch = places.get(place)
        if batch is None or len(batch) >= size:
            batch = places[place] = []
            batches.append(batch)
        batch.append(op)
    applied: list[Op] = []
    for batch in batches:
        while batch:
            outcome = yield Commit(batch)
            if isinstance(outcome, Committed):
                applied.extend(batch)
                break
            failed = {failure.index for failure in outcome.failures}
            if not failed:  # a backend that names no failure: leave the batch to a later sweep
                break
            batch = [op for index, op in enumerate(batch) if index not in failed]
    return applied


def apply(store: Store, found: Sequence[Expired], now: float) -> ExpiryReport:
    """:func:`settle` on a blocking store."""
    return trampoline(settle(found, now, store.capabilities), lambda request: _answer(store, request))


async def aapply(store: AsyncStore, found: Sequence[Expired], now: float) -> ExpiryReport:
    """:func:`settle` on an asynchronous store."""
    return await atrampoline(settle(found, now, store.capabilities), lambda request: _aanswer(store, request))


def _answer(store: Store, request: object) -> Any:
    if isinstance(request, Commit):
        return store.commit(request.ops)
    assert isinstance(request, ReadMany), request
    return store.read_many(request.refs)


def _aanswer(store: AsyncStore, request: object) -> Awaitable[Any]:
    if isinstance(request, Commit):
        return store.commit(request.ops)
    assert isinstance(request, ReadMany), request
    return store.read_many(request.refs)
