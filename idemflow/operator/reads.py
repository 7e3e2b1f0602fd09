"""Reads a caller already answered: a computation's reads of rows it holds, answered without a
store call (a request's partition of the runs table, read whole by one scan, and memos read
ahead in one batched read)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from idemflow.core.requests import Read, ReadMany, Steps
from idemflow.stores.base import Row, RowRef

T = TypeVar("T")


def answered(
    steps: Steps[T], rows: Mapping[RowRef, Row | None], whole: tuple[str, str] | None = None
) -> Steps[T]:
    """``steps`` with every read of a row in ``rows`` answered from it, and of a row in the
    partition ``whole`` (``(table, partition)``, read whole: a row not in ``rows`` is absent) too;
    every other request is passed on.

    >>> from idemflow.engine.drive import drive
    >>> from idemflow.stores import MemoryStore
    >>> def two():
    ...     return (yield Read(RowRef("t", "r-1", "k"))), (yield Read(RowRef("t", "r-1", "x")))
    >>> drive(answered(two(), {RowRef("t", "r-1", "k"): Row(7, 1)}, ("t", "r-1")), MemoryStore())
    (Row(value=7, version=1), None)
    """

    def held(ref: RowRef) -> bool:
        return ref in rows or (ref.table, ref.partition) == whole

    answer: Any = None
    failure: BaseException | None = None
    while True:
        try:
            wanted = steps.send(answer) if failure is None else steps.throw(failure)
        except StopIteration as done:
            result: T = done.value
            return result
        answer = failure = None
        if isinstance(wanted, Read) and held(wanted.ref):
            answer = rows.get(wanted.ref)
            continue
        if isinstance(wanted, ReadMany) and all(held(ref) for ref in wanted.refs):
            answer = [rows.get(ref) for ref in wanted.refs]
            continue
        try:
            answer = yield wanted
        except BaseException as exc:  # noqa: BLE001 - thrown back where the computation asked
            failure = exc
