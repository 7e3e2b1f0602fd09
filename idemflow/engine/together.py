"""``all_of`` and ``any_of``: several steps at once, numbered as one block (the engine's part).

The branches' steps take the numbers after the step before them, in argument order: one each
(an effect, a wait, a receive, a sleep's due time), two for a receive with a timeout (its
deadline, then the receive), and an ``any_of`` one more after them, its decision. So a block's
numbers come from the code alone, and a replay meets the same memos whatever order the
branches ended in. The branches run side by side (:mod:`idemflow.engine.branches`), each
step as it would run alone: an effect leased, called, memoized under its own idempotency key and
retried under its own policy; a wait or a receive suspending the request under a worker.

- ``all_of`` waits for every branch and returns their values in order. A branch that fails
  (its policy spent) fails the step: the calls already in the air are waited for and
  memoized first, and no call not made yet is made. Under a worker, the branches that
  suspended make the request wait for the first of their times or wake-ups.
- ``any_of`` returns ``(index, value)`` of the first branch to end. Its decision is a memo of
  its own, inserted in the same commit as the winner's memo (:mod:`idemflow.engine.decision`),
  so exactly one branch ever commits, in any execution, and a replay reads the decision first.
  A branch that fails first is the step's error; the others are abandoned where they stand.

Undoing: every branch that is an effect with ``compensate=`` is undone if the request is: an
``all_of``'s with the value it committed, an ``any_of``'s winner with its value and every
other with None (its call may have been made; its answer was not kept).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, assert_never

from idemflow.core.plan import Cancelled, JournalEntry, Suspended
from idemflow.core.requests import Steps
from idemflow.core.timers import skipped_to, when
from idemflow.engine.attempt import constant
from idemflow.engine.branches import Branch, Branches
from idemflow.engine.coordinator import Coordinator, child_result
from idemflow.engine.cursor import Cursor, Position
from idemflow.engine.decision import ANY_OF, Decision, Preempted
from idemflow.engine.given import Given
from idemflow.engine.journal import Journal
from idemflow.engine.memo_reader import AbortWorkflow, MemoReader
from idemflow.engine.monad import (
    AllOf,
    AnyOf,
    Effect,
    Receive,
    TimedReceive,
    Timer,
    WaitFor,
)
from idemflow.engine.monad import (
    Branch as Member,
)
from idemflow.engine.run_record import RunRecorder
from idemflow.engine.stepper import Stepper
from idemflow.engine.store_calls import StoreCalls
from idemflow.errors import NonDeterminismError
from idemflow.keys import RUNS_TABLE, step_tag
from idemflow.stores.base import Row, RowRef

EffectStep = Callable[[Effect], Steps[Any]]
"""An effect's step as the interpreter runs it (its key, its policy, its undo registered)."""
Undone = Callable[[int, Effect, Any], None]
"""Register an effect branch's undo, with the value it is undone with (None: unknown)."""


class Layout(NamedTuple):
    """Where a block's steps are: each branch's first and last number, and the block's last."""

    firsts: tuple[int, ...]
    lasts: tuple[int, ...]
    end: int


def identities(member: Member) -> tuple[str, ...]:
    """The identities of a branch's steps, in order (what its memos and the journal hold)."""
    match member:
        case Effect(label=label):
            return ("effect " + label,)
        case WaitFor(workflow=workflow):
            return ("wait " + workflow,)
        case Receive(topic=topic):
            return ("receive " + topic,)
        case TimedReceive(deadline, topic):
            return (deadline.label, "receive " + topic)
        case Timer(deadline):
            return (deadline.label,)
        case _:
            assert_never(member)


