"""The coordinator: timers, children and messages, each a step of the execution (or a wait)."""

from __future__ import annotations

import pytest

from idemflow.admin import RunRecord
from idemflow.client import RunStatus
from idemflow.core.plan import Aborting, Finished, Plan, Suspended
from idemflow.engine.memo_reader import WAIT_ABORTED, WAIT_ENDED, AbortWorkflow
from idemflow.engine.monad import Deadline, Post, Receive, Until, WaitFor
from idemflow.keys import inbox_prefix
from idemflow.records import Memo, Message, run_ref
from idemflow.stores.base import Capabilities, Insert, Put, RowRef
from tests.support.engine_rows import CROSS, ONE_PARTITION, Parts, Rows, given


def test_a_deadline_is_decided_once_and_replayed_as_decided() -> None:
    rows, first = Rows(), Parts(given(clock=lambda: 1000.0))
    assert rows.run(first.coordinator.coordinate(Deadline(10.0, None, "deadline"))) == 1010.0
    later = Parts(given(Plan(resume=True), clock=lambda: 5000.0))
    assert rows.run(later.coordinator.coordinate(Deadline(10.0, None, "deadline"))) == 1010.0
    assert (first.cursor.step, later.cursor.step) == (1, 1)


def test_a_timer_suspends_a_request_workers_run_until_it_is_due() -> None:
    rows, parts = Rows(), Parts(given(Plan(resume=True, suspend=True), clock=lambda: 1000.0))
    with pytest.raises(Suspended) as suspended:
        rows.run(parts.coordinator.coordinate(Until(1500.0)))
    assert suspended.value.due == 1500.0
    assert rows.run(Parts(given(clock=lambda: 1500.0)).coordinator.coordinate(Until(1500.0))) is None


def test_a_timer_passed_leaves_the_place_after_it_for_the_completion() -> None:
    parts = Parts(given(clock=lambda: 1500.0))
    Rows().run(parts.coordinator.coordinate(Until(1500.0)))
    assert parts.cursor.after_waits == [1]


AFTER_WAIT = RowRef("idemflowruns", "r1", "mwf|r1|s1")


def _aborting() -> Parts:
    return Parts(given(Plan(resume=True, abort=Aborting("closed"), incarnation="run1"), clock=lambda: 1000.0))


def test_an_abort_at_a_timer_writes_its_memo_in_the_place_after_it() -> None:
    rows, parts = Rows(), _aborting()
    with pytest.raises(AbortWorkflow):
        rows.run(parts.coordinator.coordinate(Until(1500.0)))
    memo = Memo.from_json(rows.rows[AFTER_WAIT][0])
    assert memo is not None and (memo.identity, memo.aborted, memo.value) == (WAIT_ABORTED, True, "closed")


def test_an_abort_at_a_timer_that_meets_the_completion_after_it_answers_with_the_record() -> None:
    rows, parts = Rows(), _aborting()
    done = RunRecord("fp", RunStatus.RUNNING, incarnation="run1").finished(RunStatus.COMPLETED, 9.0)
    rows.put(run_ref("wf", "r1"), done.to_json())
    rows.put(AFTER_WAIT, {"id": WAIT_ENDED, "v": None, "i": "run1"})
    with pytest.raises(Finished) as finished:
        rows.run(parts.coordinator.coordinate(Until(1500.0)))
    assert finished.value.record == done and rows.commits() == []  # nothing undone, nothing written


def test_an_abort_at_a_timer_that_meets_the_step_after_it_replays_on() -> None:
    rows, parts = Rows(), _aborting()
    rows.put(AFTER_WAIT, {"id": "effect mail", "v": 1, "i": "run1"})
    assert rows.run(parts.coordinator.coordinate(Until(1500.0))) is None
    assert parts.cursor.step == 0 and rows.commits() == []  # that step replays next


