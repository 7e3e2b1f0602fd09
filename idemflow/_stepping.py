"""One step: replay it from its memo, or execute its body and commit it exactly once.

The third layer of :class:`~idemflow.engine.Execution` (see
:mod:`idemflow._execution`). A step's memo is inserted in the same commit
as its data; a commit that loses to another execution's memo returns that
memo, one that meets the run record switches the execution to replay, and a
data conflict reruns the body under the policy's tenacity retryer.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from idemflow import telemetry
from idemflow._execution import Pending, Restart
from idemflow._io import CallOut, Commit, NeedRows, Prefetched, ReadMany, Steps, Turn
from idemflow._lease import acquire
from idemflow._run_record import RunRecording
from idemflow.errors import (
    ConflictError,
    InvalidValueError,
    LimitExceededError,
    NonDeterminismError,
    TransientStoreError,
)
from idemflow.keys import RUNS_TABLE, lease_tag, step_tag
from idemflow.policy import DataConflict, retried
from idemflow.records import MEMO_AT, RUN_AT, Memo, memo_row, of_earlier_run
from idemflow.serialization import JSON, encode
from idemflow.stores.base import CommitOutcome, Committed, Cond, Delete, Insert, Op, Row, RowRef
from idemflow.tx import StepAborted, Tx


class AbortWorkflow(BaseException):
    """A step aborted (now or in an earlier execution): unwind to compensate."""

    def __init__(self, reason: JSON) -> None:
        super().__init__(reason)
        self.reason = reason


class _RunRecordSeen(BaseException):
    """The run record, read beside a first step's first row, exists: stop the body."""

    def __init__(self, row: Row) -> None:
        super().__init__()
        self.row = row


def _has_incarnation(memo: Row) -> bool:
    value = memo.value
    return type(value) is dict and isinstance(value.get("i"), str)


def _stop_if_present(row: Row | None) -> None:
    if row is not None:
        raise _RunRecordSeen(row)


_RETRY = object()


class _Unreachable:
    """An attempt whose reads could not reach the store: run it again, and if the step's time
    runs out, report the store's error rather than a conflict there was none of."""

    __slots__ = ("error",)

    def __init__(self, error: TransientStoreError) -> None:
        self.error = error


class _Step(NamedTuple):
    """One step as its attempts see it: where its memo lives, what it is called, what it runs."""

    memo_ref: RowRef
    identity: str
    body: Callable[[Tx], Any]
    abortable: bool
    call_out: CallOut | None


