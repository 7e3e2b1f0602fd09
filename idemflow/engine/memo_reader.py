"""Reading a step's memo: the value it holds, the abort it recorded, or another step's memo met.

A memo is the durable answer of one step (:mod:`idemflow.records`). Every way
an execution meets one (replaying, a commit that lost to it, a body that
raised on data that moved on, an effect's lease held by another execution)
answers the same way: the memo's value, :class:`AbortWorkflow` if the step
aborted, :class:`~idemflow.errors.NonDeterminismError` if the memo is another
step's. A memo of an earlier run of the request id (it outlived its run
record: DynamoDB's TTL deletes in no order, a sweep in key order) is no answer
at all: it is deleted and the step runs anew. This part is that one reading,
the judging of whose run a memo is, and the replay of table-less steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from idemflow import telemetry
from idemflow.core.memos import incarnation_number, of_earlier_incarnation
from idemflow.core.plan import Finished, Renewed
from idemflow.core.requests import Steps
from idemflow.engine.cursor import Cursor
from idemflow.engine.given import Given
from idemflow.engine.run_record import RunRecorder
from idemflow.engine.store_calls import StoreCalls
from idemflow.errors import NonDeterminismError
from idemflow.keys import RUNS_TABLE, step_tag
from idemflow.records import MEMO_AT, Memo, RunRecord, of_earlier_run
from idemflow.serialization import JSON
from idemflow.stores.base import CommitOutcome, Committed, Delete, Insert, Op, Put, Row, RowRef

WAIT_ABORTED = "abort at a wait"
"""The identity of the memo an abort writes in the place of the step after a wait it met
(``sleep``): whatever step a racing worker that passed the timer reaches there, it aborts."""

WAIT_ENDED = "end after a wait"
"""The identity of the memo a request's completion writes in the place of the step after a wait
that no step's memo took (the workflow ended there, or went on with steps that write none): an
abort's memo there and this one are both inserts, so exactly one of them is written, and the
completion and the abort cannot both stand."""


class WaitOver(BaseException):
    """An abort's memo at a wait met the memo of what came after the wait: a worker whose timer
    fired committed the step there first, or the request's completion (``ended``)."""

    def __init__(self, *, ended: bool) -> None:
        super().__init__()
        self.ended = ended


class AbortWorkflow(BaseException):
    """A step aborted (now or in an earlier execution): unwind to compensate."""

    def __init__(self, reason: JSON) -> None:
        super().__init__(reason)
        self.reason = reason


