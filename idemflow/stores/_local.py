"""The commit algorithm shared by the stores that evaluate conditions in-process.

:class:`MemoryStore` and :class:`SqliteStore` hold their rows locally (a dict,
a SQLite file under an exclusive write transaction), so checking conditions
and applying writes is the same code over two row accessors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from idemflow.errors import InvalidValueError
from idemflow.serialization import JSON, decode, encode
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


def incremented(ref: RowRef, current: Stored | None, delta: int | float) -> str:
    """Text of ``current`` plus ``delta``; a non-number row is an error."""
    base: JSON = 0 if current is None else decode(current[0])
    if type(base) not in (int, float):
        raise InvalidValueError(
            f"increment of {ref.table}/{ref.partition}", f"row holds {type(base).__name__}, not a number"
        )
    assert isinstance(base, (int, float))
    return encode(base + delta, f"increment of {ref.table}/{ref.partition}")


def commit_locally(
    ops: Sequence[Op],
    lookup: Callable[[RowRef], Stored | None],
    write: Callable[[RowRef, str, int, float | None], None],
    remove: Callable[[RowRef], None],
) -> CommitOutcome:
    """Check every condition, then apply every write, or report the failures."""
    failures: list[OpFailure] = []
    current: list[Stored | None] = []
    for index, op in enumerate(ops):
        row = lookup(op.ref)
        current.append(row)
        if isinstance(op, Insert) and row is not None:
            failures.append(OpFailure(index, Row(decode(row[0]), row[1])))
        elif isinstance(op, (Put, Delete, Check)) and not matches(row, op.expect):
            failures.append(OpFailure(index))
    if failures:
        return Conflict(tuple(failures))
    for op, row in zip(ops, current, strict=True):
        version = 1 if row is None else row[1] + 1
        if isinstance(op, (Put, Insert)):
            write(op.ref, op.text, version, op.expires_at)
        elif isinstance(op, Increment):
            write(op.ref, incremented(op.ref, row, op.delta), version, None)
        elif isinstance(op, Delete) and row is not None:
            remove(op.ref)
    return COMMITTED
