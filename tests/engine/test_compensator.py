"""The compensator: committed steps undone newest first, each once, each a step of its own."""

from __future__ import annotations

from typing import Any

import pytest

from idemflow import Tx
from idemflow.compensation.compensator import Done
from idemflow.core.plan import Plan
from idemflow.engine.monad import Atomic, Effect
from idemflow.errors import CompensationError
from idemflow.stores.base import RowRef
from tests.support.engine_rows import Parts, Rows, given


def _undoable(name: str, undone: list[str]) -> Atomic:
    def undo(tx: Tx, result: Any) -> None:
        undone.append(f"{name}:{result}")
        tx.put(name, "undone")

    return Atomic("items", "p1", lambda tx: None, undo, name)


def test_steps_are_undone_newest_first_each_at_its_compensation_tag() -> None:
    rows, parts, undone = Rows(), Parts(given()), list[str]()
    parts.cursor.committed()
    parts.compensator.register(Done(1, _undoable("a", undone), 10))
    parts.compensator.register(Done(2, _undoable("b", undone), 20))
    rows.run(parts.compensator.compensate("why", None))
    assert undone == ["b:20", "a:10"]
    prefix = parts.given.memo_prefix
    assert (
        RowRef("items", "p1", prefix + "c2") in rows.rows
        and RowRef("items", "p1", prefix + "c1") in rows.rows
    )


def test_a_resumed_abort_undoes_nothing_twice() -> None:
    rows, first, undone = Rows(), Parts(given()), list[str]()
    first.cursor.committed()
    first.compensator.register(Done(1, _undoable("a", undone), 10))
    rows.run(first.compensator.compensate("why", None))
    again = Parts(given(Plan(resume=True)))
    again.compensator.register(Done(1, _undoable("a", undone), 10))
    rows.run(again.compensator.compensate("why", None))
    assert undone == ["a:10"]


def test_an_outside_calls_undo_gets_the_calls_own_key_and_answer() -> None:
    rows, parts, seen = Rows(), Parts(given()), list[tuple[str, Any]]()
    parts.cursor.committed()

    def refund(key: str, result: Any) -> str:
        seen.append((key, result))
        return "refunded"

    parts.compensator.register(Done(3, Effect("charge", lambda key: "charged", compensate=refund), "charged"))
    rows.run(parts.compensator.compensate("why", None))
    from idemflow.core.effect_keys import idempotency_key

    assert seen == [(idempotency_key("wf", "r1", 3), "charged")]


def test_an_undo_that_raises_fails_the_compensation_naming_its_step() -> None:
    rows, parts = Rows(), Parts(given())
    parts.cursor.committed()

    def broken(tx: Tx, result: Any) -> None:
        raise RuntimeError("gone")

    parts.compensator.register(Done(4, Atomic("items", "p1", lambda tx: None, broken, "ship"), None))
    with pytest.raises(CompensationError) as failed:
        rows.run(parts.compensator.compensate("why", None))
    assert failed.value.step == 4 and parts.cursor.step == 4


def test_a_restart_forgets_what_the_replay_registers_again() -> None:
    rows, parts, undone = Rows(), Parts(given()), list[str]()
    parts.compensator.register(Done(1, _undoable("a", undone), 10))
    parts.compensator.restart()
    rows.run(parts.compensator.compensate("why", None))
    assert undone == []
