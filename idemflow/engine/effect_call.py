"""An outside call's guard: its lease, its limit group's slot, and where an undo finds it.

Why a part of its own: what surrounds the call an effect makes (holding the effect's lease so
one execution calls at a time, taking its limit group's slot and giving it back only when the
call is over at the provider, telling an undo whether the call may still be in flight) is one
job, apart from replaying and committing the step around it (:mod:`idemflow.engine.stepper`).
"""

from __future__ import annotations

import contextlib
from typing import Any

from idemflow.core.requests import CallOut, ProcessDied, Skipped, Steps
from idemflow.engine.cursor import Cursor
from idemflow.engine.given import Given
from idemflow.engine.journal import Journal
from idemflow.engine.lease import acquire, capped
from idemflow.engine.memo_reader import MemoReader
from idemflow.engine.run_record import RunRecorder
from idemflow.engine.store_calls import StoreCalls
from idemflow.errors import TransientError
from idemflow.keys import RUNS_TABLE, lease_tag, step_tag
from idemflow.limits.calls import call_over, room
from idemflow.limits.gate import give_back
from idemflow.records import Memo, memo_run
from idemflow.stores.base import Delete, Row, RowRef

LOOK_AGAIN: Any = object()
"""The call was not made: this execution waited for its limit group, and looks at the step again."""


class RunRecordSeen(BaseException):
    """The run record, read beside a first step's first row, exists: stop the body."""

    def __init__(self, row: Row) -> None:
        super().__init__()
        self.row = row


class EffectCall:
    """The guard of the current effect's call, for the stepper that runs the step."""

    __slots__ = ("_calls", "_cursor", "_given", "_journal", "_memos", "_recorder")

    def __init__(
        self,
        given: Given,
        cursor: Cursor,
        calls: StoreCalls,
        memos: MemoReader,
        recorder: RunRecorder,
        journal: Journal,
    ) -> None:
        self._given = given
        self._cursor = cursor
        self._calls = calls
        self._memos = memos
        self._recorder = recorder
        self._journal = journal

    def guarded(self, memo_ref: RowRef, call_out: CallOut, since: float) -> Steps[Any]:
        """The call made under its effect lease (held already) and inside its limit group: the
        call's answer, or ``LOOK_AGAIN`` once this execution waited for the group here. A call
        that did not happen (its group was full) or failed gives the lease up, so a retry or a
        racing execution need not wait for it to end; a failed call keeps its group's slot
        unless it is over at the provider (:func:`~idemflow.limits.calls.call_over`), so a
        retry waits for that slot as for any full group; an error that is not an ``Exception``
        stands for the process dying there, which gives nothing back (the leases end)."""
        given, group = self._given, call_out.group
        token = None
        if group is not None:
            try:
                token = yield from room(given, self._recorder, self._journal.entries, group, since)
            except (GeneratorExit, ProcessDied):  # dropped or dead: the lease ends by itself
                raise
            except BaseException:  # full: handed over or refused, the call not made
                yield from self.lease_given_up(memo_ref, call_out)
                raise
            if token is None:
                yield from self.lease_given_up(memo_ref, call_out)
                return LOOK_AGAIN
        try:
            answer = yield call_out
        except Skipped:  # a branch whose call is not made (its all_of failed): all given back
            if token is not None:
                assert group is not None
                yield from give_back((group,), token, given.clock)
            yield from self.lease_given_up(memo_ref, call_out)
            raise
        except Exception as failed:
            # A call that timed out, lost its connection or raised what nobody declared over may
            # still be at the provider: its slot stays taken until its lease ends (which outlasts
            # the call), so no other call takes its place meanwhile.
            if token is not None and call_over(failed, self._cursor.retry):
                assert group is not None
                yield from give_back((group,), token, given.clock)
            yield from self.lease_given_up(memo_ref, call_out)
            raise
        if token is not None:
            assert group is not None
            yield from give_back((group,), token, given.clock)
        return answer

    def undone_at(self, step: int) -> Steps[tuple[float | None, bool]]:
        """Where the request was undone at effect ``step``: when its abort memo was written (None
        if this version cannot tell) and whether an execution still holds the call's lease row
        (it was in the call, and wrote no memo: it may have died there)."""
        given, calls = self._given, self._calls
        memo = yield from calls.read(RowRef(RUNS_TABLE, given.request_id, given.memo_prefix + step_tag(step)))
        lease = yield from calls.read(
            RowRef(RUNS_TABLE, given.request_id, given.memo_prefix + lease_tag(step))
        )
        decided = None if memo is None else Memo.from_json(memo.value)
        return (None if decided is None else decided.at), lease is not None

    def lease_given_up(self, memo_ref: RowRef, call_out: CallOut) -> Steps[None]:
        if call_out.lease is not None:
            with contextlib.suppress(TransientError):  # else it ends by itself
                yield from self._calls.commit([Delete(self.lease_ref(memo_ref))], memo_ref)

    def lease_ref(self, memo_ref: RowRef) -> RowRef:
        return RowRef(
            memo_ref.table, memo_ref.partition, self._given.memo_prefix + lease_tag(self._cursor.step)
        )

    def leased(self, memo_ref: RowRef, seconds: float) -> Steps[Row | None]:
        """Hold the effect's lease (None), or the memo of the execution that held it."""
        given, calls, memos = self._given, self._calls, self._memos
        seconds = capped(seconds, given.plan.lease_until)
        while True:
            recorded = yield from acquire(
                memo_ref,
                self.lease_ref(memo_ref),
                seconds,
                commit=lambda ops: calls.commit(ops, memo_ref),
                read=calls.read,
                sleep=given.policy.conflicts.sleep,
                expires=given.expiry(),
            )
            if recorded is None:
                return None
            if not self._cursor.run_known:  # no claim yet: a memo never precedes its run's record
                if memo_run(recorded) is None:
                    return recorded  # written before incarnations: trusted, as it always was
                met = yield from calls.read(given.run_ref)
                if met is not None:
                    raise RunRecordSeen(met)  # replay, judging the memo by that record's run
            elif not memos.of_earlier_run(recorded):
                return recorded
            yield from memos.this_runs(memo_ref, recorded)  # the lease is taken again over nothing


__all__ = ["LOOK_AGAIN", "EffectCall", "RunRecordSeen"]
