"""The branches of ``all_of`` and ``any_of`` against a dict of rows and a driver whose flights
land in the order the test says: every call launched before any is waited for, each branch at
its own step number, the first to land deciding an ``any_of`` in its own commit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from idemflow import StepRetry
from idemflow.core.plan import Plan
from idemflow.core.requests import Abandon, CallOut, Collect, Landed, Launch, Sleep
from idemflow.engine.decision import ANY_OF
from idemflow.engine.monad import AllOf, AnyOf, Effect
from idemflow.records import Memo
from idemflow.stores.base import RowRef
from tests.support.engine_rows import Parts, Rows, given


class Flights(Rows):
    """:class:`Rows` that also flies requests: each lands when :attr:`order` says (by launch
    number: the first launched is 0), one per ``Collect``."""

    def __init__(self, order: Callable[[list[int]], int] = min) -> None:
        super().__init__()
        self.order = order
        self.launched: list[CallOut | Sleep] = []
        self.flying: list[int] = []
        self.abandoned: list[int] = []

    def answer(self, request: object) -> Any:
        match request:
            case Launch(launched):
                self.asked.append(request)
                self.launched.append(launched)
                self.flying.append(len(self.launched) - 1)
                return len(self.launched) - 1
            case Collect(flights):
                self.asked.append(request)
                flight = self.order([f for f in flights if f in self.flying])
                self.flying.remove(flight)
                return [(flight, self._land(self.launched[flight]))]
            case Abandon(flights):
                self.asked.append(request)
                self.abandoned.extend(flights)
                return None
        return super().answer(request)

    def _land(self, request: CallOut | Sleep) -> Landed:
        if isinstance(request, Sleep):
            return Landed(None)
        try:
            return Landed(request.function(request.key))
        except Exception as exc:  # noqa: BLE001 - the branch that asked gets it
            return Landed(error=exc)


def call(name: str, made: list[str], *, fails: bool = False, retry: StepRetry | None = None) -> Effect:
    def function(key: str) -> str:
        made.append(name)
        if fails:
            raise ConnectionError(name + " down")
        return name.upper()

    return Effect(name, function, retry=retry)


def memo(rows: Rows, step: int) -> Memo | None:
    row = rows.row(RowRef("idemflowruns", "r1", f"mwf|r1|s{step}"))
    return None if row is None else Memo.from_json(row.value)


def test_every_call_is_launched_before_any_is_waited_for_and_values_keep_their_order() -> None:
    rows, parts, made = Flights(order=max), Parts(given()), []  # the last launched lands first
    node = AllOf((call("a", made), call("b", made), call("c", made)))
    assert rows.run(parts.interpreter.evaluate(node)) == ["A", "B", "C"]
    kinds = [type(request).__name__ for request in rows.asked if isinstance(request, Launch | Collect)]
    assert kinds == ["Launch", "Launch", "Launch", "Collect", "Collect", "Collect"]
    assert [memo(rows, step).value for step in (1, 2, 3)] == ["A", "B", "C"]  # type: ignore[union-attr]
    assert made == ["c", "b", "a"] and parts.cursor.step == 3


def test_an_any_of_commits_its_decision_with_its_winner_and_lets_the_others_go() -> None:
    rows, parts, made = Flights(order=max), Parts(given()), []
    node = AnyOf((call("slow", made), call("fast", made)))
    assert rows.run(parts.interpreter.evaluate(node)) == (1, "FAST")
    decision, winner = memo(rows, 3), memo(rows, 2)
    assert decision is not None and (decision.identity, decision.value) == (ANY_OF, 1)
    assert winner is not None and memo(rows, 1) is None
    [together] = [ops for ops in rows.commits() if any(op.ref.key.endswith("|s3") for op in ops)]
    assert {op.ref.key[-3:] for op in together} >= {"|s2", "|s3"}  # one commit, both memos
    assert rows.abandoned == [0] and made == ["fast"] and parts.cursor.step == 3


def test_a_replayed_any_of_reads_its_decision_and_launches_nothing() -> None:
    rows, made = Flights(order=max), []
    rows.run(Parts(given()).interpreter.evaluate(AnyOf((call("slow", made), call("fast", made)))))
    replay = Flights(order=min)  # the other one would land first now
    replay.rows = dict(rows.rows)
    parts = Parts(given(Plan(resume=True)))
    assert replay.run(parts.interpreter.evaluate(AnyOf((call("slow", made), call("fast", made))))) == (
        1,
        "FAST",
    )
    assert replay.launched == [] and made == ["fast"]


def test_once_a_branch_failed_no_call_not_made_yet_is_made_and_the_others_are_kept() -> None:
    rows, parts, made = Flights(order=min), Parts(given()), []
    again = StepRetry(initial=0.001, maximum_attempts=5)
    node = AllOf((call("a", made, fails=True), call("b", made, fails=True, retry=again), call("c", made)))
    with pytest.raises(ConnectionError, match="a down"):
        rows.run(parts.interpreter.evaluate(node))
    assert made == ["a", "b", "c"]  # b's retry never made: its wait was skipped
    assert memo(rows, 1) is None and memo(rows, 2) is None and memo(rows, 3) is not None
    assert parts.cursor.step == 1 and parts.cursor.identity == "effect a"  # the failure names a
