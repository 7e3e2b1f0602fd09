"""What one PostgreSQL commit sends, as batches of statements a driver sends as one query: the same plan
for the blocking store and the asyncio one (:mod:`idemflow.stores._postgres_driver`).

Why batches: a step's commit (its memo, its data, the run record) needs no answer between its
statements, so the whole transaction is one batch and one round trip: one query, run as one
implicit transaction, so no ``BEGIN`` or ``COMMIT`` is sent. Each statement carries its own
condition and raises when it is not met (:mod:`idemflow.stores._postgres_sql`); the statements
are *guarded*: the commit function runs them and catches that error, which rolls them back, and
answers with the operation refused and the rows then at the commit's inserts. So a duplicate's
refused claim and what it met are one round trip, and the server logs no error (with its
statement, values and all) for an outcome that is not one. Only an increment of a row that is no
small integer needs an answer first (the row, locked, summed in Python by the number model): then
the commit is an explicit transaction in several batches, each ending where an answer is needed,
and ``COMMIT`` or ``ROLLBACK`` goes alone at the end.

Isolation is READ COMMITTED and every condition holds at commit: an ``UPDATE``/``DELETE ... WHERE
ver = v`` or a ``SELECT ... FOR SHARE`` takes the row's lock and re-reads it after a concurrent
writer; an ``INSERT ... ON CONFLICT DO NOTHING`` waits for a concurrent inserter of the key; a
``Check(ABSENT)`` holds the key with a row of its own, deleted in the same transaction. Rows are
locked in key order (the operations sorted by table, partition and key, the order PostgreSQL's
``COLLATE "C"`` keys sort in), so two commits never wait for each other in a circle.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

from idemflow.errors import TransientError
from idemflow.serialization import decode
from idemflow.stores._local import incremented
from idemflow.stores._postgres_sql import GENERAL, REFUSED, Sql, key_of
from idemflow.stores._runs_order import run_started
from idemflow.stores.base import (
    COMMITTED,
    Check,
    CommitOutcome,
    Cond,
    Conflict,
    Delete,
    Expect,
    Increment,
    Insert,
    Op,
    OpFailure,
    Put,
    Row,
)

Statement = tuple[str, tuple[Any, ...]]
_SMALL_DELTA = 2**53
_BIGINT = 2**63
_RACES = 5
"""Times a commit starts over when a row it summed in Python was created under it."""
BEGIN: Statement = ("BEGIN", ())
COMMIT: Statement = ("COMMIT", ())
ROLLBACK: Statement = ("ROLLBACK", ())
CACHE_OFF: Statement = ("SET LOCAL synchronous_commit = off", ())
"""A completion record's transaction need not wait for the WAL's flush (a lost one costs a replay)."""
CACHE_BEGIN: tuple[Statement, ...] = (BEGIN, CACHE_OFF)


@dataclass(frozen=True, slots=True)
class Batch:
    """One query, one round trip: ``plain`` statements (``BEGIN``, a ``SET``, ``COMMIT``), then
    the ``guarded`` ones, run by the commit function (a refusal of theirs is an answer, with the
    rows at ``inserts`` as they are then), then ``fetch``, a statement whose rows the plan needs
    back."""

    plain: tuple[Statement, ...] = ()
    guarded: tuple[Statement, ...] = ()
    inserts: tuple[tuple[str, str, str], ...] = ()
    fetch: Statement | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    """A guarded statement raised one of the store's own errors: ``state`` (SQLSTATE) for
    operation ``op``; ``found``: ``(position in the batch's inserts, text, version)`` of the
    rows there."""

    state: str
    op: int
    found: tuple[tuple[int, str, int], ...] = ()


Answer = list[tuple[Any, ...]] | Refusal
"""What the driver gives back for a batch: the fetched statement's rows, or the refusal that
rolled the guarded statements back (any other error the driver raises itself)."""
Plan = Generator[Batch, Answer, CommitOutcome]


def plan(sql: Sql, ops: Sequence[Op], *, cache: bool = False) -> Plan:
    """The batches of one commit of ``ops`` and its outcome (see the module docstring)."""
    if any(_impossible(op) for op in ops):
        return Conflict(tuple(OpFailure(i) for i, op in enumerate(ops) if _impossible(op)))
    order = sorted(range(len(ops)), key=lambda i: key_of(ops[i].ref))
    general = {i for i in order if isinstance(op := ops[i], Increment) and not _small(op)}
    inserts = [i for i, op in enumerate(ops) if isinstance(op, Insert)]
    keys = tuple(key_of(ops[i].ref) for i in inserts)
    races = 0
    while True:
        if general:
            refusal = yield from _stepwise(sql, ops, order, general, CACHE_BEGIN if cache else (BEGIN,), keys)
        else:  # one implicit transaction: the statements of one query
            body = tuple(statement for i in order for statement in _statements(sql, i, ops[i]))
            answer = yield Batch((CACHE_OFF,) if cache else (), body, keys)
            refusal = answer if isinstance(answer, Refusal) else None
        if refusal is None:
            return COMMITTED
        if refusal.state == REFUSED:
            return _conflict(inserts, refusal)
        if refusal.state == GENERAL:
            general.add(refusal.op)
            continue
        races += 1  # RACED: a row summed in Python was created meanwhile; sum it again
        if races > _RACES:
            raise TransientError(f"PostgreSQL increment raced {races} times", backend="postgres")


def _conflict(inserts: list[int], refusal: Refusal) -> CommitOutcome:
    """The conflict of a commit refused at operation ``refusal.op`` (rolled back already).

    The server stops at the first refusal in key order; the inserts of the commit (a memo, a
    claim) are read then, in the same call, so an existing one is reported with its row whatever
    failed first: a retry whose answer was lost meets its own memo, not only its stale data.
    """
    failures = {
        inserts[at - 1]: OpFailure(inserts[at - 1], Row(decode(text), ver)) for at, text, ver in refusal.found
    }
    failures.setdefault(refusal.op, OpFailure(refusal.op))
    return Conflict(tuple(failures[i] for i in sorted(failures)))


def _stepwise(
    sql: Sql,
    ops: Sequence[Op],
    order: list[int],
    general: set[int],
    begin: tuple[Statement, ...],
    keys: tuple[tuple[str, str, str], ...],
) -> Generator[Batch, Answer, Refusal | None]:
    """The commit in batches of one explicit transaction, each ending with the read of a row
    summed in Python; ``COMMIT`` goes alone, once the last guarded statements ran."""
    plain, pending = begin, []
    for i in order:
        op = ops[i]
        if i not in general:
            pending += _statements(sql, i, op)
            continue
        assert isinstance(op, Increment)
        key = _key(op)
        answer = yield Batch(plain, tuple(pending), keys, (sql.lock_row, key))
        plain = ()
        if isinstance(answer, Refusal):
            yield Batch((ROLLBACK,))
            return answer
        current = (str(answer[0][0]), 0) if answer else None
        try:
            text = incremented(op.ref, current, op.delta)
        except BaseException:
            yield Batch((ROLLBACK,))
            raise
        pending = [(sql.update_blind, (text, *key)) if current else (sql.insert_new, (*key, text, i))]
    answer = yield Batch(plain, tuple(pending), keys)
    if isinstance(answer, Refusal):
        yield Batch((ROLLBACK,))  # alone: psycopg forgets its prepared statements on a ROLLBACK
        return answer
    yield Batch((COMMIT,))
    return None


def _key(op: Op) -> tuple[str, str, str]:
    return key_of(op.ref)


def _small(op: Increment) -> bool:
    return type(op.delta) is int and -_SMALL_DELTA < op.delta < _SMALL_DELTA


def _possible(expect: Expect) -> bool:
    """Whether a row can hold ``expect`` here: a version of this store is a bigint."""
    return isinstance(expect, Cond) or (type(expect) is int and -_BIGINT <= expect < _BIGINT)


def _impossible(op: Op) -> bool:
    return isinstance(op, (Put, Delete, Check)) and not _possible(op.expect)


def _statements(sql: Sql, i: int, op: Op) -> list[Statement]:
    """The statements of operation ``i`` (none for a ``Check`` of nothing)."""
    key = _key(op)
    if isinstance(op, Insert) or (isinstance(op, Put) and op.expect is Cond.ABSENT):
        return [(sql.insert, (*key, op.text, op.expires_at, run_started(op.ref, op.value), i))]
    if isinstance(op, Put):
        started = run_started(op.ref, op.value)
        if op.expect is Cond.ANY:
            return [(sql.upsert, (*key, op.text, op.expires_at, started))]
        return [(sql.update, (op.text, op.expires_at, started, *key, op.expect, i))]
    if isinstance(op, Increment):
        return [(sql.increment_small, (*key, str(op.delta), op.delta, i))]
    if op.expect is Cond.ABSENT:  # a Delete or Check of an absent row: hold the key until commit
        return [(sql.hold_absent, (*key, i)), (sql.release_absent, key)]
    if isinstance(op, Delete):
        return [(sql.delete, key)] if op.expect is Cond.ANY else [(sql.delete_at, (*key, op.expect, i))]
    return [] if op.expect is Cond.ANY else [(sql.check_at, (*key, op.expect, i))]


__all__ = ["BEGIN", "COMMIT", "ROLLBACK", "Answer", "Batch", "Plan", "Refusal", "Statement", "plan"]
