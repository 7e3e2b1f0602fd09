"""The request's outcome, recorded before the caller has it: with the last step's commit if it
waited (:mod:`idemflow.engine.deferred`), else in a commit of its own.

Strict encoding guarantees the result equals what duplicates read back; a
result holding dicts is returned as read back (keys sorted), so the first
answer and every duplicate's serialise to the same bytes. A submission's
outcome deletes its outbox entry; a child's wakes its parent. A completion
right after a timer also takes the place of the step after it
(:data:`~idemflow.engine.memo_reader.WAIT_ENDED`), where an operator's abort meeting the
timer writes its memo: whichever is written first, the other meets it. Under workers the
record is written over the version its execution last read, so an operator's cancel that
lands first stands (the last step still commits, alone) and one that lands second finds the
request completed.
The record names where the request's atomic steps keep their memos
(:mod:`idemflow.core.places`, from the journal), so its steps are listed without its code.
"""

from __future__ import annotations

import dataclasses

from idemflow.core.plan import Cancelled
from idemflow.core.requests import CommitCache, Steps
from idemflow.engine.cursor import Cursor
from idemflow.engine.deferred import DeferredCommit, Pending, Restart
from idemflow.engine.given import Given, log
from idemflow.engine.journal import Journal
from idemflow.engine.memo_reader import WAIT_ABORTED, WAIT_ENDED, AbortWorkflow, MemoReader
from idemflow.engine.run_record import RunRecorder
from idemflow.engine.store_calls import StoreCalls
from idemflow.engine.wakeups import announce, wake_row
from idemflow.errors import BackendError, InvalidValueError, NonDeterminismError
from idemflow.keys import RUNS_TABLE, step_tag
from idemflow.records import MEMO_AT, RUN_AT, Memo, RunRecord, RunStatus, memo_row, memo_text, new_incarnation
from idemflow.serialization import JSON, encode, sorted_keys
from idemflow.stores.base import Committed, Cond, Conflict, Delete, Expect, Insert, Op, Put, RowRef


