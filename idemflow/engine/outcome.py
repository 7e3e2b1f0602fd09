"""The request's outcome, recorded before the caller has it: with the last step's commit if it
waited (:mod:`idemflow.engine.deferred`), else in a commit of its own.

Strict encoding guarantees the result equals what duplicates read back; a
result holding dicts is returned as read back (keys sorted), so the first
answer and every duplicate's serialise to the same bytes. A submission's
outcome deletes its outbox entry; a child's wakes its parent.
"""

from __future__ import annotations

from idemflow.core.requests import CommitCache, Steps
from idemflow.engine.cursor import Cursor
from idemflow.engine.deferred import DeferredCommit
from idemflow.engine.given import Given, log
from idemflow.engine.run_record import RunRecorder
from idemflow.engine.store_calls import StoreCalls
from idemflow.engine.wakeups import announce, wake_row
from idemflow.errors import BackendError, InvalidValueError
from idemflow.records import MEMO_AT, RUN_AT, RunRecord, RunStatus, new_incarnation
from idemflow.serialization import JSON, encode, sorted_keys
from idemflow.stores.base import Committed, Delete, Insert, Op, Put


class OutcomeWriter:
    """Writes the completion record: the only code that ends a request's run record."""

    __slots__ = ("_calls", "_cursor", "_deferred", "_given", "_recorder")

    def __init__(
        self,
        given: Given,
        cursor: Cursor,
        calls: StoreCalls,
        recorder: RunRecorder,
        deferred: DeferredCommit,
    ) -> None:
        self._given = given
        self._cursor = cursor
        self._calls = calls
        self._recorder = recorder
        self._deferred = deferred

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
        record = RunRecord(
            given.fingerprint,
            RunStatus.RUNNING,
            version=plan.version,
            started_at=recorder.claimed_at(),
            incarnation=incarnation,
        ).finished(status, given.clock(), result=result, reason=reason)
        value: JSON = record.to_json()
        try:
            text = encode(value, "", envelope=1)
        except InvalidValueError as bad:  # the place is named only when needed: it costs a format
            raise InvalidValueError(f"result of workflow {given.workflow!r}", bad.problem) from None
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
        ops: list[Op] = [Put(run_ref, value, text, expires_at=given.expiry())]
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
                yield from deferred.commit([*pending.ops, *ops], pending, None)
                ops = []
            else:
                yield from deferred.commit(pending.ops, pending, None)
        if ops:
            yield from self._settle(ops)
        if cleanup:
            yield CommitCache(cleanup)
        if parent is not None and wake is not None:
            yield from announce(given, parent, wake.ref)
        return record

    def _settle(self, ops: list[Op]) -> Steps[None]:
        """Write the outcome (Puts and Deletes that expect nothing: applied). Where nothing but
        the caller relies on it (``run``: every step is committed, a duplicate replays them), a
        store that stays unreachable costs the record, not the answer."""
        given = self._given
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
