"""Memo reading: a memo's value, its abort, another step's memo, and memos of an earlier run."""

from __future__ import annotations

import pytest

from idemflow import Tx
from idemflow.admin import RunRecord
from idemflow.client import RunStatus
from idemflow.core.plan import Plan
from idemflow.engine.memo_reader import WAIT_ABORTED, WAIT_ENDED, AbortWorkflow, WaitOver
from idemflow.errors import NonDeterminismError
from idemflow.records import Memo, run_ref
from idemflow.stores.base import Delete, Row, RowRef
from tests.support.engine_rows import Parts, Rows, given

RUN = run_ref("wf", "r1")


def _memo_ref(parts: Parts, step: int = 1) -> RowRef:
    return RowRef("idemflowruns", "r1", parts.given.memo_prefix + f"s{step}")


def test_a_memo_answers_its_value_its_abort_or_non_determinism() -> None:
    memos = Parts(given()).memos
    assert memos.answer(Row({"id": "now", "v": 3}, 1), "now") == 3
    with pytest.raises(AbortWorkflow):
        memos.answer(Row({"id": "abort", "abort": "no"}, 1), "abort")
    with pytest.raises(NonDeterminismError):
        memos.answer(Row({"id": "now", "v": 3}, 1), "effect mail")


def test_an_abort_at_a_wait_is_any_steps_abort_and_meets_what_came_after_the_wait() -> None:
    memos = Parts(given()).memos
    with pytest.raises(AbortWorkflow):  # a worker past the timer, at whatever step comes next
        memos.answer(Row({"id": WAIT_ABORTED, "abort": "closed"}, 1), "effect mail")
    with pytest.raises(WaitOver) as stepped:  # a worker committed the step after the wait first
        memos.answer(Row({"id": "effect mail", "v": 1}, 1), WAIT_ABORTED)
    assert not stepped.value.ended
    with pytest.raises(WaitOver) as ended:  # or the request's completion right after it
        memos.answer(Row({"id": WAIT_ENDED, "v": None}, 1), WAIT_ABORTED)
    assert ended.value.ended
    with pytest.raises(NonDeterminismError):  # no step of the code is the completion's place
        memos.answer(Row({"id": WAIT_ENDED, "v": None}, 1), "effect mail")


def test_a_replay_deletes_a_memo_of_an_earlier_run_and_runs_the_step_anew() -> None:
    rows, parts = Rows(), Parts(given(Plan(resume=True, incarnation="new")))
    ref = _memo_ref(parts)
    rows.put(ref, {"id": "now", "v": 1, "i": "old"})  # left by a run whose record expired first
    parts.cursor.advance()
    assert rows.run(parts.memos.replayed("now")) == (False, None)
    assert ref not in rows.rows and not parts.cursor.replaying


def test_a_memo_of_this_run_or_of_no_known_run_is_trusted() -> None:
    rows, parts = Rows(), Parts(given(Plan(resume=True, incarnation="this")))
    parts.cursor.advance()
    rows.put(_memo_ref(parts), {"id": "now", "v": 1, "i": "this"})
    assert rows.run(parts.memos.replayed("now")) == (True, 1)
    older = Parts(given(Plan(resume=True)))  # a record from before incarnations
    older.cursor.advance()
    rows.put(_memo_ref(older), {"id": "now", "v": 2, "i": "other"})
    assert rows.run(older.memos.replayed("now")) == (True, 2)


def test_a_step_whose_commit_met_only_an_earlier_runs_memo_commits_again() -> None:
    rows, parts = Rows(), Parts(given(Plan(resume=True, incarnation="new")))
    parts.cursor.fresh()
    parts.cursor.advance()
    ref = _memo_ref(parts)
    rows.put(ref, {"id": "atomic a", "v": 1, "i": "old"})
    value = rows.run(parts.stepper.forward("idemflowruns", "r1", "atomic a", lambda tx: 5, None))
    assert value == 5
    memo = Memo.from_json(rows.rows[ref][0])
    assert memo is not None and (memo.value, memo.run) == (5, "new")
    deletes = [op for commit in rows.commits() for op in commit if isinstance(op, Delete)]
    assert [op.ref for op in deletes] == [ref]


def test_a_claiming_commit_that_met_another_incarnation_defers_to_the_record() -> None:
    """While this execution's claim is only drawn, a memo of another incarnation may be a racing
    execution's that claimed first: its record decides."""
    rows, parts = Rows(), Parts(given())
    parts.cursor.advance()
    ref = _memo_ref(parts)
    rows.put(RUN, RunRecord("fp", RunStatus.RUNNING, incarnation="theirs").to_json())
    rows.put(ref, {"id": "atomic a", "v": 7, "i": "theirs"})

    def body(tx: Tx) -> int:
        return 5

    assert rows.run(parts.stepper.forward("idemflowruns", "r1", "atomic a", body, None)) == 7
    assert parts.recorder.incarnation == "theirs" and ref in rows.rows
