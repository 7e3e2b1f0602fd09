"""The interpreter: a workflow's nodes, one by one, as steps of the parts below it.

It walks an :class:`~idemflow.engine.monad.Idem` (an explicit stack keeps long
bind chains flat), drives generator and ``async def`` workflows, numbers each
step on the cursor and hands it to the stepper, the coordinator, the publisher or,
for its undo, the compensator. It owns what only interpretation knows: the workflow
call (its retry policy, its ``on_abort``) and whether a step's commit may
still wait for the next move (off once an execution restarted).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Coroutine, Generator
from types import GeneratorType
from typing import Any, assert_never

from idemflow.compensation.compensator import Compensator, Done
from idemflow.core.effect_keys import digest, idempotency_key
from idemflow.core.limit_spec import Limit
from idemflow.core.plan import AtCheckpoint, Checkpointed
from idemflow.core.requests import CallOut, Steps
from idemflow.core.step_retry import StepRetry
from idemflow.engine.attempt import NOT_CALLED
from idemflow.engine.coordinator import Coordinator
from idemflow.engine.cursor import Cursor
from idemflow.engine.deferred import DeferredCommit
from idemflow.engine.given import Given
from idemflow.engine.in_place_retry import INFRASTRUCTURE, tried
from idemflow.engine.journal import Journal
from idemflow.engine.memo_reader import AbortWorkflow
from idemflow.engine.monad import (
    Abort,
    AllOf,
    AnyOf,
    Atomic,
    Bind,
    Call,
    Checkpoint,
    CloseStream,
    ContinueAsNew,
    Deadline,
    Effect,
    Idem,
    Node,
    Now,
    Post,
    Pure,
    Random,
    Receive,
    SetEvent,
    Start,
    TableLess,
    Until,
    Uuid4,
    WaitFor,
    WriteStream,
)
from idemflow.engine.publisher import Publisher
from idemflow.engine.renewal import renewing
from idemflow.engine.run_record import RunRecorder
from idemflow.engine.stepper import Stepper
from idemflow.engine.together import Together
from idemflow.engine.tx import Tx
from idemflow.errors import (
    ChildAborted,
    ChildCancelledError,
    CompensationError,
    ContinueAsNewError,
    InvalidInputError,
    NonDeterminismError,
)
from idemflow.keys import RUNS_TABLE
from idemflow.serialization import JSON

ON_ABORT = "on_abort"
"""The name a failing ``on_abort`` notification gives its :class:`CompensationError`."""


def _settle(tx: Tx) -> None:
    tx.settle()  # a duplicate of a finished request stops here, before the call out


class Interpreter:
    """A workflow's nodes interpreted as this execution's steps."""

    __slots__ = (
        "_compensator",
        "_coordinator",
        "_cursor",
        "_deferred",
        "_fold",
        "_given",
        "_journal",
        "_publisher",
        "_recorder",
        "_stepper",
        "_together",
        "_workflow_call",
        "workflow_retry",
    )

    def __init__(
        self,
        given: Given,
        cursor: Cursor,
        recorder: RunRecorder,
        deferred: DeferredCommit,
        journal: Journal,
        stepper: Stepper,
        coordinator: Coordinator,
        compensator: Compensator,
        publisher: Publisher,
        together: Together,
    ) -> None:
        self._given = given
        self._cursor = cursor
        self._journal = journal
        self._recorder = recorder
        self._deferred = deferred
        self._stepper = stepper
        self._coordinator = coordinator
        self._compensator = compensator
        self._publisher = publisher
        self._together = together
        plan = given.plan
        self._fold = plan.fold and plan.submission is None
        """Steps a workflow yields directly may defer their commit to its next move (a
        submission's claim carries its outbox entry, which its outcome deletes: never folded)."""
        self._workflow_call: Call | None = None
        """The workflow this execution runs (its policy, its ``on_abort``)."""
        self.workflow_retry: StepRetry | None = None
        """The workflow's own retry policy for its steps (``@workflow(..., retry=)``)."""

    def restart(self) -> None:
        """Start over after a deferred commit did not apply: every step commits at once now."""
        self._fold = False
        self._workflow_call, self.workflow_retry = None, None

    def evaluate(self, node: Node) -> Steps[Any]:
        """Run a description to its value (an explicit stack keeps long bind chains flat)."""
        deferred = self._deferred
        stack: list[Callable[[Any], Idem[Any]]] = []
        while True:
            if deferred.pending is not None and type(node) is not Bind and type(node) is not Pure:
                yield from deferred.flush()  # what comes next must not run before it is committed
            match node:
                case Bind(source, then):
                    stack.append(then)
                    node = source
                    continue
                case Atomic():
                    value = yield from self._atomic(node, self._fold)  # may wait for the next move
                case Pure(value):
                    pass
                case Call():
                    value = yield from self._call(node)
                case Effect(compensate=undo):
                    # Not one with an undo: an execution that sees its call undone must know it
                    # made the call (a late answer is undone again), which a restart would forget.
                    value = yield from self._effect(node, self._fold and undo is None)
                case Now() | Uuid4() | Random() | Abort() | Checkpoint():
                    value = yield from self._table_less(node)
                case Start(on_parent_abort=on_parent_abort):
                    value = yield from self._coordinator.coordinate(node)
                    if on_parent_abort == "abort":
                        self._compensator.register(Done(self._cursor.step, node, value))
                case Deadline() | Until() | WaitFor() | Post() | Receive():
                    value = yield from self._coordinator.coordinate(node)
                case SetEvent() | WriteStream() | CloseStream():
                    value = yield from self._publisher.publish(node)
                case AllOf():
                    value = yield from self._together.all_of(node, self._branch_effect, self._undone)
                case AnyOf():
                    value = yield from self._together.any_of(node, self._branch_effect, self._undone)
                case ContinueAsNew():  # the execution writes the switch (or the abort met there)
                    raise renewing(node, self._cursor.cleaning, self._workflow_call, self._given.plan.abort)
                case _:
                    raise InvalidInputError(
                        f"workflow {self._given.workflow!r} met {node!r}, not an Idem description"
                    )
            if not stack:
                return value
            following = stack.pop()(value)
            if not isinstance(following, Idem):
                raise InvalidInputError(
                    f"workflow {self._given.workflow!r}: a bind function returned "
                    f"{type(following).__name__}, not an Idem"
                )
            node = following.node

    def _call(self, node: Call) -> Steps[Any]:
        """The workflow's computation (a plain function: no generator frame of its own)."""
        if self._workflow_call is None:
            self._workflow_call = node
            self.workflow_retry = node.retry
        produced = node.function(*node.args, **node.kwargs)
        if type(produced) is GeneratorType:  # the usual workflow: no ABC asked whether it is an Idem
            return self._drive(node.name, produced)
        if isinstance(produced, Idem):
            return self.evaluate(produced.node)
        if not isinstance(produced, Generator | Coroutine):
            raise InvalidInputError(
                f"workflow {node.name!r} returned {type(produced).__name__}; "
                "a workflow is a generator function, an async def awaiting steps, or returns an Idem"
            )
        return self._drive(node.name, produced)

    def _drive(self, name: str, generator: Generator[Any, Any, Any] | Coroutine[Any, Any, Any]) -> Steps[Any]:
        """Feed each yielded (or awaited) computation's value back into the workflow.

        A generator workflow yields its steps; an ``async def`` one awaits them
        (``Idem.__await__`` yields the step up here): both are driven alike.
        """
        deferred = self._deferred
        try:
            yielded = generator.send(None)
            while True:
                if not isinstance(yielded, Idem):
                    verb = "awaited" if isinstance(generator, Coroutine) else "yielded"
                    raise InvalidInputError(
                        f"workflow {name!r} {verb} {type(yielded).__name__}; a workflow {verb[:-2]}s only "
                        "steps: atomic(...), now(), effect(...) (which takes coroutine functions) or "
                        "another Idem"
                    )
                node = yielded.node  # a step directly: one generator frame fewer on the hot path
                if deferred.pending is not None:
                    yield from deferred.flush()
                # An atomic's commit may wait for the workflow's next move (see Pending): the
                # last step's then carries the outcome.
                step = self._atomic(node, self._fold) if type(node) is Atomic else self.evaluate(node)
                try:
                    value = yield from step
                except (ChildAborted, ChildCancelledError) as ended:  # the workflow may catch it there
                    yielded = generator.throw(ended)
                    continue
                try:
                    yielded = generator.send(value)
                except StopIteration:
                    raise
                except Exception:  # the workflow's own error: the step it ran from stands
                    if deferred.pending is not None:
                        yield from deferred.flush()
                    raise
        except StopIteration as stop:
            return stop.value
        finally:
            generator.close()

    def _atomic(self, node: Atomic, defer: bool) -> Steps[Any]:
        """The step's computation: a plain function on the hot path (no retry policy to try it
        in place, no undo to register), so the step adds no generator frame of its own."""
        cursor = self._cursor
        step = cursor.advance()
        identity = "atomic " + node.name
        retry = node.retry if node.retry is not None else self.workflow_retry
        cursor.retry = retry
        if node.compensate is None and (retry is None or not self._given.plan.retry_in_place):
            return self._stepper.forward(node.table, node.partition, identity, node.body, None, defer=defer)
        return self._undoable(node, step, identity, retry, defer)

    def _undoable(
        self, node: Atomic, step: int, identity: str, retry: StepRetry | None, defer: bool
    ) -> Steps[Any]:
        """An ``atomic`` tried under its retry policy, registered for compensation if it has an undo."""
        stepper = self._stepper
        value = yield from tried(
            self._given,
            self._cursor,
            retry,
            lambda again: stepper.forward(
                node.table, node.partition, identity, node.body, None, again=again, defer=defer
            ),
        )
        if node.compensate is not None:
            self._compensator.register(Done(step, node, value))
        return value

    def _effect(self, node: Effect, defer: bool) -> Steps[Any]:
        given, cursor, stepper = self._given, self._cursor, self._stepper
        label, compensate = node.label, node.compensate
        step = cursor.advance()
        key = idempotency_key(given.workflow, given.request_id, step, incarnation=given.incarnation)
        group = self._call_group(node)
        call = CallOut(node.function, key, node.lease, node.timeout, label, group)
        identity = "effect " + label
        retry = node.retry if node.retry is not None else self.workflow_retry
        cursor.retry = retry
        stepper.forget_call()
        request_id = given.request_id
        try:
            value = yield from tried(
                given,
                cursor,
                retry,
                lambda again: stepper.forward(
                    RUNS_TABLE, request_id, identity, _settle, call, again=again, defer=defer
                ),
            )
        except AbortWorkflow:
            # The request was undone at this very call: it may have been made (in flight
            # here or elsewhere, or an attempt that timed out). Undo it by its key; with
            # its answer if this execution has it, else None (the outcome is unknown).
            if compensate is not None:
                called = stepper.called
                late = called is not NOT_CALLED
                self._compensator.register(Done(step, node, called if late else None, late, group))
            raise
        if compensate is not None:
            self._compensator.register(Done(step, node, value, group=group))
        return value

    def _call_group(self, node: Effect) -> Limit | None:
        """The limit group held around an effect's call: none where the execution holds it
        already, for the whole workflow."""
        group, call = node.group, self._workflow_call
        return None if group is not None and call is not None and group in call.limits else group

    def _branch_effect(self, node: Effect) -> Steps[Any]:
        """An effect as a branch of ``all_of`` or ``any_of``: committed at once, never folded."""
        return self._effect(node, False)

    def _undone(self, step: int, node: Effect, value: Any) -> None:
        """A branch's undo, registered by its ``all_of`` or ``any_of`` (None: outcome unknown)."""
        self._compensator.register(Done(step, node, value, group=self._call_group(node)))

    def _table_less(self, node: TableLess) -> Steps[Any]:
        given, stepper = self._given, self._stepper
        match node:
            case Now():
                clock = given.clock
                return (yield from stepper.memoized("now", lambda tx: clock()))
            case Uuid4() | Random():
                step = self._cursor.advance()
                if self._journal.noting:
                    self._journal.note("", "", type(node).__name__.lower())
                derived = digest(given.workflow, given.request_id, step, incarnation=given.incarnation)
                if isinstance(node, Uuid4):
                    return str(uuid.UUID(bytes=derived[:16], version=4))
                return int.from_bytes(derived[:7], "big") / float(1 << 56)
            case Effect():
                return (yield from self._effect(node, False))
            case Abort(reason):
                return (yield from stepper.memoized("abort", lambda tx: tx.abort(reason)))
            case Checkpoint():
                yield from self.checkpoint()
                return None
            case _:
                assert_never(node)

    def checkpoint(self) -> Steps[None]:
        """``yield checkpoint()``: a submission stops here (claiming the request first)."""
        given, cursor, recorder = self._given, self._cursor, self._recorder
        plan = given.plan
        if plan.observe_checkpoint is not None:
            plan.observe_checkpoint(cursor.step)
        if cursor.step < len(plan.expected):  # journaled steps the code no longer reaches
            table, partition, identity = plan.expected[cursor.step]
            recorded = f"{identity} on {table}/{partition}"
            raise NonDeterminismError(
                given.workflow, given.request_id, cursor.step + 1, repr(recorded), "'checkpoint'"
            )
        if plan.at_checkpoint is AtCheckpoint.STOP:
            if not cursor.run_known:
                yield from recorder.claim()  # a worker accepts only requests that were submitted
            raise Checkpointed(
                self._journal.entries(), duplicate=recorder.copy, claimed_at=recorder.started_at
            )

    def on_abort(self, reason: JSON, reached: int) -> Steps[None]:
        """The workflow's ``on_abort`` steps, after its compensations: numbered on from the step
        that aborted, ``reached`` (the same on every replay), never themselves replaced by an abort."""
        call = self._workflow_call
        if call is None or call.on_abort is None:
            return
        cursor, given = self._cursor, self._given
        cursor.revisit(reached)
        cursor.cleaning = True
        try:
            produced = call.on_abort(reason, *call.args, **call.kwargs)
            if isinstance(produced, Idem):
                yield from self.evaluate(produced.node)
            elif isinstance(produced, Generator | Coroutine):
                yield from self._drive(call.name + " on_abort", produced)
        except (NonDeterminismError, ContinueAsNewError, *INFRASTRUCTURE):
            raise
        except (Exception, AbortWorkflow) as exc:
            cause = repr(exc) if isinstance(exc, Exception) else f"aborted again: {exc.reason!r}"
            raise CompensationError(given.workflow, given.request_id, cursor.step, ON_ABORT, cause) from exc
        finally:
            cursor.cleaning = False
