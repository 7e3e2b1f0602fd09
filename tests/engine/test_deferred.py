"""The deferred commit: one step's commit held for the workflow's next move, or a restart."""

from __future__ import annotations

import pytest

from idemflow.admin import RunRecord
from idemflow.client import RunStatus
from idemflow.core.requests import Commit
from idemflow.engine.deferred import Pending, Restart
from idemflow.errors import TransientError
from idemflow.records import run_ref
from idemflow.stores.base import Insert, Op, Put, RowRef
from tests.support.engine_rows import ONE_PARTITION, Parts, Rows, given

MEMO = RowRef("items", "p1", "mwf|r1|s1")
RUN = run_ref("wf", "r1")


def _pending(claims: bool = True) -> Pending:
    ops: list[Op] = [Insert(MEMO, {"id": "atomic a", "v": 1}, '{"id":"atomic a","v":1}')]
    if claims:
        ops.append(Insert(RUN, {"fp": "fp", "status": "running"}, '{"fp":"fp","status":"running"}'))
    ops.append(Put(RowRef("items", "p1", "dn"), 1, "1"))
    return Pending(ops, MEMO, claims)


def test_a_flush_commits_the_pending_step_and_counts_it() -> None:
    rows, parts = Rows(), Parts(given())
    parts.deferred.hold(_pending())
    rows.run(parts.deferred.flush())
    assert parts.deferred.pending is None
    assert (len(rows.commits()), parts.cursor.commits, parts.cursor.run_known) == (1, 1, True)


def test_a_pending_commit_that_meets_a_claim_restarts_with_that_record() -> None:
    rows, parts = Rows(), Parts(given())
    rows.put(RUN, RunRecord("fp", RunStatus.RUNNING).to_json())
    parts.deferred.hold(_pending())
    with pytest.raises(Restart) as restart:
        rows.run(parts.deferred.flush())
    assert restart.value.existing is not None and restart.value.existing.value == rows.rows[RUN][0]
    assert parts.cursor.commits == 0


def test_a_pending_commit_that_failed_to_send_is_sent_again() -> None:
    """Not a restart: that would run the workflow function again on objects it may have changed."""
    rows, parts = Rows(), Parts(given())
    rows.fail_next(Commit, TransientError("no answer"))
    parts.deferred.hold(_pending(claims=False))
    rows.run(parts.deferred.flush())
    assert len(rows.commits()) == 2 and parts.cursor.commits == 1
    assert rows.rows[MEMO][0] == {"id": "atomic a", "v": 1}


def test_a_pending_commit_whose_answer_was_lost_meets_its_own_memo_and_counts_as_committed() -> None:
    rows, parts = Rows(), Parts(given())
    pending = _pending(claims=False)
    rows.run(Parts(given()).deferred.commit(pending.ops, pending, None))  # the first send applied...
    rows.fail_next(Commit, TransientError("no answer"))  # ...and its answer is lost
    parts.deferred.hold(pending)
    rows.run(parts.deferred.flush())
    assert parts.cursor.commits == 1 and len(rows.commits()) == 3


def test_a_pending_commit_that_meets_another_executions_memo_restarts() -> None:
    rows, parts = Rows(), Parts(given())
    rows.put(MEMO, {"id": "atomic a", "v": 2})  # the same step, another value: not this commit
    parts.deferred.hold(_pending(claims=False))
    with pytest.raises(Restart) as restart:
        rows.run(parts.deferred.flush())
    assert restart.value.existing is None and parts.cursor.commits == 0


def test_only_rows_beside_the_run_record_fold_where_a_commit_is_one_partition() -> None:
    beside = [Put(RowRef("idemflowruns", "r1", "x"), 1, "1")]
    elsewhere = [Put(RowRef("items", "p1", "x"), 1, "1")]
    narrow, wide = Parts(given(capabilities=ONE_PARTITION)), Parts(given())
    assert narrow.deferred.foldable(beside) and not narrow.deferred.foldable(elsewhere)
    assert wide.deferred.foldable(elsewhere)


def test_a_second_step_never_runs_before_the_first_is_committed() -> None:
    parts = Parts(given())
    parts.deferred.hold(_pending())
    with pytest.raises(AssertionError):
        parts.deferred.hold(_pending(claims=False))
