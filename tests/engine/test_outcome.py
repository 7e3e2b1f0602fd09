"""The outcome's writer: the completion record, with the last step's commit where it waited."""

from __future__ import annotations

import pytest

from idemflow.admin import RunRecord
from idemflow.client import RunStatus
from idemflow.core.plan import Finished, Plan
from idemflow.engine.deferred import Pending
from idemflow.engine.memo_reader import WAIT_ABORTED, WAIT_ENDED, AbortWorkflow
from idemflow.records import Memo, Places, outbox_ref, run_ref
from idemflow.stores.base import Insert, Op, Put, RowRef
from tests.support.engine_rows import ONE_PARTITION, Parts, Rows, given

RUN = run_ref("wf", "r1")
MEMO = RowRef("items", "p1", "mwf|r1|s1")
DATA = RowRef("items", "p1", "dn")


def _only_step() -> Pending:
    claim = RunRecord("fp", RunStatus.RUNNING).to_json()
    ops: list[Op] = [
        Insert(MEMO, {"id": "atomic a", "v": 1}, '{"id":"atomic a","v":1}'),
        Insert(RUN, claim, "claim"),
        Put(DATA, 1, "1"),
    ]
    return Pending(ops, MEMO, claims=True)


def test_a_requests_only_step_commits_its_outcome_instead_of_its_claim_and_memo() -> None:
    rows, parts = Rows(), Parts(given())
    parts.deferred.hold(_only_step())
    record = rows.run(parts.outcome.finish(RunStatus.COMPLETED, result={"b": 1, "a": 2}))
    [commit] = rows.commits()
    assert [op.ref for op in commit] == [RUN, DATA]
    stored = RunRecord.from_json(rows.rows[RUN][0])
    assert (stored.status, stored.result) == (RunStatus.COMPLETED, {"a": 2, "b": 1})
    assert isinstance(record.result, dict) and list(record.result) == [
        "a",
        "b",
    ]  # as duplicates read it back: keys sorted
    assert MEMO not in rows.rows


def test_a_later_steps_commit_carries_the_outcome() -> None:
    rows, parts = Rows(), Parts(given())
    parts.cursor.committed()  # an earlier step claimed the request
    pending = Pending([Insert(MEMO, {"id": "atomic a", "v": 1}, "m"), Put(DATA, 1, "1")], MEMO, False)
    parts.deferred.hold(pending)
    rows.run(parts.outcome.finish(RunStatus.COMPLETED, result=5))
    [commit] = rows.commits()
    assert [op.ref for op in commit] == [MEMO, DATA, RUN]
    assert parts.cursor.commits == 2


def test_an_outcome_with_nothing_pending_is_a_commit_of_its_own() -> None:
    rows, parts = Rows(), Parts(given(Plan(resume=True, started_at=42.0)))
    rows.run(parts.outcome.finish(RunStatus.ABORTED, reason="no"))
    [commit] = rows.commits()
    assert [type(op) for op in commit] == [Put]
    stored = RunRecord.from_json(rows.rows[RUN][0])
    assert (stored.status, stored.reason, stored.started_at) == (RunStatus.ABORTED, "no", 42.0)


def test_where_a_commit_is_one_partition_a_step_beside_the_run_record_carries_it() -> None:
    rows, parts = Rows(), Parts(given(capabilities=ONE_PARTITION))
    parts.cursor.committed()
    beside = RowRef("idemflowruns", "r1", "mwf|r1|s2")
    parts.deferred.hold(Pending([Insert(beside, {"id": "effect a", "v": 1}, "m")], beside, False))
    rows.run(parts.outcome.finish(RunStatus.COMPLETED))
    [commit] = rows.commits()
    assert [op.ref for op in commit] == [beside, RUN]


def test_a_parent_is_woken_by_its_childs_outcome() -> None:
    from idemflow.records import OutboxEntry

    parent = OutboxEntry("pa", 1, "p1", 0.0)
    rows, parts = Rows(), Parts(given(Plan(resume=True, parent=parent), capabilities=ONE_PARTITION))
    rows.run(parts.outcome.finish(RunStatus.COMPLETED))
    wake, outcome = rows.commits()  # first, where one commit cannot hold both
    assert isinstance(wake[0], Put) and OutboxEntry.from_json(wake[0].value).request_id == "p1"
    assert [op.ref for op in outcome] == [RUN]


def test_a_submissions_outcome_deletes_its_outbox_entry_with_it() -> None:
    from idemflow.core.plan import Submission
    from idemflow.records import OutboxEntry

    plan = Plan(
        resume=True, durable_outcome=True, submission=Submission(None, OutboxEntry("wf", 1, "r1", 0.0))
    )
    rows, parts = Rows(), Parts(given(plan))
    rows.put(outbox_ref("wf", "r1"), {"due": 0})
    rows.run(parts.outcome.finish(RunStatus.COMPLETED))
    assert outbox_ref("wf", "r1") not in rows.rows
    assert len(rows.commits()) == 1


