"""The step engine: replay-or-execute-then-commit, one code path for every variant.

An :class:`Execution` interprets an :class:`~idemflow.monad.Idem` for one
request. Each step gets the next number ``n``; its memo lives at
``memo_key(workflow, request, "s<n>")`` in the step's own table and partition
and is inserted *in the same atomic commit* as the step's data. So:

- a first execution pays no extra round trip: it runs the body and commits
  ``[memo insert, (run record insert), data writes and checks]`` at once;
- a duplicate or crashed-and-retried execution meets the run record (the
  commit reports it), switches to replay, and from then on reads each memo
  first, so finished steps cost one read and never run again;
- two live executions race harmlessly: one memo insert wins, the other
  commit fails as a whole and returns the winner's memo;
- a commit whose answer was lost is retried as is and meets its own memo.

Every variant (``run``, ``submit``, a worker's resume, an operator's abort)
is one :class:`Plan` given at construction: the execution alone changes its
state. Data conflicts rerun the body with jittered exponential backoff
(tenacity), bounded, then :class:`ConflictError`.

The execution never calls a store: it is a generator that yields requests
(:mod:`idemflow._io`) and is sent their answers. :func:`idemflow._drive.drive`
carries them out on a blocking store (``run``), :func:`idemflow._adrive.adrive`
on an asynchronous one (``arun``): one algorithm for both APIs.

:class:`Execution` is the interpreter on top of parts it owns, each with one
job and its own state (``docs/architecture.md``): the cursor (step number,
what is known of the request), the store calls under a step's deadline, the
run record, the deferred commit, the stepper (one step), the coordinator
(timers, children, messages), the compensator and the outcome's writer.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Generator
from typing import Any, assert_never

from idemflow import telemetry
from idemflow._compensator import Compensator, Done
from idemflow._coordinator import Coordinator
from idemflow._cursor import Cursor
from idemflow._deferred import DeferredCommit, Restart
from idemflow._effect_keys import digest, idempotency_key
from idemflow._given import Given, log
from idemflow._in_place import INFRASTRUCTURE, tried
from idemflow._io import CallOut, CommitCache, Steps
from idemflow._outcome import OutcomeWriter
from idemflow._recording import RunRecorder
from idemflow._stepper import NOT_CALLED, AbortWorkflow, Stepper
from idemflow._store_calls import StoreCalls
from idemflow.errors import (
    ChildAborted,
    CompensationFailed,
    InvalidInputError,
    NonDeterminismError,
    StepFailedError,
)
from idemflow.keys import RUNS_TABLE, memo_prefix
from idemflow.monad import (
    Abort,
    Atomic,
    Bind,
    Call,
    Checkpoint,
    Deadline,
    Effect,
    Idem,
    Node,
    Now,
    Post,
    Pure,
    Random,
    Receive,
    Start,
    TableLess,
    Until,
    Uuid4,
    WaitFor,
)
from idemflow.plan import (
    DEFAULT_PLAN,
    Aborting,
    AtCheckpoint,
    Checkpointed,
    Finished,
    OtherVersion,
    Plan,
    Submission,
    Suspended,
)
from idemflow.policy import DEFAULT_POLICY, RetryPolicy
from idemflow.records import RunRecord, RunStatus, run_ref
from idemflow.serialization import JSON
from idemflow.step_retry import StepRetry
from idemflow.stores.base import Capabilities, Delete
from idemflow.tx import Reader, Tx

__all__ = [
    "DEFAULT_PLAN",
    "DEFAULT_POLICY",
    "Aborting",
    "AtCheckpoint",
    "Checkpointed",
    "Execution",
    "Finished",
    "OtherVersion",
    "Plan",
    "RetryPolicy",
    "Submission",
    "Suspended",
    "idempotency_key",
]


def _settle(tx: Tx) -> None:
    tx.settle()  # a duplicate of a finished request stops here, before the call out


class Execution:
    """One execution of one request: interprets nodes, numbers and commits steps.

    Built from one frozen :class:`~idemflow.plan.Plan`; ``reader`` is where
    step bodies read: the blocking store itself, or None on an event loop,
    where a body's reads are fetched by the driver and the body runs again.
    Its parts are the only writers of its state; callers read what
    :meth:`run` returns or raises.
    """

    def __init__(
        self,
        capabilities: Capabilities,
        workflow: str,
        request_id: str,
        fingerprint: str,
        policy: RetryPolicy = DEFAULT_POLICY,
        clock: Callable[[], float] = time.time,
        plan: Plan = DEFAULT_PLAN,
        reader: Reader | None = None,
        *,
        aliases: tuple[str, ...] = (),
    ) -> None:
        self.capabilities = capabilities
        self.workflow = workflow
        self.request_id = request_id
        self.fingerprint = fingerprint
        self.aliases = aliases
        self.policy = policy
        self.clock = clock
        self.plan = plan
        traced = telemetry.enabled()
        given = Given(
            capabilities,
            workflow,
            request_id,
            fingerprint,
            aliases,
            policy,
            clock,
            plan,
            reader,
            run_ref(workflow, request_id),
            memo_prefix(workflow, request_id),
            traced,
            log.isEnabledFor(logging.DEBUG),
        )
        self._given = given
        self._cursor = cursor = Cursor(plan.resume)
        calls = StoreCalls(given, cursor)
        self._recorder = recorder = RunRecorder(given, cursor, calls)
        self._deferred = deferred = DeferredCommit(given, cursor, calls)
        self._stepper = stepper = Stepper(given, cursor, calls, recorder, deferred)
        self._coordinator = Coordinator(given, cursor, calls, recorder, stepper, self._run_child)
        self._compensator = Compensator(given, cursor, stepper, deferred, self._abort_child)
        self._outcome = OutcomeWriter(given, cursor, calls, recorder, deferred)
        self._fold = plan.fold and plan.submission is None
        """Steps a workflow yields directly may defer their commit to its next move (a
        submission's claim carries its outbox entry, which its outcome deletes: never folded)."""
        self._workflow_call: Call | None = None
        """The workflow this execution runs (its policy, its ``on_abort``)."""
        self._workflow_retry: StepRetry | None = None
        """The workflow's own retry policy for its steps (``@workflow(..., retry=)``)."""

    @property
    def step(self) -> int:
        """Number of the last step begun."""
        return self._cursor.step

    # -- the whole request ------------------------------------------------

    def run(self, node: Node) -> Steps[RunRecord]:
        """Run to the end (completed, or aborted and compensated) and return the outcome.

        Raises :class:`Checkpointed` and :class:`OtherVersion` to the caller,
        and, under ``plan.step_errors``, :class:`StepFailedError` for a step's error.
        """
        given = self._given
        if not (given.traced or given.logged):
            return self._run(node)  # no generator frame of its own
        return self._observed_run(node)

    def _observed_run(self, node: Node) -> Steps[RunRecord]:
        given = self._given
        started = time.monotonic()
        with (
            telemetry.span(
                "idemflow.run",
                workflow=given.workflow,
                request_id=given.request_id,
                version=given.plan.version,
            )
            if given.traced
            else contextlib.nullcontext()
        ):
            record = yield from self._run(node)
        if given.logged:
            answered = "ran" if self._cursor.commits else "answered from earlier executions"
            given.log_event("run", status=record.status.value, outcome=answered, started=started)
        return record

    def _run(self, node: Node) -> Steps[RunRecord]:
        record = yield from self._answer(node)
        if not self._cursor.commits and self._given.plan.observe_replay is not None:
            self._given.plan.observe_replay()
        return record

    def _answer(self, node: Node) -> Steps[RunRecord]:
        given, cursor = self._given, self._cursor
        try:
            while True:
                try:
                    return (yield from self._settled(node))
                except Restart as restart:
                    yield from self._restart(restart)
        except Finished as finished:
            if given.plan.submission is not None and not given.capabilities.cross_partition_commit:
                yield CommitCache([Delete(self._recorder.outbox_ref)])  # written before the claim
            return finished.record
        except (NonDeterminismError, *INFRASTRUCTURE):
            raise
        except Exception as exc:
            if not given.plan.step_errors:
                raise
            undone = isinstance(exc, CompensationFailed) and exc.__cause__ is not None
            error = exc.__cause__ if undone else exc
            cause = f"{type(error).__name__}: {error}"
            raise StepFailedError(
                given.workflow, given.request_id, cursor.step, cursor.identity, cause, cursor.retry, error
            ) from exc

    def _settled(self, node: Node) -> Steps[RunRecord]:
        """The workflow run to its end, compensated if it aborted, and its outcome recorded."""
        try:
            value = yield from self.evaluate(node)
        except AbortWorkflow as abort:
            reached = self._cursor.step
            yield from self._compensator.compensate(abort.reason, self._workflow_retry)
            yield from self._on_abort(abort.reason, reached)
            return (yield from self._outcome.finish(RunStatus.ABORTED, reason=abort.reason))
        return (yield from self._outcome.finish(RunStatus.COMPLETED, result=value))

    def _restart(self, restart: Restart) -> Steps[None]:
        """Start the workflow over after a deferred commit did not apply: replaying what is
        committed (memos decide), and committing each step at once from now on."""
        self._fold = False
        if restart.existing is not None:  # another execution claimed the request: check it
            yield from self._recorder.meet(restart.existing)
        self._cursor.restart()
        self._deferred.drop()
        self._stepper.restart()
        self._compensator.restart()
        self._workflow_call, self._workflow_retry = None, None

    # -- interpretation -------------------------------------------------

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
            self._workflow_retry = node.retry
        produced = node.function(*node.args, **node.kwargs)
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
                except ChildAborted as aborted:  # the workflow may catch it where it waited
                    yielded = generator.throw(aborted)
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
        cursor, stepper = self._cursor, self._stepper
        step = cursor.advance()
        identity = "atomic " + node.name
        retry = node.retry if node.retry is not None else self._workflow_retry
        cursor.retry = retry
        if retry is None or not self._given.plan.retry_in_place:  # the hot path: no closure
            value = yield from stepper.forward(
                node.table, node.partition, identity, node.body, None, defer=defer
            )
        else:
            value = yield from tried(
                self._given,
                cursor,
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
        key = idempotency_key(given.workflow, given.request_id, step)
        call = CallOut(node.function, key, node.lease, node.timeout, label)
        identity = "effect " + label
        retry = node.retry if node.retry is not None else self._workflow_retry
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
                self._compensator.register(Done(step, node, called if late else None, late))
            raise
        if compensate is not None:
            self._compensator.register(Done(step, node, value))
        return value

    def _table_less(self, node: TableLess) -> Steps[Any]:
        given, stepper = self._given, self._stepper
        match node:
            case Now():
                clock = given.clock
                return (yield from stepper.memoized("now", lambda tx: clock()))
            case Uuid4() | Random():
                step = self._cursor.advance()
                stepper.note_derived(type(node).__name__.lower())
                derived = digest(given.workflow, given.request_id, step)
                if isinstance(node, Uuid4):
                    return str(uuid.UUID(bytes=derived[:16], version=4))
                return int.from_bytes(derived[:7], "big") / float(1 << 56)
            case Effect():
                return (yield from self._effect(node, False))
            case Abort(reason):
                return (yield from stepper.memoized("abort", lambda tx: tx.abort(reason)))
            case Checkpoint():
                yield from self._checkpoint()
                return None
            case _:
                assert_never(node)

    def _checkpoint(self) -> Steps[None]:
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
                self._stepper.journaled(), duplicate=recorder.copy, claimed_at=recorder.started_at
            )

    # -- after an abort ------------------------------------------------------

    def _on_abort(self, reason: JSON, reached: int) -> Steps[None]:
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
        except (NonDeterminismError, *INFRASTRUCTURE):
            raise
        except (Exception, AbortWorkflow) as exc:
            cause = repr(exc) if isinstance(exc, Exception) else f"aborted again: {exc.reason!r}"
            raise CompensationFailed(
                given.workflow, given.request_id, cursor.step, "on_abort", cause
            ) from exc
        finally:
            cursor.cleaning = False

    # -- other requests, each an execution of its own ---------------------------

    def _abort_child(self, node: Start, reason: JSON) -> Steps[None]:
        """A child started with ``on_parent_abort="abort"``: abort it as an operator would (its
        memos decide: a child that finished meanwhile is left as it ended)."""
        given = self._given
        plan = Plan(
            version=node.version,
            resume=True,
            abort=Aborting({"parent aborted": reason}),
            durable_outcome=True,
            retry_in_place=given.plan.retry_in_place,
        )
        inner = Execution(
            given.capabilities,
            node.call.name,
            node.request_id,
            node.fingerprint,
            given.policy,
            given.clock,
            plan,
            given.reader,
            aliases=node.aliases,
        )
        yield from inner.run(node.call)

    def _run_child(self, call: Call, request_id: str, record: RunRecord) -> Steps[None]:
        """Under ``run``, a child nobody finished yet runs here, as its own request."""
        given = self._given
        plan = Plan(version=record.version, resume=True, durable_outcome=True)
        inner = Execution(
            given.capabilities,
            call.name,
            request_id,
            record.fingerprint,
            given.policy,
            given.clock,
            plan,
            given.reader,
        )
        yield from inner.run(call)
