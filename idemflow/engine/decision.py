"""How an ``any_of`` is decided once: the winning branch's commit also inserts the decision.

An ``any_of``'s branches run side by side, and any of them, in this execution or a racing one,
may be the first to end. So no branch's step commits alone: the branch that ends commits its
memo (and what its step writes: a message it takes, a child's outcome) *with* the insert of the
``any_of``'s own memo, the winner's index. Exactly one such commit applies across every
execution; a branch whose commit meets the decision already there lost (:class:`Preempted`),
and its step writes nothing. A replay reads the decision first.
"""

from __future__ import annotations

from typing import NamedTuple

from idemflow.keys import RUNS_TABLE, step_tag
from idemflow.records import memo_row, memo_text
from idemflow.stores.base import Insert, Op, Row, RowRef

ANY_OF = "any_of"
"""The identity of an ``any_of``'s decision memo (its value: the winning branch's index)."""


class Decision(NamedTuple):
    """The decision a branch's step carries (:attr:`~idemflow.engine.cursor.Cursor.deciding`)."""

    step: int
    """The branch's step whose commit decides (a branch's last step: a receive's, not its
    deadline's)."""
    at: int
    """The ``any_of``'s own step number, where its decision memo lives."""
    choice: int
    """The branch's place among the ``any_of``'s arguments: the decision's value."""
    timed: bool = False
    """The ``any_of`` has a timer: this branch's wait ends by then whatever it waits for."""


class Preempted(BaseException):
    """A branch's commit met its ``any_of``'s decision: another branch ended first (``existing``
    is that decision's row, as the store returned it)."""

    def __init__(self, existing: Row | None) -> None:
        super().__init__()
        self.existing = existing


def decision_insert(
    decision: Decision, memo_prefix: str, request_id: str, at: int, run: str | None, expires: float | None
) -> Insert:
    """The insert of ``decision``'s memo, beside the run record (where every branch's memo is)."""
    ref = RowRef(RUNS_TABLE, request_id, memo_prefix + step_tag(decision.at))
    value = memo_row(ANY_OF, decision.choice, aborted=False, at=at, run=run)
    text = memo_text(ANY_OF, decision.choice, aborted=False, at=at, run=run)
    return Insert(ref, value, text, expires)


def carry(
    deciding: Decision | None,
    step: int,
    ops: list[Op],
    memo_prefix: str,
    request_id: str,
    at: int,
    run: str | None,
    expires: float,
) -> int | None:
    """Add to the ``ops`` of step ``step`` the decision its commit carries, if it is a branch's
    deciding step (``deciding``: the cursor's): where it is among them (the stepper reads a failure
    there as :class:`Preempted`)."""
    if deciding is None or deciding.step != step:
        return None
    ops.append(decision_insert(deciding, memo_prefix, request_id, at, run, expires))
    return len(ops) - 1


__all__ = ["ANY_OF", "Decision", "Preempted", "carry", "decision_insert"]
