"""The stepper: one step replayed from its memo, or executed and committed once."""

from __future__ import annotations

from typing import Any

import pytest

from idemflow import Tx
from idemflow.core.plan import AtCheckpoint, Plan
from idemflow.core.requests import CallOut
from idemflow.engine.deferred import Pending
from idemflow.engine.memo_reader import AbortWorkflow
from idemflow.errors import NonDeterminismError
from idemflow.keys import data_key
from idemflow.records import MEMO_AT, RUN_AT, Memo, run_ref
from idemflow.stores.base import Check, Increment, Insert, Put, RowRef
from tests.support.engine_rows import Parts, Rows, given

ROW = RowRef("items", "p1", data_key("n"))


class Counted:
    """A body that adds one to ``n`` and answers what it read, counting its runs (past its read:
    with reads fetched by the driver, a body that reads a row runs once more to fetch it)."""

    def __init__(self) -> None:
        self.runs = 0

    def __call__(self, tx: Tx) -> Any:
        seen = tx.get("n", 0)
        self.runs += 1
        tx.put("n", seen + 1)
        return seen


def _step(parts: Parts, body: Any, *, defer: bool = False, identity: str = "atomic add") -> Any:
    parts.cursor.advance()
    return parts.stepper.forward("items", "p1", identity, body, None, defer=defer)


def _memo(rows: Rows, parts: Parts, step: int = 1) -> Memo | None:
    ref = RowRef("items", "p1", parts.given.memo_prefix + f"s{step}")
    found = rows.rows.get(ref)
    return None if found is None else Memo.from_json(found[0])


def test_a_first_step_commits_its_memo_the_claim_and_its_data_at_once() -> None:
    rows, parts, body = Rows(), Parts(given()), Counted()
    assert rows.run(_step(parts, body)) == 0
    [commit] = rows.commits()
    assert [type(op) for op in commit] == [Insert, Insert, Put]
    assert commit[RUN_AT].ref == run_ref("wf", "r1")
    memo = _memo(rows, parts)
    assert memo is not None and (memo.identity, memo.value) == ("atomic add", 0)
    assert rows.rows[ROW][0] == 1
    assert (parts.cursor.commits, parts.cursor.run_known) == (1, True)


def test_a_replayed_step_answers_from_its_memo_without_running_its_body() -> None:
    rows, first = Rows(), Parts(given())
    rows.run(_step(first, Counted()))
    again, body = Parts(given(Plan(resume=True))), Counted()
    assert rows.run(_step(again, body)) == 0
    assert (body.runs, len(rows.commits())) == (0, 1)


def test_a_missing_memo_ends_the_replay_and_the_body_runs() -> None:
    rows, parts, body = Rows(), Parts(given(Plan(resume=True))), Counted()
    assert rows.run(_step(parts, body)) == 0
    assert (body.runs, parts.cursor.replaying) == (1, False)
    [commit] = rows.commits()
    assert [type(op) for op in commit] == [Insert, Put]  # a resumed request claims nothing


def test_a_memo_of_another_step_is_non_determinism() -> None:
    rows, first = Rows(), Parts(given())
    rows.run(_step(first, Counted()))
    again = Parts(given(Plan(resume=True)))
    with pytest.raises(NonDeterminismError):
        rows.run(_step(again, Counted(), identity="atomic other"))


def test_a_commit_that_loses_to_another_executions_memo_answers_with_it() -> None:
    rows, parts, body = Rows(), Parts(given(Plan(resume=True))), Counted()
    parts.cursor.fresh()  # it looked before the other execution committed
    memo_ref = RowRef("items", "p1", parts.given.memo_prefix + "s1")
    rows.put(memo_ref, {"id": "atomic add", "v": 41})
    assert rows.run(_step(parts, body)) == 41
    assert ROW not in rows.rows  # its own write never landed
    assert parts.cursor.commits == 0