class MemoReader:
    """What the memos an execution meets answer, and whose run they are."""

    __slots__ = ("_calls", "_cursor", "_given", "_recorder")

    def __init__(self, given: Given, cursor: Cursor, calls: StoreCalls, recorder: RunRecorder) -> None:
        self._given = given
        self._cursor = cursor
        self._calls = calls
        self._recorder = recorder

    def of_earlier_run(self, memo: Row) -> bool:
        """Whether ``memo`` belongs to an earlier run of the request id than this execution's."""
        return of_earlier_run(memo, self._recorder.incarnation)

    def of_earlier_incarnation(self, memo: Row) -> bool:
        """Whether ``memo`` is one an earlier incarnation of this request left (it continued as
        new since): replaced in place by this incarnation's, never deleted first
        (:mod:`idemflow.engine.renewal`)."""
        return of_earlier_incarnation(memo, self._recorder.incarnation)

    def replaced(self, outcome: CommitOutcome, ops: list[Op]) -> list[Op] | None:
        """``ops`` again with their memo insert made a write over the memo an earlier incarnation
        left there, conditional on the version the failed commit met, if that memo alone refused
        them; else None. One write replaces it: an execution still on the earlier incarnation
        reads its own memo or this one, never an empty place."""
        assert not isinstance(outcome, Committed)
        failures = outcome.failures
        insert = ops[MEMO_AT] if ops else None
        if len(failures) != 1 or failures[0].index != MEMO_AT or not isinstance(insert, Insert):
            return None
        existing = failures[0].existing
        if existing is None or not self.of_earlier_incarnation(existing):
            return None
        put = Put(
            insert.ref, insert.value, insert.text, expect=existing.version, expires_at=insert.expires_at
        )
        return [put, *ops[MEMO_AT + 1 :]]

    def behind(self) -> Steps[None]:
        """Raise :class:`~idemflow.core.plan.Renewed` (or ``Finished``) if the run record says the
        request went on to a later incarnation than this execution's: a memo of another
        incarnation than its own is then no leftover to delete, but the request's present."""
        row = yield from self._calls.read(self._given.run_ref)
        if row is None:
            return
        record = RunRecord.from_json(row.value)
        if incarnation_number(record.incarnation) > incarnation_number(self._recorder.incarnation):
            if record.status.final:
                raise Finished(record)
            raise Renewed(record, duplicate=True)

    def here(self) -> RowRef:
        """Where the current table-less step's memo lives."""
        given = self._given
        return RowRef(RUNS_TABLE, given.request_id, given.memo_prefix + step_tag(self._cursor.step))

    def replayed(self, identity: str) -> Steps[tuple[bool, Any]]:
        """The current table-less step's memo when replaying: ``(True, value)``, else
        ``(False, None)``."""
        if not self._cursor.replaying:
            return False, None
        here = self.here()
        row = yield from self._calls.read(here)
        if row is not None and self.of_earlier_incarnation(row):
            return False, None  # still replaying: the step's commit reads it again and writes over it
        if row is not None and of_earlier_run(row, self._recorder.incarnation):
            row = yield from self.this_runs(here, row)
        if row is None:
            self._cursor.fresh()  # memos are sequential: none after a missing one
            return False, None
        value = self.answer(row, identity)
        self._cursor.took()  # its memo stands in the place a timer before it left open, if any
        return True, value

    def first_due(self, rows: Sequence[tuple[str, str, Row]], steps: Sequence[int]) -> float | None:
        """The earliest due time memoized at ``steps`` among ``rows`` (a scan of the request's
        partition, which holds its memos), or None if none of them is there yet: read from a
        scan the caller made anyway, so it costs no call."""
        wanted = {self._given.memo_prefix + step_tag(step) for step in steps}
        dues = []
        for _, key, row in rows:
            memo = Memo.from_json(row.value) if key in wanted and not self.of_earlier_run(row) else None
            if memo is not None and not memo.aborted and isinstance(memo.value, int | float):
                dues.append(float(memo.value))
        return min(dues, default=None)

    def answer(self, row: Row, identity: str) -> Any:
        """The value the memo in ``row`` holds, or :class:`AbortWorkflow` if its step aborted; a
        memo of another step than ``identity`` is non-determinism."""
        given = self._given
        if given.traced:
            telemetry.count(telemetry.DUPLICATES_ANSWERED, given.workflow)
        memo = Memo.from_json(row.value)
        if memo is not None and memo.aborted and memo.identity == WAIT_ABORTED:
            raise AbortWorkflow(memo.value)  # aborted at the wait before this step: any step
        if memo is not None and identity == WAIT_ABORTED:  # the wait was over before the abort
            raise WaitOver(ended=memo.identity == WAIT_ENDED)
        if memo is None or memo.identity != identity:
            recorded = row.value if memo is None else memo.identity
            raise NonDeterminismError(
                given.workflow, given.request_id, self._cursor.step, repr(recorded), repr(identity)
            )
        if memo.aborted:
            raise AbortWorkflow(memo.value)
        return memo.value

    def this_runs(self, memo_ref: RowRef, row: Row) -> Steps[Row | None]:
        """``row`` (read at ``memo_ref``), unless it is a memo an earlier request with this id left:
        then it is deleted, if it is still as read, and the place read again.

        Such a memo outlived its run record (DynamoDB's TTL deletes in no order; a sweep visits
        rows in key order) and this request reuses the id after retention: it is a new request,
        and replaying that memo would make it a partial run of the old one. One delete, one
        read: what is read next is judged by the caller (a racing execution may have claimed
        the request meanwhile, and only its record says whose memo that is)."""
        assert row is not None
        calls = self._calls
        if not self.of_earlier_incarnation(row):
            yield from self.behind()
        yield from calls.commit([Delete(memo_ref, expect=row.version)], memo_ref)
        return (yield from calls.read(memo_ref))

    def earlier_memo_dropped(
        self,
        outcome: CommitOutcome,
        ops: Sequence[Op],
        memo_ref: RowRef,
        *,
        claims: bool,
        also: int | None = None,
    ) -> Steps[bool]:
        """Whether a step's commit failed only on its memo insert meeting an earlier run's memo,
        now deleted: then the same operations are sent again (no rerun: an effect's call is not
        made twice). Anything else is left to the caller.

        Where the commit also claims the request (``claims``), this execution's incarnation is
        only drawn, not established: a memo of another incarnation may be a racing execution's
        that claimed first (a store may report only the first failed condition). Only a run
        record that is absent proves the memo an earlier run's: a memo is never written before
        its run's record, and a record goes only once its request has finished.

        ``also`` is where another memo's insert is among ``ops`` that an earlier run may have
        left the same way: the ``any_of`` decision a branch's step carries."""
        assert not isinstance(outcome, Committed)
        failures = outcome.failures
        at = failures[0].index if len(failures) == 1 else None
        if at is None or not (at == also or (at == MEMO_AT and ops[MEMO_AT].ref == memo_ref)):
            return False
        memo_ref = ops[at].ref
        existing = failures[0].existing
        if existing is None or not of_earlier_run(existing, self._recorder.incarnation):
            return False
        if self.of_earlier_incarnation(existing):
            return False  # replaced, not dropped (see replaced)
        if claims and (yield from self._calls.read(self._given.run_ref)) is not None:
            return False
        yield from self.this_runs(memo_ref, existing)
        return True