AFTER_WAIT = RowRef("idemflowruns", "r1", "mwf|r1|s3")
"""The place of the step after a timer that followed step 2."""


def _after_a_timer(plan: Plan | None = None) -> Parts:
    """An execution that replayed steps 1 and 2, then passed a timer: the workflow ends there."""
    parts = Parts(given(plan or Plan(resume=True, incarnation="run1")))
    parts.cursor.revisit(2)
    parts.cursor.waited()
    return parts


def test_a_completion_right_after_a_timer_takes_the_place_of_the_step_after_it() -> None:
    rows, parts = Rows(), _after_a_timer()
    rows.run(parts.outcome.finish(RunStatus.COMPLETED, result="rested"))
    [commit] = rows.commits()
    assert [op.ref for op in commit] == [RUN, AFTER_WAIT]
    assert isinstance(commit[1], Insert)  # fails, as the abort's memo does, if the other is there
    ended = Memo.from_json(rows.rows[AFTER_WAIT][0])
    assert ended is not None and (ended.identity, ended.aborted, ended.run) == (WAIT_ENDED, False, "run1")


def test_an_aborted_outcome_after_a_timer_takes_no_place() -> None:
    rows, parts = Rows(), _after_a_timer()
    rows.run(parts.outcome.finish(RunStatus.ABORTED, reason="no"))
    assert [[op.ref for op in commit] for commit in rows.commits()] == [[RUN]]


def test_a_completion_that_meets_an_abort_at_its_timer_aborts_there() -> None:
    rows, parts = Rows(), _after_a_timer()
    rows.put(AFTER_WAIT, {"id": WAIT_ABORTED, "abort": "closed", "i": "run1"})
    parts.cursor.advance()  # a step that writes no memo (uuid4) came after the timer
    with pytest.raises(AbortWorkflow) as aborted:
        rows.run(parts.outcome.finish(RunStatus.COMPLETED, result="rested"))
    assert aborted.value.reason == "closed" and RUN not in rows.rows
    assert parts.cursor.step == 3  # where the operator's abort stands: on_abort numbers on from it


def test_a_completion_that_meets_another_completion_after_its_timer_answers_with_its_record() -> None:
    rows, parts = Rows(), _after_a_timer()
    done = RunRecord("fp", RunStatus.RUNNING, incarnation="run1").finished(
        RunStatus.COMPLETED, 9.0, result="r"
    )
    rows.put(RUN, done.to_json())
    rows.put(AFTER_WAIT, {"id": WAIT_ENDED, "v": None, "i": "run1"})
    with pytest.raises(Finished) as finished:
        rows.run(parts.outcome.finish(RunStatus.COMPLETED, result="r"))
    assert finished.value.record == done and len(rows.commits()) == 1  # nothing written over it


def test_a_completion_after_a_timer_replaces_a_memo_an_earlier_run_left_there() -> None:
    rows, parts = Rows(), _after_a_timer()
    rows.put(AFTER_WAIT, {"id": WAIT_ABORTED, "abort": "long ago", "i": "run0"})
    record = rows.run(parts.outcome.finish(RunStatus.COMPLETED, result="rested"))
    assert record.status is RunStatus.COMPLETED
    ended = Memo.from_json(rows.rows[AFTER_WAIT][0])
    assert ended is not None and (ended.identity, ended.run) == (WAIT_ENDED, "run1")


def test_the_outcome_names_the_places_of_the_atomic_steps_the_journal_met() -> None:
    """Where the request's atomic steps keep their memos (``pl``) and the last of them (``sn``):
    what ``runs show`` reads without the workflow's code."""
    rows, parts = Rows(), Parts(given(Plan(resume=True)))
    parts.journal.placed("items", "p1", 1)
    parts.journal.placed("ledger", "2024", 3)
    parts.journal.placed("items", "p1", 4)
    rows.run(parts.outcome.finish(RunStatus.COMPLETED, result="done"))
    stored = rows.rows[RUN][0]
    assert (stored["pl"], stored["sn"]) == ([["items", "p1"], ["ledger", "2024"]], 4)
    assert RunRecord.from_json(stored).places == Places((("items", "p1"), ("ledger", "2024")), 4)


def test_an_outcome_too_big_with_its_places_is_written_without_them() -> None:
    """Places never make a result that fits fail: the record then names none (the listing says
    its atomic steps are not located)."""
    limit = ONE_PARTITION.max_value_bytes
    rows, parts = Rows(), Parts(given(Plan(resume=True), capabilities=ONE_PARTITION))
    parts.journal.placed("items", "p" * 200, 1)
    result = "x" * (limit - 100)  # fits alone, not with a 200-character place
    rows.run(parts.outcome.finish(RunStatus.COMPLETED, result=result))
    stored = rows.rows[RUN][0]
    assert stored["result"] == result and "pl" not in stored and "sn" not in stored
