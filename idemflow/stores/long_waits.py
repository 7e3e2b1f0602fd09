"""Keeping an unfinished request's rows past a long wait.

A sweep keeps the rows of an unfinished request (:data:`~idemflow.stores.expiry.RECHECK`), but
DynamoDB's TTL deletes by date alone. So where a request waits longer than its rows are kept, the
engine first gives every row of it that it knows a later ``expires_at`` (written back unchanged,
conditional on the version read, as a sweep keeps a row), and the run record remembers the new bound
(``ku``, :attr:`~idemflow.records.RunRecord.kept_until`); every row written for the request later
expires no earlier (:meth:`~idemflow.engine.given.Given.expiry`). Nothing is written on a request's
way unless a wait passes that bound: a short sleep costs nothing more.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Generator, Iterable
from typing import Any, TypeVar

from idemflow.core.places import from_rows, join
from idemflow.core.requests import Commit, CommitCache, Read, ReadMany, Scan, Steps
from idemflow.errors import TransientError
from idemflow.keys import MEMO, RUN, RUNS_TABLE, memo_prefix, parse_memo_key
from idemflow.records import RunRecord, outbox_ref
from idemflow.serialization import encode
from idemflow.stores.base import Capabilities, Committed, Op, Put, Row, RowRef
from idemflow.stores.expiry import BATCH, commit_each, left_behind, owner

__all__ = [
    "KEEP_ALIVE",
    "NOTE_ATTEMPTS",
    "SLACK",
    "extend",
    "extension_due",
    "kept_bound",
    "left_over",
    "mine",
    "sweeps",
    "watched",
]

T = TypeVar("T")

SLACK = 0.5
"""Fraction of the retention a request's rows must still have left when a wait of it ends: a
wait ending later than that before the rows' bound extends them first (:func:`extension_due`)."""
KEEP_ALIVE = 0.25
"""Fraction of the retention after which a worker wakes a request that waits with no known end
(a receive with no timeout, a child) to extend its rows and wait again."""
NOTE_ATTEMPTS = 3
"""Rounds :func:`left_over` tries its note in before it leaves the record as it was (a racing
writer, or the store's own transient conflict, may win one: the round is then tried again)."""


def sweeps(store: object) -> bool:
    """Whether ``store`` keeps an unfinished request's rows by a sweep of its own (SQLite, Azure
    Tables, memory), where a wait with no known end keeps them too; not DynamoDB, whose TTL
    deletes by date alone (nor a wrapper that hides its store's sweep: it gets keep-alives)."""
    return callable(getattr(store, "expire", None))


def kept_bound(record: RunRecord, retention: float) -> float:
    """Epoch seconds no row of the unfinished request ``record`` expires before: its ``ku``, else
    its claim's time plus ``retention`` (every row is written at or after the claim)."""
    if record.kept_until is not None:
        return record.kept_until
    return -math.inf if record.started_at is None else record.started_at + retention


def extension_due(record: RunRecord, retention: float, until: float) -> bool:
    """Whether a wait ending at ``until`` must extend the request's rows first: they would have
    less than :data:`SLACK` of the retention left when it ends."""
    return until + retention * SLACK > kept_bound(record, retention)


def mine(ref: RowRef, run: RowRef) -> bool:
    """Whether ``ref`` is a bookkeeping row of the request whose run record is ``run`` (its
    memos, messages, outbox entry), that an extension may write back; never its run record
    (written after, with the new bound) nor an effect's lease (its holder writes it under the
    version it read: the lease ends by itself, long before any retention)."""
    if ref == run or owner(ref) != run:
        return False
    memo = parse_memo_key(ref.key)
    return memo is None or not memo[2].startswith("l")


def watched(steps: Steps[T], run: RowRef, known: set[RowRef]) -> Steps[T]:
    """``steps`` unchanged, noting in ``known`` every row of the request ``run`` names that it
    reads, scans or writes: what an extension writes back if the execution ends in a long wait.
    Only a set's insert per row met: nothing is sent to the store."""
    prefix = memo_prefix(run.key[len(RUN) :], run.partition) if run.key.startswith(RUN) else None
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            request = steps.send(answer) if error is None else steps.throw(error)
        except StopIteration as stop:
            done: T = stop.value
            return done
        if type(request) is Commit or type(request) is CommitCache:  # exact types, as the drivers answer
            _add_mine(known, [op.ref for op in request.ops], run, prefix)
        elif type(request) is Read:
            _add_mine(known, (request.ref,), run, prefix)
        elif type(request) is ReadMany:
            _add_mine(known, request.refs, run, prefix)
        try:
            answer, error = (yield request), None
        except GeneratorExit:
            steps.close()
            raise
        except BaseException as exc:  # noqa: BLE001 - thrown into the engine, as the driver meant
            answer, error = None, exc
        if isinstance(request, Scan) and answer is not None:
            answer = list(answer)
            known.update(
                ref for partition, key, _ in answer if mine(ref := RowRef(request.table, partition, key), run)
            )


