"""A step's commit that waits for the workflow's next move, so the last one carries the outcome.

The engine cannot ask a generator what it will do next without running it,
so a step the workflow yields leaves its commit :class:`Pending` and the
workflow goes on with its value; the commit is made before anything else
happens (the next step, a wait, a compensation, an error the workflow
raises) or, when the workflow returns, together with its outcome. If it
does not apply, the value the workflow went on from may not stand:
:class:`Restart` starts the execution over, replaying (unless it failed only on
a memo an earlier run of the request id left: that is deleted and the same
commit sent again). This part holds the
one pending commit and is the only code that makes or drops it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from idemflow import telemetry
from idemflow.core.requests import Commit, Steps
from idemflow.engine.cursor import Cursor
from idemflow.engine.given import Given
from idemflow.engine.memo_reader import MemoReader
from idemflow.engine.store_calls import StoreCalls
from idemflow.errors import LimitExceededError, TransientError
from idemflow.keys import RUNS_TABLE
from idemflow.records import MEMO_AT, RUN_AT
from idemflow.stores.base import COMMITTED, CommitOutcome, Committed, Insert, Op, Put, Row, RowRef


def _applied_before(outcome: CommitOutcome, ops: Sequence[Op], memo_ref: RowRef) -> bool:
    """Whether a refused resend found this very commit applied: the memo it met is the one it
    carries, step name, value, commit time and incarnation alike (an earlier send applied and
    its answer was lost). A commit is atomic, so everything in it applied with that memo, and
    the workflow's next move stands on what is committed."""
    memo = ops[MEMO_AT] if ops else None
    if not isinstance(memo, Insert | Put) or memo.ref != memo_ref or isinstance(outcome, Committed):
        return False
    for failure in outcome.failures:
        if failure.index == MEMO_AT:
            return failure.existing is not None and failure.existing.value == memo.value
    return False


class Restart(BaseException):
    """A deferred commit did not apply (a racing execution, a data conflict, an unknown outcome):
    the workflow went on from a value that may not stand, so the execution starts over, replaying.

    ``existing`` is the run record the commit met, if it met one."""

    def __init__(self, existing: Row | None = None) -> None:
        super().__init__()
        self.existing = existing


class Pending(NamedTuple):
    """A step executed and not yet committed: its commit waits for the workflow's next move, so
    that the last step's commit can carry the request's outcome too (one call fewer).

    ``ops`` begin with the memo insert (:data:`~idemflow.records.MEMO_AT`) and, where
    ``claims``, the run record's insert (:data:`~idemflow.records.RUN_AT`). A tuple, not a
    frozen dataclass: one is built per step on the hot path, at half the cost.
    """

    ops: list[Op]
    memo_ref: RowRef
    claims: bool
    leased: bool = False
    """An effect called under a lease: executions waiting on the lease watch for its memo."""


class DeferredCommit:
    """The one step of an execution whose commit waits, if any, and how it is committed."""

    __slots__ = ("_calls", "_cursor", "_given", "_memos", "pending")

    def __init__(self, given: Given, cursor: Cursor, calls: StoreCalls, memos: MemoReader) -> None:
        self._given = given
        self._cursor = cursor
        self._calls = calls
        self._memos = memos
        self.pending: Pending | None = None
        """A step executed and not yet committed (see :class:`Pending`)."""

    def foldable(self, ops: Sequence[Op]) -> bool:
        """Whether these operations can share one commit with the run record's."""
        if self._given.capabilities.cross_partition_commit:
            return True
        request = self._given.request_id
        return all(op.ref.table == RUNS_TABLE and op.ref.partition == request for op in ops)

    def hold(self, pending: Pending) -> None:
        """Leave a step's commit for the workflow's next move."""
        assert self.pending is None, "a step ran before the one it went on from was committed"
        self.pending = pending

    def take(self) -> Pending | None:
        """The step whose commit waits, now the caller's to commit (the outcome carries it)."""
        pending, self.pending = self.pending, None
        return pending

    def drop(self) -> None:
        """Start over (see :class:`Restart`): what was pending is replayed or run again."""
        self.pending = None

    def flush(self) -> Steps[None]:
        """Commit the step the workflow went on from; a plain function: no generator frame of its
        own on the hot path."""
        pending, self.pending = self.pending, None
        assert pending is not None
        return self.commit(pending.ops, pending, RUN_AT if pending.claims else None)

    def commit(self, ops: list[Op], pending: Pending, run_at: int | None) -> Steps[None]:
        """Commit ``ops``, which carry a deferred step; :class:`Restart` if they did not apply:
        the workflow went on from a value that may not stand."""
        given, calls = self._given, self._calls
        try:
            while True:  # more than once only to replace a memo an earlier run left
                if given.traced:
                    outcome = yield from calls.commit(ops, pending.memo_ref, resend=True)
                else:  # the hot path: no generator frames of the store calls' own
                    try:
                        outcome = yield Commit(ops)
                    except LimitExceededError as refused:
                        raise calls.named(refused, pending.memo_ref) from None
                    except TransientError:
                        # An answer lost, or a transaction conflict with no change behind it: the
                        # same commit sent again under the policy (if the first applied, the memo
                        # refuses the second). Starting over instead would run the workflow again
                        # on objects it may have changed, its input among them.
                        outcome = yield from calls.commit(ops, pending.memo_ref, resend=True)
                if isinstance(outcome, Committed) or _applied_before(outcome, ops, pending.memo_ref):
                    outcome = COMMITTED
                    break
                swapped = self._memos.replaced(outcome, ops)
                if swapped is not None:  # over an earlier incarnation's memo
                    ops = swapped
                    continue
                claims = run_at is not None
                if not (
                    yield from self._memos.earlier_memo_dropped(outcome, ops, pending.memo_ref, claims=claims)
                ):
                    break
        except TransientError:  # still unreachable when the policy gave up: a replay reads which
            raise Restart() from None
        if isinstance(outcome, Committed):
            self._cursor.committed()
            if given.traced:
                telemetry.count(telemetry.STEPS_COMMITTED, given.workflow)
            return
        met = {failure.index: failure.existing for failure in outcome.failures}
        raise Restart(met.get(run_at) if run_at is not None else None)