class Together:
    """The ``all_of`` and ``any_of`` steps of one execution."""

    __slots__ = (
        "_branches",
        "_calls",
        "_coordinator",
        "_cursor",
        "_given",
        "_journal",
        "_memos",
        "_recorder",
        "_stepper",
    )

    def __init__(
        self,
        given: Given,
        cursor: Cursor,
        calls: StoreCalls,
        memos: MemoReader,
        recorder: RunRecorder,
        journal: Journal,
        stepper: Stepper,
        coordinator: Coordinator,
        branches: Branches,
    ) -> None:
        self._given = given
        self._recorder = recorder
        self._cursor = cursor
        self._calls = calls
        self._memos = memos
        self._journal = journal
        self._stepper = stepper
        self._coordinator = coordinator
        self._branches = branches

    def all_of(self, node: AllOf, effect: EffectStep, undone: Undone) -> Steps[list[Any]]:
        """Every branch's value, in order, once every branch ended."""
        cursor, members = self._cursor, node.branches
        layout = self._begin(members, decision=False)
        replaying = cursor.replaying
        computations = [
            (self._computation(member, effect), Position(first - 1, "", None, replaying, None))
            for member, first in zip(members, layout.firsts, strict=True)
        ]
        ended, _ = yield from self._branches.run(computations, first=False)
        end = Position(layout.end, "all_of", None, any(b.position.replaying for b in ended), None)
        aborted = next((b.error for b in ended if isinstance(b.error, AbortWorkflow)), None)
        if aborted is not None:  # undone: every branch that did not commit is undone unknown
            for branch, member, first in zip(ended, members, layout.firsts, strict=True):
                if branch.error is not None and not isinstance(branch.error, AbortWorkflow):
                    _undo_unknown(undone, first, member)
            cursor.stand(end)
            raise aborted
        cancelled = next((b.error for b in ended if isinstance(b.error, Cancelled)), None)
        if cancelled is not None:  # an operator stopped it: the answers in the air were kept
            cursor.stand(end)
            raise cancelled
        failed = next((b for b in ended if isinstance(b.error, Exception)), None)
        if failed is not None and failed.error is not None:
            cursor.stand(failed.position)  # the failing branch's step, identity and policy
            raise failed.error
        cursor.stand(end)
        suspended = [b.error for b in ended if isinstance(b.error, Suspended)]
        if suspended:
            raise _merged(suspended)
        return [
            child_result(branch.value, member) if isinstance(member, WaitFor) else branch.value
            for branch, member in zip(ended, members, strict=True)
        ]

    def any_of(self, node: AnyOf, effect: EffectStep, undone: Undone) -> Steps[tuple[int, Any]]:
        """``(index, value)`` of the first branch to end, decided once for every execution."""
        given, cursor, members = self._given, self._cursor, node.branches
        layout = self._begin(members, decision=True)
        at = layout.end
        registered: set[int] = set()
        if not cursor.run_known:  # did the request run before? Then its decision is read first
            yield from self._recorder.meet((yield from self._calls.read(given.run_ref)))
        try:
            cursor.stand(Position(at, ANY_OF, None, cursor.replaying, None))
            done, index = yield from self._memos.replayed(ANY_OF)
            if not done and given.plan.abort is not None and not cursor.cleaning:
                # An abort meeting an undecided any_of aborts at its decision: no branch runs.
                index, done = (yield from self._decide(at, None)), True
            if done:
                return (yield from self._decided(node, layout, index, undone, registered))
            replaying = cursor.replaying
            timed = any(isinstance(member, Timer) for member in members)
            over_at = tuple(
                first for member, first in zip(members, layout.firsts, strict=True) if _timed(member)
            )
            computations = [
                (
                    self._computation(member, effect, over_at),
                    Position(first - 1, "", None, replaying, _deciding(member, last, at, position, timed)),
                )
                for position, (member, first, last) in enumerate(
                    zip(members, layout.firsts, layout.lasts, strict=True)
                )
            ]
            # A timer that is due ends at once; the other branches look first, so a message
            # sent before its due time (a receive takes no later one) wins, whatever the order.
            timers = frozenset(i for i, member in enumerate(members) if isinstance(member, Timer))
            ended, stopper = yield from self._branches.run(computations, first=True, last=timers)
            if stopper is None:  # every branch waits (a worker's): for the first time or wake-up
                cursor.stand(Position(at, ANY_OF, None, replaying, None))
                raise _merged([b.error for b in ended if isinstance(b.error, Suspended)])
            error = stopper.error
            if isinstance(error, Preempted):  # another execution's branch ended first
                index = yield from self._decision(at, error.existing)
                return (yield from self._decided(node, layout, index, undone, registered))
            if isinstance(error, AbortWorkflow):
                if isinstance(members[stopper.index], Effect):
                    registered.add(stopper.index)  # its step registered its own undo
                raise error
            if error is not None:
                cursor.stand(stopper.position)  # the failing branch's step, identity and policy
                raise error
            index, value = stopper.index, stopper.value
            if isinstance(members[index], Timer):  # its time came first: decided here, unless
                index = yield from self._decide(at, index)  # another execution decided already
                if index != stopper.index:
                    return (yield from self._decided(node, layout, index, undone, registered))
            else:
                registered.add(index)  # committed with the decision: its step registered its undo
            return (yield from self._decided(node, layout, index, undone, registered, value))
        except AbortWorkflow:
            for position, (member, first) in enumerate(zip(members, layout.firsts, strict=True)):
                if position not in registered:
                    _undo_unknown(undone, first, member)
            cursor.stand(Position(at, ANY_OF, None, cursor.replaying, None))
            raise

    # -- the parts of a block ---------------------------------------------------------------

    def _begin(self, members: Sequence[Member], *, decision: bool) -> Layout:
        """The block's numbers from the cursor's step, journaled (and checked) at once."""
        step = self._cursor.step
        firsts: list[int] = []
        lasts: list[int] = []
        entries: list[JournalEntry] = []
        request_id = self._given.request_id
        for member in members:
            names = identities(member)
            firsts.append(step + 1)
            step += len(names)
            lasts.append(step)
            entries.extend((RUNS_TABLE, request_id, name) for name in names)
        if decision:
            step += 1
            entries.append((RUNS_TABLE, request_id, ANY_OF))
        if self._journal.noting:
            self._journal.block(firsts[0], entries)
        return Layout(tuple(firsts), tuple(lasts), step)

    def _computation(self, member: Member, effect: EffectStep, over_at: tuple[int, ...] = ()) -> Steps[Any]:
        """A branch's steps, as each would run alone (a wait's value is its child's outcome); a
        receive of an ``any_of`` takes no message sent after the block's first due time
        (``over_at``: the steps of its deadlines), whenever the request runs again."""
        coordinator = self._coordinator
        match member:
            case Effect():
                return effect(member)
            case WaitFor():
                aborting = self._given.plan.abort is not None and not self._cursor.cleaning
                return coordinator.coordinate(member) if aborting else coordinator.outcome_of(member)
            case Receive():
                return coordinator.coordinate(member._replace(over_at=over_at))
            case TimedReceive():
                return self._timed_receive(member, over_at)
            case Timer():
                return self._timer(member)
            case _:
                assert_never(member)

    def _timed_receive(self, member: TimedReceive, over_at: tuple[int, ...]) -> Steps[Any]:
        due = yield from self._coordinator.coordinate(member.deadline)
        return (yield from self._coordinator.coordinate(Receive(member.topic, due, over_at)))

    def _timer(self, member: Timer) -> Steps[None]:
        """A sleep as a branch: its due time's step, then waited out (here, or by a worker)."""
        given, coordinator = self._given, self._coordinator
        due = yield from coordinator.coordinate(member.deadline)
        while given.clock() < due:
            if skipped_to(given.clock, due):
                break
            yield from coordinator.suspend(due, None, "sleeping until " + when(due))

    def _decide(self, at: int, index: int | None) -> Steps[int]:
        """Commit the decision ``index`` (None under an abort: it aborts here): the decision
        committed, or the one another execution committed first."""
        given, cursor = self._given, self._cursor
        cursor.stand(Position(at, ANY_OF, None, False, None))
        value: int = yield from self._stepper.forward(
            RUNS_TABLE, given.request_id, ANY_OF, constant(index), None
        )
        return value

    def _decision(self, at: int, existing: Row | None) -> Steps[int]:
        """The decision a branch's commit met (read again if the store did not return it)."""
        given, cursor = self._given, self._cursor
        cursor.stand(Position(at, ANY_OF, None, True, None))
        if existing is None:
            existing = yield from self._calls.read(self._memo(at))
        if existing is None:  # pragma: no cover - a store returns the row an insert met
            raise NonDeterminismError(given.workflow, given.request_id, at, "nothing", repr(ANY_OF))
        index: int = self._memos.answer(existing, ANY_OF)
        return index

    def _decided(
        self,
        node: AnyOf,
        layout: Layout,
        index: int,
        undone: Undone,
        registered: set[int],
        value: Any = None,
    ) -> Steps[tuple[int, Any]]:
        """``(index, value)`` of the decided winner (its value read from its memo unless this
        execution has it), every undo registered: the winner's with its value, the others' unknown."""
        cursor, members = self._cursor, node.branches
        replaying = cursor.replaying
        member = members[index]
        if index not in registered and not isinstance(member, Timer):
            value = yield from self._winner(member, layout.lasts[index])
        for position, (other, first) in enumerate(zip(members, layout.firsts, strict=True)):
            if position not in registered:
                registered.add(position)
                if isinstance(other, Effect) and other.compensate is not None:
                    undone(first, other, value if position == index else None)
        cursor.stand(Position(layout.end, ANY_OF, None, replaying, None))
        return index, child_result(value, member) if isinstance(member, WaitFor) else value

    def _winner(self, member: Member, last: int) -> Steps[Any]:
        """The winner's value, from the memo its step committed with the decision."""
        given, identity = self._given, identities(member)[-1]
        self._cursor.stand(Position(last, identity, None, True, None))
        row = yield from self._calls.read(self._memo(last))
        if row is None:
            raise NonDeterminismError(given.workflow, given.request_id, last, "no memo", repr(identity))
        return self._memos.answer(row, identity)

    def _memo(self, step: int) -> RowRef:
        given = self._given
        return RowRef(RUNS_TABLE, given.request_id, given.memo_prefix + step_tag(step))


def _deciding(member: Member, last: int, at: int, index: int, timed: bool) -> Decision | None:
    """The decision a branch's last step commits with (a sleep commits none: it is decided after)."""
    return None if isinstance(member, Timer) else Decision(last, at, index, timed)


def _timed(member: Member) -> bool:
    """Whether the branch's first step is a due time (a sleep, a timed receive's deadline)."""
    return isinstance(member, Timer | TimedReceive)


def _undo_unknown(undone: Undone, first: int, member: Member) -> None:
    if isinstance(member, Effect) and member.compensate is not None:
        undone(first, member, None)


def _merged(suspended: Sequence[BaseException]) -> Suspended:
    """The branches' suspensions as one: due at the first of their times (None: woken only)."""
    waits = [wait for wait in suspended if isinstance(wait, Suspended)]
    first = waits[0]
    dues = [wait.due for wait in waits if wait.due is not None]
    why = "; ".join(dict.fromkeys(wait.why for wait in waits))
    return Suspended(
        first.journal,
        min(dues) if dues else None,
        why,
        duplicate=first.duplicate,
        claimed_at=first.claimed_at,
    )


__all__ = ["Branch", "EffectStep", "Layout", "Together", "Undone", "identities"]
