"""The commit algorithm shared by the stores that evaluate conditions in-process.

:class:`MemoryStore` and :class:`SqliteStore` hold their rows locally (a dict,
a SQLite file under an exclusive write transaction), so checking conditions
and applying writes is the same code over two row accessors.

Why a *floor* for versions: a row's version must never repeat, not even after
the row is deleted and created again (a body that read it before the delete
would otherwise commit against the new row; see :mod:`idemflow.stores._op_rules`).
These stores see every commit under one lock, so instead of a random first
version they keep one number per store, the *floor*: the highest version any
deleted row had. A new row starts just above it (:func:`created_version`), so
above every version of any earlier incarnation of that row, and each write adds
one. This costs no extra round trip, keeps versions small and deterministic
(a row never deleted starts at 1, so test traces read the same on every run),
and keeps nothing per deleted row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from idemflow.number_model import Number
from idemflow.serialization import JSON, decode
from idemflow.stores._op_rules import added, counted, expectation, version_after
from idemflow.stores.base import (
    COMMITTED,
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
    RowRef,
)

Stored = tuple[str, int]
"""A locally held row: canonical JSON text and integer version."""


def matches(current: Stored | None, expect: Expect) -> bool:
    """Whether a row in state ``current`` satisfies ``expect``."""
    if expect is Cond.ANY:
        return True
    if expect is Cond.ABSENT:
        return current is None
    return current is not None and current[1] == expect


def incremented(ref: RowRef, current: Stored | None, delta: Number) -> str:
    """Text of ``current`` plus ``delta``; a non-number row is an error."""
    quick = counted("0" if current is None else current[0], delta)
    if quick is not None:
        return quick
    base: JSON = 0 if current is None else decode(current[0])
    return added(ref, base, delta)


def created_version(floor: int) -> int:
    """The first version of a row created now: above every version a deleted row had."""
    return floor + 1


def written_version(current: Stored | None, floor: int) -> int:
    """The version a write leaves on a row now in state ``current``."""
    return version_after(None if current is None else current[1], created_version(floor))


def raised_floor(floor: int, removed: Stored) -> int:
    """The floor once the row ``removed`` is deleted."""
    return max(floor, removed[1])


def commit_locally(
    ops: Sequence[Op],
    lookup: Callable[[RowRef], Stored | None],
    write: Callable[[RowRef, str, int, float | None], None],
    remove: Callable[[RowRef], None],
    floor: int,
) -> tuple[CommitOutcome, int]:
    """Check every condition, then apply every write, or report the failures.

    Returns the outcome and the store's floor after the commit.
    """
    failures: list[OpFailure] = []
    current: list[Stored | None] = []
    for index, op in enumerate(ops):
        row = lookup(op.ref)
        current.append(row)
        if not matches(row, expectation(op)):
            existing = Row(decode(row[0]), row[1]) if isinstance(op, Insert) and row is not None else None
            failures.append(OpFailure(index, existing))
    if failures:
        return Conflict(tuple(failures)), floor
    for op, row in zip(ops, current, strict=True):
        if isinstance(op, (Put, Insert)):
            write(op.ref, op.text, written_version(row, floor), op.expires_at)
        elif isinstance(op, Increment):
            write(op.ref, incremented(op.ref, row, op.delta), written_version(row, floor), None)
        elif isinstance(op, Delete) and row is not None:
            remove(op.ref)
            floor = raised_floor(floor, row)
    return COMMITTED, floor