class Stepping(RunRecording):
    """The steps of an execution, each replayed or executed and committed once."""

    def _memoized(
        self, identity: str, body: Callable[[Tx], Any], call_out: CallOut | None = None
    ) -> Steps[Any]:
        """A step with no table of its own: its memo sits beside the run record."""
        self._step += 1
        return self._forward(RUNS_TABLE, self.request_id, identity, body, call_out)

    def _forward(
        self,
        table: str,
        partition: str,
        identity: str,
        body: Callable[[Tx], Any],
        call_out: CallOut | None,
        extra: Callable[[], Steps[list[Op]]] | None = None,
        *,
        again: bool = False,
    ) -> Steps[Any]:
        """The step's computation (a plain function: no generator frame of its own); ``again``:
        an attempt after a failed one, journaled already."""
        if self.plan.abort is not None and not self._cleaning:  # memos win: only a new step aborts
            reason = self.plan.abort.reason
            body, call_out, extra = (lambda tx: tx.abort(reason)), None, None
        self._identity, self._extra = identity, extra
        if self._noting and not again:
            self._note(table, partition, identity)
        return self._run_step(table, partition, step_tag(self._step), identity, body, True, call_out)

    def _note(self, table: str, partition: str, identity: str) -> None:
        """Journal a forward step for the continuation, or check it against a resumed one's."""
        if self._journal is not None:
            self._journal.append((table, partition, identity))
        expected = self.plan.expected
        if self._step <= len(expected) and expected[self._step - 1] != (table, partition, identity):
            recorded = "{2} on {0}/{1}".format(*expected[self._step - 1])
            met = f"{identity} on {table}/{partition}"
            raise NonDeterminismError(self.workflow, self.request_id, self._step, repr(recorded), repr(met))

    # -- one step -------------------------------------------------------

    def _run_step(
        self,
        table: str,
        partition: str,
        tag: str,
        identity: str,
        body: Callable[[Tx], Any],
        abortable: bool,
        call_out: CallOut | None = None,
    ) -> Steps[Any]:
        """The computation that replays the step from its memo, or executes and commits it
        exactly once (a plain function: no generator frame of its own). A step whose
        body calls out (an effect) resends its commit on a transient error instead of rerunning:
        a rerun would call the outside service again."""
        step = _Step(RowRef(table, partition, self._memo_prefix + tag), identity, body, abortable, call_out)
        self._until = self.policy.until()
        if not self._observed:
            return self._step_once(step)
        return self._observed_step(step)

    def _observed_step(self, step: _Step) -> Steps[Any]:
        """A step with its span (OpenTelemetry) and its DEBUG log line: committed, replayed or
        raised, with its attempts and duration."""
        identity = step.identity
        fields = {
            "workflow": self.workflow,
            "request_id": self.request_id,
            "step": self._step,
            "identity": identity,
        }
        started, commits, self._attempts = time.monotonic(), self._commits, 0
        outcome = "raised"
        try:
            with telemetry.span("idemflow.step", **fields) if self._traced else contextlib.nullcontext():
                value = yield from self._step_once(step)
            # A step whose commit waits for the workflow's next move is committed with it.
            outcome = "committed" if self._commits > commits or self._pending is not None else "replayed"
            return value
        except AbortWorkflow:
            outcome = "aborted"
            raise
        finally:
            if self._logged:
                self._log_event(
                    "step",
                    step=fields["step"],
                    identity=identity,
                    outcome=outcome,
                    attempt=self._attempts + 1,
                    started=started,
                )

    def _step_once(self, step: _Step) -> Steps[Any]:
        try:
            outcome = yield from self._attempt(step)
        except TransientStoreError:  # the commit's send failed: rerun (the loop re-raises it last)
            if step.call_out is not None:  # resent until the deadline already; a rerun would call out again
                raise
            outcome = _RETRY
        if outcome is not _RETRY and type(outcome) is not _Unreachable:
            return outcome
        retrying = self.policy.rerunning(self._until)
        try:
            return (yield from retried(retrying, lambda: self._retry(step)))
        except DataConflict:
            attempts = retrying.statistics.get("attempt_number", 0) + 1
            where = step.memo_ref
            raise ConflictError(
                self.workflow, self.request_id, self._step, where.table, where.partition, attempts
            ) from None

    def _retry(self, step: _Step) -> Steps[Any]:
        """One more attempt, in this process's turn on the partition (see :mod:`idemflow._gates`)."""
        memo_ref = step.memo_ref
        self._attempts += 1
        if self._traced:
            telemetry.count(telemetry.CONFLICTS_RETRIED, self.workflow)
        give_back = yield Turn(memo_ref.table, memo_ref.partition, self._until)
        try:
            outcome = yield from self._attempt(step)
        finally:
            give_back()
        if outcome is _RETRY:
            raise DataConflict
        if type(outcome) is _Unreachable:
            raise outcome.error  # retried as a conflict is; the last one reaches the caller
        return outcome

    def _attempt(self, step: _Step) -> Steps[Any]:
        memo_ref, identity, body, abortable, call_out = step
        defer, self._defer = self._defer, False  # this step's first attempt only
        while True:  # loops only when the commit revealed an existing run record
            if self._replaying:
                row = yield from self._read(memo_ref)
                if row is not None and of_earlier_run(row, self._incarnation):
                    row = yield from self._this_runs(memo_ref, row)
                if row is not None:
                    return self._memo_result(row, identity)
                self._replaying = False
            peek = None
            if not self._run_known:
                if not self.capabilities.cross_partition_commit:
                    yield from self._claim()
                    continue
                peek = (self._run_ref, _stop_if_present)
            reader = self._reader if self._reader is not None else Prefetched()
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
                    if call_out.lease is None:
                        result = self._called = yield call_out
                    else:
                        recorded = yield from self._leased(memo_ref, call_out.lease)
                        if recorded is not None:  # another execution made the call
                            return self._memo_result(recorded, identity)
                        try:
                            result = self._called = yield call_out
                        except Exception:  # a call that failed gives the lease up: a retry need not wait
                            with contextlib.suppress(TransientStoreError):  # else it ends by itself
                                yield from self._commit([Delete(self._lease_ref(memo_ref))], memo_ref)
                            raise
            except _RunRecordSeen as seen:
                yield from self._on_run_record(seen.row)  # returns only to replay
                continue
            except StepAborted as abort:
                if not abortable:
                    raise
                aborted, value = True, abort.reason
                data_ops: list[Op] = [*tx.read_checks()]
            except TransientStoreError as unreachable:  # a read was throttled or got no answer
                return _Unreachable(unreachable)
            except Exception:
                # A replay whose data moved on may fail where the first run
                # succeeded: the memo, if any, is the answer.
                row = yield from self._read(memo_ref)
                if row is not None and not self._run_known and _has_incarnation(row):
                    # No claim yet: a memo never precedes its run's record, which says whose it is.
                    met = yield from self._read(self._run_ref)
                    if met is not None:
                        yield from self._on_run_record(met)
                    else:
                        yield from self._this_runs(memo_ref, row)
                    continue
                if row is not None and of_earlier_run(row, self._incarnation):
                    row = yield from self._this_runs(memo_ref, row)
                if row is not None:
                    return self._memo_result(row, identity)
                if (yield from self._stale(tx)):  # reads that were never one snapshot: run it again
                    return _RETRY
                raise
            else:
                aborted, value = False, result
                data_ops = tx.ops()
            expires = self._expiry()
            run_included = not self._run_known
            claim = self._claim_ops(expires, with_outbox=True) if run_included else ()  # draws the run
            memo_value = memo_row(
                identity, value, aborted=aborted, at=int(self.clock() * 1000), run=self._incarnation
            )
            try:
                memo_text = encode(memo_value, "", envelope=1)
            except InvalidValueError as bad:  # the place is named only when needed: it costs a format
                where = f"result of step {self._step} ({identity}) of workflow {self.workflow!r}"
                raise InvalidValueError(where, bad.problem) from None
            ops: list[Op] = [Insert(memo_ref, memo_value, memo_text, expires), *claim]
            ops.extend(data_ops)
            if self._extra is not None and not aborted:
                ops.extend((yield from self._extra()))
            if call_out is not None and call_out.lease is not None:
                ops.append(Delete(self._lease_ref(memo_ref)))  # ended with the call it guarded
            if defer and not aborted and self._extra is None and self._foldable(ops):
                # Committed by the workflow's next move: with the outcome, if it returns now.
                leased = call_out is not None and call_out.lease is not None
                self._pending = Pending(ops, memo_ref, run_included, call_out is not None, leased)
                return value
            while True:  # more than once only to replace a memo an earlier run left
                if call_out is not None or self._traced:  # an effect's commit is resent as it is
                    outcome = yield from self._commit(ops, memo_ref, resend=call_out is not None)
                else:  # any other's failed send reruns the body
                    try:
                        outcome = yield Commit(ops)
                    except LimitExceededError as refused:
                        raise self._named(refused, memo_ref) from None
                if isinstance(outcome, Committed):
                    break
                if not (yield from self._earlier_memo_dropped(outcome, ops, memo_ref, claims=run_included)):
                    break
            if isinstance(outcome, Committed):
                self._run_known = True
                self._commits += 1
                if self._traced:
                    telemetry.count(telemetry.STEPS_COMMITTED, self.workflow)
                if aborted:
                    raise AbortWorkflow(value)
                # Strict encoding guarantees decode(encode(x)) == x: no need to parse it back.
                return value
            by_index = {failure.index: failure for failure in outcome.failures}
            if run_included and RUN_AT in by_index:
                yield from self._on_run_record(by_index[RUN_AT].existing)
            existing_memo = by_index[MEMO_AT].existing if MEMO_AT in by_index else None
            if existing_memo is not None and of_earlier_run(existing_memo, self._incarnation):
                if run_included and RUN_AT not in by_index:  # this claim did not fail: is it the run?
                    met = yield from self._read(self._run_ref)
                    if met is not None:  # another execution's claim: its record says whose memo this is
                        yield from self._on_run_record(met)
                        continue
                yield from self._this_runs(memo_ref, existing_memo)  # an earlier run's
                continue
            if existing_memo is not None:
                return self._memo_result(existing_memo, identity)
            if run_included and RUN_AT in by_index:
                continue  # replaying now: read the memo first
            return _RETRY

    def _foldable(self, ops: Sequence[Op]) -> bool:
        """Whether these operations can share one commit with the run record's."""
        if self.capabilities.cross_partition_commit:
            return True
        request = self.request_id
        return all(op.ref.table == RUNS_TABLE and op.ref.partition == request for op in ops)

    def _flush(self) -> Steps[None]:
        """Commit the step the workflow went on from (see :class:`Pending`); a plain function: no
        generator frame of its own on the hot path."""
        pending, self._pending = self._pending, None
        assert pending is not None
        return self._commit_deferred(pending.ops, pending, RUN_AT if pending.claims else None)

    def _commit_deferred(self, ops: list[Op], pending: Pending, run_at: int | None) -> Steps[None]:
        """Commit ``ops``, which carry a deferred step; :class:`Restart` if they did not apply:
        the workflow went on from a value that may not stand."""
        try:
            while True:  # more than once only to replace a memo an earlier run left
                outcome = yield from self._commit(ops, pending.memo_ref, resend=pending.resend)
                if isinstance(outcome, Committed):
                    break
                claims = run_at is not None
                if not (yield from self._earlier_memo_dropped(outcome, ops, pending.memo_ref, claims=claims)):
                    break
        except TransientStoreError:  # applied or not: a replay reads which
            raise Restart() from None
        if isinstance(outcome, Committed):
            self._run_known = True
            self._commits += 1
            if self._traced:
                telemetry.count(telemetry.STEPS_COMMITTED, self.workflow)
            return
        met = {failure.index: failure.existing for failure in outcome.failures}
        raise Restart(met.get(run_at) if run_at is not None else None)

    def _lease_ref(self, memo_ref: RowRef) -> RowRef:
        return RowRef(memo_ref.table, memo_ref.partition, self._memo_prefix + lease_tag(self._step))

    def _leased(self, memo_ref: RowRef, seconds: float) -> Steps[Row | None]:
        """Hold the effect's lease (None), or the memo of the execution that held it."""
        while True:
            recorded = yield from acquire(
                memo_ref,
                self._lease_ref(memo_ref),
                seconds,
                commit=lambda ops: self._commit(ops, memo_ref),
                read=self._read,
                sleep=self.policy.conflicts.sleep,
                expires=self._expiry(),
            )
            if recorded is None:
                return None
            if not self._run_known:  # no claim yet: a memo never precedes its run's record
                if not _has_incarnation(recorded):
                    return recorded  # written before incarnations: trusted, as it always was
                met = yield from self._read(self._run_ref)
                if met is not None:
                    raise _RunRecordSeen(met)  # replay, judging the memo by that record's run
            elif not of_earlier_run(recorded, self._incarnation):
                return recorded
            yield from self._this_runs(memo_ref, recorded)  # the lease is taken again over nothing

    def _this_runs(self, memo_ref: RowRef, row: Row) -> Steps[Row | None]:
        """``row`` (read at ``memo_ref``), unless it is a memo an earlier request with this id left:
        then it is deleted, if it is still as read, and the place read again.

        Such a memo outlived its run record (DynamoDB's TTL deletes in no order; a sweep visits
        rows in key order) and this request reuses the id after retention: it is a new request,
        and replaying that memo would make it a partial run of the old one. One delete, one
        read: what is read next is judged by the caller (a racing execution may have claimed
        the request meanwhile, and only its record says whose memo that is)."""
        assert row is not None
        yield from self._commit([Delete(memo_ref, expect=row.version)], memo_ref)
        return (yield from self._read(memo_ref))

    def _earlier_memo_dropped(
        self, outcome: CommitOutcome, ops: Sequence[Op], memo_ref: RowRef, *, claims: bool
    ) -> Steps[bool]:
        """Whether a step's commit failed only on its memo insert meeting an earlier run's memo,
        now deleted: then the same operations are sent again (no rerun: an effect's call is not
        made twice). Anything else is left to the caller.

        Where the commit also claims the request (``claims``), this execution's incarnation is
        only drawn, not established: a memo of another incarnation may be a racing execution's
        that claimed first (a store may report only the first failed condition). Only a run
        record that is absent proves the memo an earlier run's: a memo is never written before
        its run's record, and a record goes only once its request has finished."""
        assert not isinstance(outcome, Committed)
        failures = outcome.failures
        if len(failures) != 1 or failures[0].index != MEMO_AT or ops[MEMO_AT].ref != memo_ref:
            return False
        existing = failures[0].existing
        if existing is None or not of_earlier_run(existing, self._incarnation):
            return False
        if claims and (yield from self._read(self._run_ref)) is not None:
            return False
        yield from self._this_runs(memo_ref, existing)
        return True

    def _stale(self, tx: Tx) -> Steps[bool]:
        """Did a row the body read change before it raised? Then it saw no consistent state.

        Reads inside a body are each strongly consistent but not one snapshot
        (DynamoDB's are never cancelled by a concurrent commit, Azure's are
        separate calls); the commit's conditions make a *committed* body
        serializable, and this check gives the same to a body that raised.
        """
        checks = tx.read_checks()
        if not checks:
            return False
        rows = yield ReadMany([check.ref for check in checks])
        return any(
            (Cond.ABSENT if row is None else row.version) != check.expect
            for check, row in zip(checks, rows, strict=True)
        )

    def _memo_result(self, row: Row, identity: str) -> Any:
        if self._traced:
            telemetry.count(telemetry.DUPLICATES_ANSWERED, self.workflow)
        memo = Memo.from_json(row.value)
        if memo is None or memo.identity != identity:
            recorded = row.value if memo is None else memo.identity
            raise NonDeterminismError(
                self.workflow, self.request_id, self._step, repr(recorded), repr(identity)
            )
        if memo.aborted:
            raise AbortWorkflow(memo.value)
        return memo.value