class OutcomeWriter:
    """Writes the completion record: the only code that ends a request's run record."""

    __slots__ = ("_calls", "_cursor", "_deferred", "_given", "_journal", "_memos", "_recorder")

    def __init__(
        self,
        given: Given,
        cursor: Cursor,
        calls: StoreCalls,
        recorder: RunRecorder,
        deferred: DeferredCommit,
        memos: MemoReader,
        journal: Journal,
    ) -> None:
        self._given = given
        self._journal = journal
        self._cursor = cursor
        self._calls = calls
        self._recorder = recorder
        self._deferred = deferred
        self._memos = memos

    def finish(self, status: RunStatus, result: JSON = None, reason: JSON = None) -> Steps[RunRecord]:
        """Record the outcome and return the record the caller answers with."""
        given, calls, recorder, deferred = self._given, self._calls, self._recorder, self._deferred
        plan, run_ref = given.plan, given.run_ref
        calls.renew()
        if type(result) is dict or type(result) is list:
            result = sorted_keys(result)
        incarnation = recorder.incarnation
        if incarnation is None and not self._cursor.run_known:  # a request with no step claims here
            incarnation = new_incarnation()
        record, value, text = self._record(status, result, reason, incarnation)
        pending = deferred.take()
        if pending is not None and pending.claims:  # the request's only step: its outcome says all
            outcome_insert = Insert(run_ref, value, text, given.expiry())
            if pending.leased:  # executions waiting on the lease watch for the memo: keep it
                kept = [pending.ops[MEMO_AT], outcome_insert, *pending.ops[RUN_AT + 1 :]]
                yield from deferred.commit(kept, pending, RUN_AT)
            else:
                yield from deferred.commit([outcome_insert, *pending.ops[RUN_AT + 1 :]], pending, 0)
            return record
        if not self._cursor.run_known:
            insert = Insert(run_ref, value, text, given.expiry())
            outcome = yield from calls.commit([insert], run_ref)
            if isinstance(outcome, Committed):
                self._cursor.known()
                return record
            yield from recorder.meet(outcome.failures[0].existing)
            incarnation = recorder.incarnation  # the record met is the run's: its claim, its tags
            record, value, text = self._record(status, result, reason, incarnation)
        expect: Expect = Cond.ANY
        if plan.stop_if_cancelled:  # written over the version last read: a cancel since then stands
            if recorder.seen is None:
                yield from recorder.look()
            expect = Cond.ANY if recorder.seen is None else recorder.seen
        ops: list[Op] = [Put(run_ref, value, text, expect, given.expiry())]
        opened = self._cursor.after_waits
        places: dict[RowRef, int] = {}
        if opened and status is RunStatus.COMPLETED:  # an abort meeting a timer writes there too
            for step in opened:
                ended = self._wait_ended(step, incarnation)
                places[ended.ref] = step
                ops.append(ended)
        cleanup: list[Op] = []
        cross = given.capabilities.cross_partition_commit
        if plan.submission is not None:  # nothing left to relay
            (ops if cross and plan.durable_outcome else cleanup).append(Delete(recorder.outbox_ref()))
        parent = plan.parent
        wake = None
        if parent is not None:  # its wait must hear of this outcome, whatever crashes next
            wake = wake_row(given, parent, f"child {given.workflow}|{given.request_id}")
            if cross:
                ops.append(wake)
            else:
                yield from calls.commit([wake], wake.ref)
        if pending is not None:
            if (
                deferred.foldable(ops)
                and len(pending.ops) + len(ops) <= given.capabilities.max_ops_per_commit
            ):
                yield from self._folded(pending, ops)
                ops = []
            else:
                yield from deferred.commit(pending.ops, pending, None)
        if ops:
            yield from self._settle(ops, places)
        if cleanup:
            yield CommitCache(cleanup)
        if parent is not None and wake is not None:
            yield from announce(given, parent, wake.ref)
        return record

    def _record(
        self, status: RunStatus, result: JSON, reason: JSON, incarnation: str | None
    ) -> tuple[RunRecord, JSON, str]:
        """The completion record, its value and its text: what the claim or the record met said
        of the run (when it was claimed, its incarnation, its tags), and the outcome."""
        given, recorder = self._given, self._recorder
        started_at, places = recorder.claimed_at(), self._journal.places()
        record = RunRecord(  # what RunRecord(..., RUNNING, ...).finished(...) is, built once
            given.fingerprint,
            status,
            result=result,
            reason=reason,
            finished_at=given.clock(),
            version=given.plan.version,
            started_at=started_at,
            incarnation=incarnation,
            tags=recorder.tags,
            places=places,
        )
        value: JSON = record.to_json()
        try:
            text = encode(value, "", envelope=1)
        except InvalidValueError as bad:  # the place is named only when needed: it costs a format
            raise InvalidValueError(f"result of workflow {given.workflow!r}", bad.problem) from None
        if record.places is not None and 4 * len(text) > given.capabilities.max_value_bytes:
            return self._without_places(record, value, text)
        return record, value, text

    def _folded(self, pending: Pending, ops: list[Op]) -> Steps[None]:
        """The last step's commit with the outcome's ``ops``. Where the record's put expects a
        version (``Plan.stop_if_cancelled``) and the record moved, the outcome is sent again
        over its version now; if the record says ``cancelled``, the step is committed alone (it
        finishes; the request stops) and :class:`~idemflow.core.plan.Cancelled` raised."""
        deferred = self._deferred
        while True:
            try:
                yield from deferred.commit([*pending.ops, *ops], pending, None)
                return
            except Restart:
                put = ops[0]
                if not (self._given.plan.stop_if_cancelled and isinstance(put, Put)):
                    raise
                try:
                    version = yield from self._record_moved(put.expect)
                except Cancelled:
                    yield from deferred.commit(pending.ops, pending, None)
                    raise
                if version == put.expect:  # the record stands as read: the step's commit failed
                    raise
                ops = [dataclasses.replace(put, expect=version), *ops[1:]]

    def _record_moved(self, expect: Expect) -> Steps[Expect]:
        """The run record's version after the outcome's put expecting ``expect`` did not apply:
        raises :class:`~idemflow.core.plan.Cancelled` if an operator cancelled the request
        meanwhile, :class:`~idemflow.core.plan.Finished` if another execution ended it."""
        row = yield from self._calls.read(self._given.run_ref)
        if row is None:
            return expect
        record = RunRecord.from_json(row.value)
        if record.status is RunStatus.CANCELLED:
            raise Cancelled(record)
        if record.status.final:
            yield from self._recorder.meet(row)  # raises Finished: its outcome is the answer
        return row.version

    def _without_places(self, record: RunRecord, value: JSON, text: str) -> tuple[RunRecord, JSON, str]:
        """A record whose places would take a result that fits over the backend's limit names
        none (the listing then says its atomic steps are not located), rather than fail."""
        if len(text.encode("utf-8")) <= self._given.capabilities.max_value_bytes:
            return record, value, text
        record = dataclasses.replace(record, places=None)
        value = record.to_json()
        return record, value, encode(value, "", envelope=1)

    def _wait_ended(self, step: int, incarnation: str | None) -> Insert:
        """The completion's memo in the place of step ``step``, the one after a timer: an insert,
        as the memo an operator's abort meeting the timer writes there."""
        given = self._given
        at = int(given.clock() * 1000)
        ref = RowRef(RUNS_TABLE, given.request_id, given.memo_prefix + step_tag(step))
        value: JSON = memo_row(WAIT_ENDED, None, at=at, run=incarnation)
        return Insert(ref, value, memo_text(WAIT_ENDED, None, at=at, run=incarnation), given.expiry())

    def _settle(self, ops: list[Op], places: dict[RowRef, int]) -> Steps[None]:
        """Write the outcome: Puts and Deletes that expect nothing, applied, and the completion's
        memos in the ``places`` after its timers (step numbers by row), which an abort may have
        taken (:meth:`_met_after_waits`). Where nothing but the caller relies on it (``run``:
        every step is committed, a duplicate replays them), a store that stays unreachable costs
        the record, not the answer; not where an abort may race it."""
        given = self._given
        if places or given.plan.stop_if_cancelled:
            while not isinstance((outcome := (yield from self._calls.commit(ops, given.run_ref))), Committed):
                ops = yield from self._met_after_waits(outcome, ops, places)
            return
        if given.plan.durable_outcome or given.plan.parent is not None:
            yield from self._calls.commit(ops, given.run_ref)
            return
        try:
            yield from self._calls.commit(ops, given.run_ref)
        except BackendError as lost:
            log.warning(
                "outcome not recorded (duplicates replay the steps instead): %s",
                lost,
                extra={"workflow": given.workflow, "request_id": given.request_id},
            )

    def _met_after_waits(
        self, outcome: Conflict, ops: list[Op], places: dict[RowRef, int]
    ) -> Steps[list[Op]]:
        """What the completion's memos after its timers met, as the operations to send again.

        An operator's abort at the timer (:data:`~idemflow.engine.memo_reader.WAIT_ABORTED`) came first: the
        request aborts there, as it would at any step after the wait (its undo runs here too,
        each step once). Another completion of this run came first (or this one's, its answer
        lost): that record is the answer. A memo an earlier run of the request id left is
        deleted and the place taken again."""
        given, calls, memos = self._given, self._calls, self._memos
        kept = list(ops)
        for failure in outcome.failures:
            op = ops[failure.index]
            if isinstance(op, Put) and op.ref == given.run_ref:  # a put over a version: it moved
                version = yield from self._record_moved(op.expect)
                kept[kept.index(op)] = dataclasses.replace(op, expect=version)
                continue
            step = places.get(op.ref) if isinstance(op, Insert) else None
            if step is None:  # pragma: no cover - the record's put and the rest expect nothing
                raise AssertionError(f"the outcome's {type(op).__name__} on {op.ref} cannot fail")
            existing = failure.existing if failure.existing is not None else (yield from calls.read(op.ref))
            if existing is None:
                continue  # gone meanwhile (an earlier run's, deleted): the place is taken again
            if memos.of_earlier_run(existing):
                yield from memos.this_runs(op.ref, existing)
                continue
            memo = Memo.from_json(existing.value)
            if memo is not None and memo.aborted and memo.identity == WAIT_ABORTED:
                self._cursor.revisit(step)  # where the abort stands: its on_abort is numbered on from it
                raise AbortWorkflow(memo.value)
            if memo is None:
                raise NonDeterminismError(
                    given.workflow, given.request_id, step, repr(existing.value), repr(WAIT_ENDED)
                )
            if memo.identity != WAIT_ENDED:  # a step's own memo (a send's, say): the wait was over
                kept.remove(op)  # before it, and an abort meeting it replays on: nothing to hold
                continue
            yield from self._recorder.meet((yield from calls.read(given.run_ref)))  # Finished, as a rule
            kept.remove(op)  # a completion of this run stands there: this one's record is the same
        return kept
