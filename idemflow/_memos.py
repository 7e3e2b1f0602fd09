"""Reading a step's memo: the value it holds, the abort it recorded, or another step's memo met.

A memo is the durable answer of one step (:mod:`idemflow.records`). Every way
an execution meets one (replaying, a commit that lost to it, a body that
raised on data that moved on, an effect's lease held by another execution)
answers the same way: the memo's value, :class:`AbortWorkflow` if the step
aborted, :class:`~idemflow.errors.NonDeterminismError` if the memo is another
step's. This part is that one reading, and the replay of table-less steps.
"""

from __future__ import annotations

from typing import Any

from idemflow import telemetry
from idemflow._cursor import Cursor
from idemflow._given import Given
from idemflow._io import Steps
from idemflow._store_calls import StoreCalls
from idemflow.errors import NonDeterminismError
from idemflow.keys import RUNS_TABLE, step_tag
from idemflow.records import Memo
from idemflow.serialization import JSON
from idemflow.stores.base import Row, RowRef


class AbortWorkflow(BaseException):
    """A step aborted (now or in an earlier execution): unwind to compensate."""

    def __init__(self, reason: JSON) -> None:
        super().__init__(reason)
        self.reason = reason


class MemoReader:
    """What the memos an execution meets answer."""

    __slots__ = ("_calls", "_cursor", "_given")

    def __init__(self, given: Given, cursor: Cursor, calls: StoreCalls) -> None:
        self._given = given
        self._cursor = cursor
        self._calls = calls

    def here(self) -> RowRef:
        """Where the current table-less step's memo lives."""
        given = self._given
        return RowRef(RUNS_TABLE, given.request_id, given.memo_prefix + step_tag(self._cursor.step))

    def replayed(self, identity: str) -> Steps[tuple[bool, Any]]:
        """The current table-less step's memo when replaying: ``(True, value)``, else
        ``(False, None)``."""
        if not self._cursor.replaying:
            return False, None
        row = yield from self._calls.read(self.here())
        if row is None:
            self._cursor.fresh()  # memos are sequential: none after a missing one
            return False, None
        return True, self.answer(row, identity)

    def answer(self, row: Row, identity: str) -> Any:
        """The value the memo in ``row`` holds, or :class:`AbortWorkflow` if its step aborted; a
        memo of another step than ``identity`` is non-determinism."""
        given = self._given
        if given.traced:
            telemetry.count(telemetry.DUPLICATES_ANSWERED, given.workflow)
        memo = Memo.from_json(row.value)
        if memo is None or memo.identity != identity:
            recorded = row.value if memo is None else memo.identity
            raise NonDeterminismError(
                given.workflow, given.request_id, self._cursor.step, repr(recorded), repr(identity)
            )
        if memo.aborted:
            raise AbortWorkflow(memo.value)
        return memo.value
