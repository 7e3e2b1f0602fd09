"""The coordinator: timers, children and messages, each a step of the execution (or a wait)."""

from __future__ import annotations

import pytest

from idemflow.admin import RunRecord
from idemflow.client import RunStatus
from idemflow.core.plan import Plan, Suspended
from idemflow.engine.monad import Deadline, Post, Receive, Until, WaitFor
from idemflow.keys import inbox_prefix
from idemflow.records import Message, run_ref
from idemflow.stores.base import Capabilities, Insert, Put
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
