"""One step: replay it from its memo, or execute its body and commit it exactly once.

A step's memo is inserted in the same commit as its data; a commit that loses to another execution's
memo returns that memo, one that meets the run record switches the execution to replay, and a data
conflict reruns the body under the policy's tenacity retryer. A step the workflow goes on from may
leave its commit :class:`Pending` for the workflow's next move.

The stepper owns what lives for one step (its attempts, an effect's answer); what the step is, where
it goes and whether its commit may wait is passed in, never left on an object for a later method to
pick up. A commit that waits is handed to :mod:`idemflow.engine.deferred`; the guard around an
effect's call (its lease, its limit group) is :mod:`idemflow.engine.effect_call`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from idemflow import telemetry
from idemflow.core.policy import DataConflict, retried
from idemflow.core.requests import CallOut, Commit, NeedRows, Prefetched, ReadMany, Steps, Turn
from idemflow.engine.attempt import NOT_CALLED, RETRY, Extra, StepArgs, Unreachable, stop_if_present
from idemflow.engine.cursor import Cursor
from idemflow.engine.decision import Preempted, carry
from idemflow.engine.deferred import DeferredCommit, Pending
from idemflow.engine.effect_call import LOOK_AGAIN, EffectCall, RunRecordSeen
from idemflow.engine.given import Given
from idemflow.engine.journal import Journal
from idemflow.engine.memo_reader import AbortWorkflow, MemoReader
from idemflow.engine.run_record import RunRecorder
from idemflow.engine.step_log import observed
from idemflow.engine.store_calls import StoreCalls
from idemflow.engine.tx import StepAborted, Tx, stale
from idemflow.errors import (
    ConflictError,
    InvalidValueError,
    LimitExceededError,
    LimitReachedError,
    TransientError,
)
from idemflow.keys import RUNS_TABLE, step_tag
from idemflow.records import MEMO_AT, RUN_AT, memo_row, memo_run, memo_text
from idemflow.stores.base import Committed, Delete, Insert, Op, Put, RowRef, Version


class Stepper:
    """The steps of an execution, each replayed or executed and committed once."""

    __slots__ = (
        "_attempts",
        "_calls",
        "_cursor",
        "_deferred",
        "_effect",
        "_given",
        "_journal",
        "_memos",
        "_recorder",
        "called",
    )

    def __init__(
        self,
        given: Given,
        cursor: Cursor,
        calls: StoreCalls,
        memos: MemoReader,
        recorder: RunRecorder,
        deferred: DeferredCommit,
        journal: Journal,
    ) -> None:
        self._given = given
        self._memos = memos
        self._deferred = deferred
        self._cursor = cursor
        self._calls = calls
        self._recorder = recorder
        self._journal = journal
        self._effect = EffectCall(given, cursor, calls, memos, recorder, journal)
        """The guard around an effect's call: its lease, its limit group's slot."""
        self._attempts = 0
        """Attempts of the current step beyond its first (conflicts, transient reads): for its log."""
        self.called: Any = NOT_CALLED
        """What the current effect's call answered in this execution, if it was called (an undo
        needs it when the request is undone at that very call)."""

    def forget_call(self) -> None:
        """An effect begins: no answer of it seen yet (its attempts share what they see)."""
        self.called = NOT_CALLED

    def aside(self) -> tuple[Any, int]:
        """What the current step saw (its call's answer, its attempts), for a branch to keep."""
        return self.called, self._attempts

    def back(self, kept: tuple[Any, int]) -> None:
        self.called, self._attempts = kept

    def memoized(
        self, identity: str, body: Callable[[Tx], Any], call_out: CallOut | None = None
    ) -> Steps[Any]:
        """The next step, with no table of its own: its memo sits beside the run record."""
        self._cursor.advance()
        return self.forward(RUNS_TABLE, self._given.request_id, identity, body, call_out)

    def forward(
        self,
        table: str,
        partition: str,
        identity: str,
        body: Callable[[Tx], Any],
        call_out: CallOut | None,
        extra: Extra | None = None,
        *,
        again: bool = False,
        defer: bool = False,
    ) -> Steps[Any]:
        """The current forward step's computation (a plain function: no generator frame of its
        own); ``again``: an attempt after a failed one, journaled already; ``defer``: its commit
        may wait for the workflow's next move (:class:`Pending`)."""
        given, cursor = self._given, self._cursor
        plan = given.plan
        if plan.abort is not None and not cursor.cleaning:  # memos win: only a new step aborts
            reason = plan.abort.reason
            body, call_out, extra = (lambda tx: tx.abort(reason)), None, None
        cursor.identity = identity
        if cursor.after_waits:  # a timer before this step left its place open: the memo takes it
            cursor.took()
        journal = self._journal
        if journal.noting and not again:
            journal.note(table, partition, identity)
        if table != RUNS_TABLE:  # an atomic step's memo is with its data: the record names where
            journal.placed(table, partition, cursor.step)
        tag = step_tag(cursor.step)
        return self.run_step(
            table, partition, tag, identity, body, True, call_out, extra, defer and not again
        )

    def run_step(
        self,
        table: str,
        partition: str,
        tag: str,
        identity: str,
        body: Callable[[Tx], Any],
        abortable: bool,
        call_out: CallOut | None = None,
        extra: Extra | None = None,
        defer: bool = False,
    ) -> Steps[Any]:
        """The computation that replays the step from its memo, or executes and commits it exactly once
        (a plain function: no generator frame of its own). A step whose body calls out (an effect)
        resends its commit on a transient error instead of rerunning: a rerun would call the outside
        service again."""
        given = self._given
        memo_ref = RowRef(table, partition, given.memo_prefix + tag)
        self._calls.renew()
        step = self._step_once(memo_ref, identity, body, abortable, call_out, extra, defer)
        if not (given.traced or given.logged):  # the hot path
            return step
        self._attempts = 0
        return observed(given, self._cursor, self._deferred, identity, step, lambda: self._attempts)

    def _step_once(
        self,
        memo_ref: RowRef,
        identity: str,
        body: Callable[[Tx], Any],
        abortable: bool,
        call_out: CallOut | None,
        extra: Extra | None,
        defer: bool,
    ) -> Steps[Any]:
        """The step's first attempt, then, if it met a conflict, more under the policy."""
        try:
            outcome = yield from self._attempt(memo_ref, identity, body, abortable, call_out, extra, defer)
        except TransientError:  # the commit's send failed: rerun (the loop re-raises it last)
            if call_out is not None:  # resent until the deadline already; a rerun would call out again
                raise
            outcome = RETRY
        if outcome is not RETRY and type(outcome) is not Unreachable:
            return outcome
        given = self._given
        retrying = given.policy.rerunning(self._calls.until)
        # Only a step's first attempt may defer its commit.
        again = StepArgs(memo_ref, identity, body, abortable, call_out, extra, False)
        try:
            return (yield from retried(retrying, lambda: self._retry(again)))
        except DataConflict:
            attempts = retrying.statistics.get("attempt_number", 0) + 1
            where = (memo_ref.table, memo_ref.partition)
            raise ConflictError(
                given.workflow, given.request_id, self._cursor.step, *where, attempts
            ) from None

    def _retry(self, step: StepArgs) -> Steps[Any]:
        """One more attempt, in this process's turn on the partition (see :mod:`idemflow.engine.turns`)."""
        memo_ref = step.memo_ref
        self._attempts += 1
        if self._given.traced:
            telemetry.count(telemetry.CONFLICTS_RETRIED, self._given.workflow)
        give_back = yield Turn(memo_ref.table, memo_ref.partition, self._calls.until)
        try:
            outcome = yield from self._attempt(*step)
        finally:
            give_back()
        if outcome is RETRY:
            raise DataConflict
        if type(outcome) is Unreachable:
            raise outcome.error  # retried as a conflict is; the last one reaches the caller
        return outcome

    def _attempt(
        self,
        memo_ref: RowRef,
        identity: str,
        body: Callable[[Tx], Any],
        abortable: bool,
        call_out: CallOut | None,
        extra: Extra | None,
        defer: bool,
    ) -> Steps[Any]:
        given, cursor, calls, recorder, memos = (
            self._given,
            self._cursor,
            self._calls,
            self._recorder,
            self._memos,
        )
        since = time.monotonic()  # when an effect first asked for its limit group's room
        made: Any = NOT_CALLED  # the call's answer, kept if its commit only met another's claim
        replacing: Version | None = None  # an earlier incarnation's memo here: written over
        while True:  # loops when the commit revealed an existing run record, or after a wait
            if cursor.replaying:
                row = yield from calls.read(memo_ref)
                if row is not None and memos.of_earlier_incarnation(row):
                    replacing, row = row.version, None  # still replaying: the next has one too
                elif row is not None and memos.of_earlier_run(row):
                    row = yield from memos.this_runs(memo_ref, row)
                if row is not None:
                    return memos.answer(row, identity)
                if replacing is None:
                    cursor.fresh()
            if given.plan.stop_if_cancelled:  # before an outside call: a cancel stops the request here
                yield from recorder.look(reading=call_out is not None)
            peek = None
            if not cursor.run_known:
                if not given.capabilities.cross_partition_commit:
                    yield from recorder.claim()
                    continue
                peek = (given.run_ref, stop_if_present)
            reader = given.reader if given.reader is not None else Prefetched()
            tx = Tx(reader, memo_ref.table, memo_ref.partition, peek)
            try:
                while True:  # more than once only where reads are prefetched
                    try:
                        result = body(tx)
                        break
                    except NeedRows as need:
                        wanted: Sequence[RowRef] = need.refs
                    assert isinstance(reader, Prefetched)
                    reader.add(wanted, (yield ReadMany(wanted)))
                    tx = Tx(reader, memo_ref.table, memo_ref.partition, peek)
                if call_out is not None:
                    if made is not NOT_CALLED:  # its commit met another claim: committed, not made again
                        result = made
                    elif call_out.lease is None and call_out.group is None:
                        result = self.called = made = yield call_out
                    else:
                        if call_out.lease is not None:
                            recorded = yield from self._effect.leased(memo_ref, call_out.lease)
                            if recorded is not None:  # another execution made the call
                                return memos.answer(recorded, identity)
                        called = yield from self._effect.guarded(memo_ref, call_out, since)
                        if called is LOOK_AGAIN:  # waited here for its limit group: look again
                            continue
                        result = self.called = made = called
            except RunRecordSeen as seen:
                yield from recorder.meet(seen.row)  # returns only to replay
                continue
            except LimitReachedError:  # the call was not made: nothing to look for
                raise
            except StepAborted as abort:
                if not abortable:
                    raise
                aborted, value = True, abort.reason
                data_ops: list[Op] = [*tx.read_checks()]
            except TransientError as unreachable:  # a read was throttled or got no answer
                return Unreachable(unreachable)
            except Exception:
                # A replay whose data moved on may fail where the first run
                # succeeded: the memo, if any, is the answer.
                row = yield from calls.read(memo_ref)
                if row is not None and not cursor.run_known and memo_run(row) is not None:
                    # No claim yet: a memo never precedes its run's record, which says whose it is.
                    met = yield from calls.read(given.run_ref)
                    if met is not None:
                        yield from recorder.meet(met)
                    else:
                        yield from memos.this_runs(memo_ref, row)
                    continue
                if row is not None and memos.of_earlier_incarnation(row):
                    row = None
                elif row is not None and memos.of_earlier_run(row):
                    row = yield from memos.this_runs(memo_ref, row)
                if row is not None:
                    return memos.answer(row, identity)
                if (yield from stale(tx)):  # reads that were never one snapshot: run it again
                    return RETRY
                raise
            else:
                aborted, value = False, result
                data_ops = tx.ops()
            expires = given.expiry()
            run_included = not cursor.run_known
            claim = recorder.claim_ops(expires, with_outbox=True) if run_included else ()  # draws the run
            at = int(given.clock() * 1000)
            run = recorder.incarnation
            memo_value = memo_row(identity, value, aborted=aborted, at=at, run=run)
            try:
                text = memo_text(identity, value, aborted=aborted, at=at, run=run)
            except InvalidValueError as bad:  # the place is named only when needed: it costs a format
                where = f"result of step {cursor.step} ({identity}) of workflow {given.workflow!r}"
                raise InvalidValueError(where, bad.problem) from None
            memo_op = (
                Insert(memo_ref, memo_value, text, expires)
                if replacing is None
                else Put(memo_ref, memo_value, text, replacing, expires)
            )
            ops: list[Op] = [memo_op, *claim]
            ops.extend(data_ops)
            if extra is not None and not aborted:
                ops.extend((yield from extra()))
            decided_at = None
            if cursor.deciding is not None and not aborted:  # a branch of an any_of: it may decide it
                decided_at = carry(
                    cursor.deciding, cursor.step, ops, given.memo_prefix, given.request_id, at, run, expires
                )
            if call_out is not None and call_out.lease is not None:
                ops.append(Delete(self._effect.lease_ref(memo_ref)))  # ended with the call it guarded
            if defer and not aborted and extra is None and self._deferred.foldable(ops):
                # Committed by the workflow's next move: with the outcome, if it returns now.
                leased = call_out is not None and call_out.lease is not None
                self._deferred.hold(Pending(ops, memo_ref, run_included, leased))
                return value
            while True:  # more than once only to replace a memo an earlier run left
                if call_out is not None or given.traced:  # an effect's commit is resent as it is
                    outcome = yield from calls.commit(ops, memo_ref, resend=call_out is not None)
                else:  # any other's failed send reruns the body
                    try:
                        outcome = yield Commit(ops)
                    except LimitExceededError as refused:
                        raise calls.named(refused, memo_ref) from None
                if isinstance(outcome, Committed):
                    break
                swapped = memos.replaced(outcome, ops)
                if swapped is not None:  # over an earlier incarnation's memo
                    ops = swapped
                    continue
                if not (
                    yield from memos.earlier_memo_dropped(
                        outcome, ops, memo_ref, claims=run_included, also=decided_at
                    )
                ):
                    break
            if isinstance(outcome, Committed):
                cursor.committed()
                if given.traced:
                    telemetry.count(telemetry.STEPS_COMMITTED, given.workflow)
                if aborted:
                    raise AbortWorkflow(value)
                # Strict encoding guarantees decode(encode(x)) == x: no need to parse it back.
                return value
            by_index = {failure.index: failure for failure in outcome.failures}
            if run_included and RUN_AT in by_index:
                yield from recorder.meet(by_index[RUN_AT].existing)
            existing_memo = by_index[MEMO_AT].existing if MEMO_AT in by_index else None
            if existing_memo is not None and memos.of_earlier_incarnation(existing_memo):
                return RETRY  # data moved on too: the body again, then its memo replaced
            if existing_memo is not None and memos.of_earlier_run(existing_memo):
                if run_included and RUN_AT not in by_index:  # this claim did not fail: is it the run?
                    met = yield from calls.read(given.run_ref)
                    if met is not None:  # another execution's claim: its record says whose memo this is
                        yield from recorder.meet(met)
                        continue
                yield from memos.this_runs(memo_ref, existing_memo)  # an earlier run's
                continue
            if existing_memo is not None:
                return memos.answer(existing_memo, identity)
            if run_included and RUN_AT in by_index:
                continue  # replaying now: read the memo first
            if decided_at in by_index:  # another branch of its any_of ended first
                raise Preempted(by_index[decided_at].existing)
            return RETRY

    def undone_at(self, step: int) -> Steps[tuple[float | None, bool]]:
        """See :meth:`~idemflow.engine.effect_call.EffectCall.undone_at` (the compensator asks)."""
        return self._effect.undone_at(step)
