"""The interpreter: a workflow's nodes as numbered steps, each committed before the next runs."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from idemflow import Idem, Tx, atomic, now, pure, uuid4
from idemflow.core.plan import AtCheckpoint, Checkpointed, Plan
from idemflow.engine.memo_reader import AbortWorkflow
from idemflow.engine.monad import Call, Checkpoint
from idemflow.errors import InvalidInputError
from tests.support.engine_rows import Parts, Rows, given


def _add(tx: Tx) -> int:
    tx.increment("n")
    return 1


def _call(function: Any) -> Call:
    return Call("wf", function, (), {})


def test_a_bind_chain_numbers_its_steps_in_order() -> None:
    rows, parts = Rows(), Parts(given())
    chain = atomic("items", "p1", _add).bind(lambda a: atomic("items", "p2", _add).map(lambda b: a + b))
    assert rows.run(parts.interpreter.evaluate(chain.node)) == 2
    assert parts.cursor.step == 2
    assert len(rows.commits()) == 1  # the first, before the second ran
    assert parts.deferred.pending is not None  # the last one is the outcome's to carry


def test_a_generator_workflows_step_commits_before_its_next_step_runs() -> None:
    rows, parts = Rows(), Parts(given())
    seen: list[int] = []

    def flow() -> Generator[Idem[Any], Any, int]:
        yield atomic("items", "p1", _add)
        seen.append(len(rows.commits()))  # the first step waits for this move
        yield atomic("items", "p2", _add)
        seen.append(len(rows.commits()))
        return 7

    assert rows.run(parts.interpreter.evaluate(_call(flow))) == 7
    assert seen == [0, 1]
    assert parts.deferred.pending is not None  # the last one is the outcome's to carry


def test_derived_values_take_a_step_number_and_no_memo() -> None:
    rows, parts = Rows(), Parts(given())

    def flow() -> Generator[Idem[Any], Any, Any]:
        first = yield uuid4()
        at = yield now()
        return first, at

    value, at = rows.run(parts.interpreter.evaluate(_call(flow)))
    again = Parts(given())
    assert rows.run(again.interpreter.evaluate(_call(flow)))[0] == value
    assert at == 1000.0 and parts.cursor.step == 2


def test_a_workflow_that_yields_something_else_is_refused_by_name() -> None:
    rows, parts = Rows(), Parts(given())

    def flow() -> Generator[Any, Any, None]:
        yield 3

    with pytest.raises(InvalidInputError, match="yielded int"):
        rows.run(parts.interpreter.evaluate(_call(flow)))


def test_a_checkpoint_under_submit_stops_with_the_journal() -> None:
    rows, parts = Rows(), Parts(given(Plan(at_checkpoint=AtCheckpoint.STOP)))
    chain: Idem[None] = atomic("items", "p1", _add).bind(lambda _: Idem(Checkpoint()))
    with pytest.raises(Checkpointed) as stopped:
        rows.run(parts.interpreter.evaluate(chain.node))
    assert stopped.value.journal == (("items", "p1", "atomic _add"),)


def test_an_aborting_step_unwinds_to_the_caller_after_what_it_went_on_from_committed() -> None:
    rows, parts = Rows(), Parts(given())

    def refuse(tx: Tx) -> None:
        tx.abort("no")

    def flow() -> Generator[Idem[Any], Any, None]:
        yield atomic("items", "p1", _add)
        yield atomic("items", "p1", refuse)

    with pytest.raises(AbortWorkflow):
        rows.run(parts.interpreter.evaluate(_call(flow)))
    assert len(rows.commits()) == 2 and parts.cursor.step == 2
    assert rows.run(Parts(given()).interpreter.evaluate(pure(5).node)) == 5