def test_a_data_conflict_reruns_the_body_and_commits_once() -> None:
    rows, parts, body = Rows(), Parts(given()), Counted()
    rows.put(ROW, 10)
    rows.refuse_next(2)  # the row moved between the body's read and its commit
    assert rows.run(_step(parts, body)) == 10
    assert (body.runs, len(rows.commits()), rows.rows[ROW][0]) == (2, 2, 11)


def test_a_step_that_may_wait_leaves_its_commit_pending() -> None:
    rows, parts = Rows(), Parts(given())
    assert rows.run(_step(parts, Counted(), defer=True)) == 0
    pending = parts.deferred.pending
    assert isinstance(pending, Pending) and pending.claims
    assert rows.commits() == []
    rows.run(parts.deferred.flush())
    assert len(rows.commits()) == 1 and parts.cursor.commits == 1


def test_a_conflicts_retry_commits_at_once_though_its_first_attempt_could_wait() -> None:
    rows, parts, body = Rows(), Parts(given()), Counted()
    rows.put(ROW, 10)
    raised: list[int] = []

    def moved(tx: Tx) -> Any:
        seen = tx.get("n")
        if not raised:
            raised.append(seen)
            rows.put(ROW, 20)  # another execution commits after the body's read, and it raises
            raise ValueError("read a half-updated state")
        return body(tx)

    assert rows.run(_step(parts, moved, defer=True)) == 20
    assert raised == [10]
    assert parts.deferred.pending is None and len(rows.commits()) == 1


def test_an_aborting_step_commits_its_memo_and_checks_what_it_read() -> None:
    rows, parts = Rows(), Parts(given())
    rows.put(ROW, 1)

    def refuse(tx: Tx) -> None:
        tx.get("n")
        tx.abort("no funds")

    with pytest.raises(AbortWorkflow) as aborted:
        rows.run(_step(parts, refuse, defer=True))
    assert aborted.value.reason == "no funds"
    [commit] = rows.commits()  # never deferred: the workflow does not go on from it
    assert [type(op) for op in commit] == [Insert, Insert, Check]
    memo = _memo(rows, parts)
    assert memo is not None and memo.aborted


def test_an_effect_is_called_once_and_its_answer_memoized() -> None:
    rows, parts = Rows(), Parts(given())
    keys: list[str] = []

    def charge(key: str) -> str:
        keys.append(key)
        return "charged"

    parts.cursor.advance()
    call = CallOut(charge, "key-1")
    value = rows.run(
        parts.stepper.forward("idemflowruns", "r1", "effect charge", lambda tx: tx.settle(), call)
    )
    assert (value, keys, parts.stepper.called) == ("charged", ["key-1"], "charged")
    replay = Parts(given(Plan(resume=True)))
    replay.cursor.advance()
    again = replay.stepper.forward("idemflowruns", "r1", "effect charge", lambda tx: tx.settle(), call)
    assert rows.run(again) == "charged" and keys == ["key-1"]


def test_forward_steps_are_journaled_for_a_continuation_and_checked_on_resume() -> None:
    rows, parts = Rows(), Parts(given(Plan(at_checkpoint=AtCheckpoint.STOP)))
    rows.run(_step(parts, Counted()))
    assert parts.journal.entries() == (("items", "p1", "atomic add"),)
    moved = Parts(given(Plan(resume=True, expected=(("items", "p2", "atomic add"),))))
    with pytest.raises(NonDeterminismError):
        rows.run(_step(moved, Counted()))


def test_the_memo_is_first_in_the_commit() -> None:
    rows, parts = Rows(), Parts(given(Plan(resume=True)))
    parts.cursor.fresh()
    parts.cursor.advance()
    rows.run(parts.stepper.forward("items", "p1", "atomic inc", lambda tx: tx.increment("n"), None))
    [commit] = rows.commits()
    assert isinstance(commit[MEMO_AT], Insert) and isinstance(commit[1], Increment)