def _add_mine(known: set[RowRef], refs: Iterable[RowRef], run: RowRef, prefix: str | None) -> None:
    """Add to ``known`` the refs :func:`mine` takes. Every commit passes here, so the usual rows
    are told apart without parsing their keys: a memo of the request (its key has the request's
    prefix, then a tag without ``|``: what :func:`~idemflow.keys.parse_memo_key` would find) is
    one unless it is a lease, and a row of a table of the user's that is no memo (a data row)
    belongs to no request; any other row asks :func:`mine`."""
    cut = 0 if prefix is None else len(prefix)
    for ref in refs:
        key = ref.key
        if prefix is not None and key.startswith(prefix) and "|" not in key[cut:]:
            if not key.startswith("l", cut):  # not a lease (its tag: l<step>)
                known.add(ref)
        elif ref.table != RUNS_TABLE and not key.startswith(MEMO):
            continue
        elif mine(ref, run):
            known.add(ref)


def extend(
    known: Iterable[RowRef],
    run: RowRef,
    workflow: str,
    request_id: str,
    until: float,
    capabilities: Capabilities,
    incarnation: str | None = None,
) -> Generator[Any, Any, int]:
    """Give every row of the request in ``known`` (and its messages, table-less memos and outbox
    entry, found here) ``expires_at = until`` where it expires earlier; how many were written.

    Not the rows an earlier incarnation of the request left (``incarnation`` is the record's: it
    continued as new since), which no step will read again: a memo no later incarnation replaced,
    and a message a receive took before the switch. They expire by their own date (DynamoDB's
    TTL) or a sweep deletes them (:func:`~idemflow.stores.expiry.fate`), so a request that lives
    for years keeps no more rows than one incarnation's.

    Each goes back unchanged, conditional on the version just read: a writer that came between
    wins (it wrote the row anew, with an expiry of its own). Called only before a run record
    write that stores ``until`` as the request's bound."""
    scanned = yield Scan(RUNS_TABLE, run.partition)
    refs = dict.fromkeys(known)
    refs.update(
        (ref, None) for partition, key, _ in scanned if mine(ref := RowRef(RUNS_TABLE, partition, key), run)
    )
    refs[outbox_ref(workflow, request_id)] = None
    wanted = list(refs)
    ops: list[Op] = []
    for start in range(0, len(wanted), BATCH):
        chunk = wanted[start : start + BATCH]
        rows: list[Row | None] = yield ReadMany(chunk)
        for ref, row in zip(chunk, rows, strict=True):
            if row is not None and not left_behind(ref, row, incarnation):
                text = encode(row.value, "kept row", envelope=3)
                ops.append(Put(ref, row.value, text, expect=row.version, expires_at=until))
    applied = yield from commit_each(ops, capabilities)
    return len(applied)


def left_over(
    run: RowRef,
    workflow: str,
    request_id: str,
    why: str,
    retention: float,
    now: float,
    known: Iterable[RowRef],
    capabilities: Capabilities,
) -> Generator[Any, Any, bool]:
    """Say in the run record of a request whose caller's ``run`` raised why it is unfinished
    (``why``: its last error and step, shown by ``status``, ``runs list`` and the console), and
    keep its rows a retention from now, extending them first where their bound is too near: a
    later attempt relies on them. The note names the places of the steps met too
    (:mod:`idemflow.core.places`). Only on that failure path; False if there was no unfinished
    record to note (nothing committed yet, or it finished meanwhile)."""
    known = tuple(known)
    for _ in range(NOTE_ATTEMPTS):  # a racing writer (or the store's own conflict) wins a round
        try:
            noted = yield from _note_round(
                run, workflow, request_id, why, retention, now, known, capabilities
            )
        except TransientError:  # the store's conflict (DynamoDB's TransactionConflict): a lost round
            continue
        if noted is not None:
            return noted
    return False


def _note_round(
    run: RowRef,
    workflow: str,
    request_id: str,
    why: str,
    retention: float,
    now: float,
    known: tuple[RowRef, ...],
    capabilities: Capabilities,
) -> Generator[Any, Any, bool | None]:
    """One round of :func:`left_over`: its answer, or None if a writer came between (a transient
    error of the store's is raised)."""
    row = yield Read(run)
    if row is None:
        return False
    record = RunRecord.from_json(row.value)
    if record.status.final:
        return False
    expires = now + retention
    seen = from_rows(known, workflow, request_id)
    updated = dataclasses.replace(record, waiting=why[:500], places=join(record.places, seen))
    if extension_due(record, retention, now):
        yield from extend(known, run, workflow, request_id, expires, capabilities, record.incarnation)
        updated = dataclasses.replace(updated, kept_until=expires)
    if updated.kept_until is not None and updated.kept_until > expires:
        expires = updated.kept_until
    value = updated.to_json()
    put = Put(run, value, encode(value, "run record", envelope=3), expect=row.version, expires_at=expires)
    return True if isinstance((yield Commit([put])), Committed) else None