def test_an_abort_at_a_timer_whose_insert_loses_to_the_completion_answers_with_the_record() -> None:
    rows, parts = Rows(), _aborting()
    done = RunRecord("fp", RunStatus.RUNNING, incarnation="run1").finished(RunStatus.COMPLETED, 9.0)
    parts.cursor.fresh()  # read nothing there: the completion lands between the read and the write
    rows.put(run_ref("wf", "r1"), done.to_json())
    rows.put(AFTER_WAIT, {"id": WAIT_ENDED, "v": None, "i": "run1"})
    with pytest.raises(Finished):
        rows.run(parts.coordinator.coordinate(Until(1500.0)))
    kept = Memo.from_json(rows.rows[AFTER_WAIT][0])
    assert len(rows.commits()) == 1 and kept is not None and kept.identity == WAIT_ENDED


def _sent(rows: Rows, capabilities: Capabilities = CROSS) -> Parts:
    sender = Parts(given(workflow="a", request_id="s1", capabilities=capabilities))
    rows.run(sender.coordinator.coordinate(Post("b", "r2", "topic", {"n": 1})))
    return sender


def test_a_message_is_written_with_the_senders_step_and_a_wake_up() -> None:
    rows = Rows()
    _sent(rows)
    [commit] = rows.commits()
    kinds = [type(op) for op in commit]
    assert kinds == [Insert, Insert, Insert, Put]  # memo, claim, message, wake-up
    assert isinstance(commit[2], Insert)
    message = Message.from_json(commit[2].value)
    assert (message.value, message.seq) == ({"n": 1}, 1)


def test_where_a_commit_is_one_partition_the_wake_up_and_message_go_first() -> None:
    rows = Rows()
    _sent(rows, ONE_PARTITION)
    commits = rows.commits()
    kinds = [[type(op) for op in commit] for commit in commits]
    assert kinds == [[Put], [Insert], [Insert], [Insert]]  # wake-up, message, claim, memo


def test_a_receive_takes_the_message_and_keeps_it_as_taken() -> None:
    rows = Rows()
    _sent(rows)
    receiver = Parts(given(workflow="b", request_id="r2"))
    assert rows.run(receiver.coordinator.coordinate(Receive("topic", None))) == {"n": 1}
    prefix = inbox_prefix("b", "r2", "topic")
    [taken] = [Message.from_json(v) for ref, (v, _) in rows.rows.items() if ref.key.startswith(prefix)]
    assert taken.taken and taken.value is None


def test_a_receive_with_no_message_waits_and_one_past_its_due_time_gets_none() -> None:
    rows = Rows()
    waiting = Parts(given(Plan(suspend=True), workflow="b", request_id="r2", clock=lambda: 10.0))
    with pytest.raises(Suspended):
        rows.run(waiting.coordinator.coordinate(Receive("topic", 20.0)))
    late = Parts(given(workflow="b", request_id="r2", clock=lambda: 30.0))
    assert rows.run(late.coordinator.coordinate(Receive("topic", 20.0))) is None


def test_a_finished_childs_outcome_is_memoized_by_the_wait() -> None:
    rows = Rows()
    child = run_ref("kid", "k1")
    rows.put(child, RunRecord("x", RunStatus.RUNNING).to_json())
    parts = Parts(given(Plan(suspend=True)))
    with pytest.raises(Suspended):
        rows.run(parts.coordinator.coordinate(WaitFor("kid", "k1", None)))
    rows.put(child, RunRecord("x", RunStatus.RUNNING).finished(RunStatus.COMPLETED, 5.0, result=7).to_json())
    assert rows.run(Parts(given()).coordinator.coordinate(WaitFor("kid", "k1", None))) == 7
    rows.put(child, RunRecord("x", RunStatus.RUNNING).finished(RunStatus.COMPLETED, 5.0, result=8).to_json())
    assert rows.run(Parts(given(Plan(resume=True))).coordinator.coordinate(WaitFor("kid", "k1", None))) == 7
