"""Reads a caller already answered: a computation's reads of rows it holds, answered without a
store call (a request's partition of the runs table, read whole by one scan)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from idemflow.core.requests import Read, ReadMany, Steps
from idemflow.keys import RUNS_TABLE
from idemflow.stores.base import Row

T = TypeVar("T")


def answered(steps: Steps[T], rows: Mapping[tuple[str, str], Row], request_id: str) -> Steps[T]:
    """``steps`` with every read of a row in ``request_id``'s partition of the runs table answered
    from ``rows`` (``(partition, key)`` to row: that partition, as one scan read it; a row not
    in it is absent), and every other request passed on.

    >>> from idemflow.core.row import RowRef
    >>> from idemflow.engine.drive import drive
    >>> from idemflow.stores import MemoryStore
    >>> def two():
    ...     return (yield Read(RowRef(RUNS_TABLE, "r-1", "k"))), (yield Read(RowRef(RUNS_TABLE, "r-1", "x")))
    >>> drive(answered(two(), {("r-1", "k"): Row(7, 1)}, "r-1"), MemoryStore())
    (Row(value=7, version=1), None)
    """
    answer: Any = None
    failure: BaseException | None = None
    while True:
        try:
            wanted = steps.send(answer) if failure is None else steps.throw(failure)
        except StopIteration as done:
            result: T = done.value
            return result
        answer = failure = None
        if isinstance(wanted, Read) and _held(wanted.ref.table, wanted.ref.partition, request_id):
            answer = rows.get((wanted.ref.partition, wanted.ref.key))
            continue
        if isinstance(wanted, ReadMany) and all(_held(r.table, r.partition, request_id) for r in wanted.refs):
            answer = [rows.get((ref.partition, ref.key)) for ref in wanted.refs]
            continue
        try:
            answer = yield wanted
        except BaseException as exc:  # noqa: BLE001 - thrown back where the computation asked
            failure = exc


def _held(table: str, partition: str, request_id: str) -> bool:
    return table == RUNS_TABLE and partition == request_id
