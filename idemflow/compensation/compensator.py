"""Compensation: the steps a request undoes when it aborts, newest first, each once.

The interpreter registers every committed step that has an undo (a table
step or an outside call with ``compensate=``, a child started with
``on_parent_abort="abort"``); when the workflow aborts, this part runs
their undos in reverse order, each an idempotent step of its own memoized
at its step's compensation tag, so a duplicate or a resumed abort never
undoes anything twice. It owns that list, and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from idemflow.core.effect_keys import idempotency_key
from idemflow.core.limit_spec import Limit
from idemflow.core.requests import CallOut, Steps
from idemflow.core.step_retry import StepRetry
from idemflow.core.timers import when
from idemflow.engine.cursor import Cursor
from idemflow.engine.deferred import DeferredCommit
from idemflow.engine.given import Given
from idemflow.engine.in_place_retry import INFRASTRUCTURE, tried
from idemflow.engine.monad import Atomic, Effect, Start
from idemflow.engine.stepper import Stepper
from idemflow.engine.tx import StepAborted, Tx
from idemflow.errors import CompensationError, IdemflowError, LimitReachedError, NonDeterminismError
from idemflow.keys import RUNS_TABLE, compensation_tag, late_undo_tag, settled_undo_tag
from idemflow.serialization import JSON

HoldUntil = Callable[[float, str], Steps[bool]]
"""Wait until a time before going on (a durable timer under workers, in place elsewhere): False
if the wait is longer than the caller may wait here (an operator's budget)."""

AbortChild = Callable[[Given, Start, JSON], Steps[None]]
"""Abort a child as an operator would: an execution of its own, which only the engine on top
builds (handed down, not imported up; a plain function of the parent's facts, so no part refers
back to the execution that owns it and an execution is freed as soon as it ends)."""


@dataclass(frozen=True, slots=True)
class Done:
    """A committed step that is undone if the request is: a table step or an outside call with a
    compensation, or a child started with ``on_parent_abort="abort"``."""

    step: int
    node: Atomic | Effect | Start
    result: Any
    late: bool = False
    """An effect whose call this execution saw answered after the request was undone at it."""
    group: Limit | None = None
    """The limit group an effect's undo holds around its call, as the call did (None where the
    execution holds the group for the whole workflow already)."""


def _settle(tx: Tx) -> None:
    tx.settle()  # a duplicate of a finished request stops here, before the call out


class Compensator:
    """The undoable steps committed so far, and their undoing."""

    __slots__ = ("_abort_child", "_cursor", "_deferred", "_done", "_given", "_hold", "_stepper")

    def __init__(
        self,
        given: Given,
        cursor: Cursor,
        stepper: Stepper,
        deferred: DeferredCommit,
        abort_child: AbortChild,
        hold: HoldUntil | None = None,
    ) -> None:
        self._given = given
        self._cursor = cursor
        self._stepper = stepper
        self._deferred = deferred
        self._abort_child = abort_child
        self._hold = hold
        self._done: list[Done] = []

    def register(self, done: Done) -> None:
        """A step that is undone if the request is, in the order committed."""
        self._done.append(done)

    def restart(self) -> None:
        """Start over (see :class:`~idemflow.engine.deferred.Restart`): the replay registers them again."""
        self._done = []

    def compensate(self, reason: JSON, workflow_retry: StepRetry | None) -> Steps[None]:
        """Undo the completed steps in reverse order, each an idempotent step of its own; a step
        with no retry policy of its own follows ``workflow_retry``."""
        if self._deferred.pending is not None:
            yield from self._deferred.flush()
        unsettled: list[Done] = []
        for done in reversed(self._done):
            node, result = done.node, done.result
            if isinstance(node, Effect):
                tag = late_undo_tag(done.step) if done.late else compensation_tag(done.step)
                yield from self._undo_call(done, node, workflow_retry, tag)
                if result is None and not done.late and (node.timeout is not None or node.lease is not None):
                    unsettled.append(done)
            elif isinstance(node, Start):
                yield from self._abort_child(self._given, node, reason)
            else:
                yield from self._undo_atomic(done.step, node, result, workflow_retry)
        for done in unsettled:
            yield from self._settle_undo(done, workflow_retry)

    def _settle_undo(self, done: Done, workflow_retry: StepRetry | None) -> Steps[None]:
        """The request was undone at this very call, whose outcome is unknown: an attempt may
        still be in flight (its holder may have died in it), so the undo that ran with None may
        have looked before the provider recorded the charge. Once the call can no longer land
        (its ``timeout=`` after the abort, or its lease, if an execution still held it), the
        undo runs once more with None, under the same key; the request ends only after it."""
        step, node = done.step, done.node
        assert isinstance(node, Effect)
        given = self._given
        at, leased = yield from self._stepper.undone_at(step)
        decided = given.clock() if at is None else at
        bounds = [decided + node.timeout] if node.timeout is not None else []
        if node.lease is not None and leased:
            bounds.append(decided + node.lease)
        if not bounds:
            return  # held by no one: no attempt of it is in flight
        due, identity = max(bounds), "compensate effect " + node.label
        why = f"undoing {node.label!r} once its call can no longer land, at {when(due)}"
        if self._hold is not None and not (yield from self._hold(due, why)):
            cause = f"its call may still land until {when(due)}: retry lets workers undo it again then"
            raise CompensationError(given.workflow, given.request_id, step, identity, cause)
        again = Done(step, node, None, group=done.group)  # the same call, looked at with None
        yield from self._undo_call(again, node, workflow_retry, settled_undo_tag(step))

    def _undo_atomic(
        self, step: int, node: Atomic, result: Any, workflow_retry: StepRetry | None
    ) -> Steps[None]:
        undo = node.compensate
        assert undo is not None
        given, cursor, stepper = self._given, self._cursor, self._stepper
        retry = node.retry if node.retry is not None else workflow_retry

        def body(tx: Tx) -> Any:
            return undo(tx, result)

        identity = "compensate " + node.name
        cursor.revisit(step)
        cursor.identity, cursor.retry = identity, retry
        tag = compensation_tag(step)

        def attempt(_again: bool) -> Steps[Any]:
            return stepper.run_step(node.table, node.partition, tag, identity, body, False)

        try:
            yield from tried(given, cursor, retry, attempt)
        except IdemflowError:
            raise
        except (Exception, StepAborted) as exc:
            cause = f"aborted: {exc.reason!r}" if isinstance(exc, StepAborted) else repr(exc)
            raise CompensationError(given.workflow, given.request_id, step, node.name, cause) from exc

    def _undo_call(self, done: Done, node: Effect, workflow_retry: StepRetry | None, tag: str) -> Steps[None]:
        """Undo an outside call: ``undo(key, result)`` as an effect of its own, memoized at
        ``tag`` beside the run record: the call's compensation tag, or one of its own for a call
        answered after the request was undone at it (which the first undo may have missed) and
        for the look once its call can no longer land.

        The undo calls the same provider as the call did, so it holds the call's limit group
        under the same rules: a full group is waited out (a continuation under workers, in
        place then ``LimitReachedError`` under ``run``), and an undo that raised keeps its slot
        unless it is over. A mass abort then never exceeds the provider's contract."""
        undo = node.compensate
        assert undo is not None
        given, cursor, stepper = self._given, self._cursor, self._stepper
        step, result = done.step, done.result
        identity = "compensate effect " + node.label

        def call_undo(key: str) -> Any:
            return undo(key, result)

        # the call's key, this incarnation's: the undo finds the call by it
        key = idempotency_key(given.workflow, given.request_id, step, incarnation=given.incarnation)
        call = CallOut(call_undo, key, node.lease, node.timeout, "compensate " + node.label, done.group)
        retry = node.retry if node.retry is not None else workflow_retry
        cursor.revisit(step)
        cursor.identity, cursor.retry = identity, retry

        def attempt(_again: bool) -> Steps[Any]:
            return stepper.run_step(RUNS_TABLE, given.request_id, tag, identity, _settle, False, call)

        try:
            yield from tried(given, cursor, retry, attempt)
        except (NonDeterminismError, LimitReachedError, *INFRASTRUCTURE):  # the undo is still to do
            raise
        except Exception as exc:
            raise CompensationError(given.workflow, given.request_id, step, identity, repr(exc)) from exc
