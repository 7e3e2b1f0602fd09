"""The step engine: replay-or-execute-then-commit, one code path for every variant.

An :class:`Execution` interprets an :class:`~idemflow.engine.monad.Idem` for one request. Each step
gets the next number ``n``; its memo lives at ``memo_key(workflow, request, "s<n>")`` in the step's
own table and partition and is inserted *in the same atomic commit* as the step's data. So:

- a first execution pays no extra round trip: it runs the body and commits ``[memo insert, (run
  record insert), data writes and checks]`` at once;
- a duplicate or crashed-and-retried execution meets the run record (the commit reports it),
  switches to replay, and from then on reads each memo first, so finished steps cost one read and
  never run again;
- two live executions race harmlessly: one memo insert wins, the other commit fails as a whole and
  returns the winner's memo;
- a commit whose answer was lost is retried as is and meets its own memo.

Every variant (``run``, ``submit``, a worker's resume, an operator's abort) is one :class:`Plan`
given at construction: the execution alone changes its state. Data conflicts rerun the body with
jittered exponential backoff (tenacity), bounded, then :class:`ConflictError`.

The execution never calls a store: it is a generator that yields requests
(:mod:`idemflow.core.requests`) and is sent their answers. :func:`idemflow.engine.drive.drive`
carries them out on a blocking store (``run``), :func:`idemflow.engine.drive_asyncio.adrive` on an
asynchronous one (``arun``): one algorithm for both APIs.

:class:`Execution` builds and owns the engine's parts, each with one job and its own state
(``docs/architecture.md``): the cursor (step number, what is known of the request), the store calls
under a step's deadline, the run record, the deferred commit, the memos, the stepper (one step), the
coordinator (timers, children, messages), the publisher (events, streams), the compensator, the
outcome's writer and, on top, the interpreter. It runs the request to its outcome: restarts,
compensation after an abort, a step's error as the caller wants it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

from idemflow import telemetry
from idemflow.compensation.compensator import Compensator
from idemflow.core.effect_keys import idempotency_key
from idemflow.core.plan import (
    DEFAULT_PLAN,
    Aborting,
    AtCheckpoint,
    Cancelled,
    Checkpointed,
    Finished,
    OtherVersion,
    Plan,
    Renewed,
    Submission,
    Suspended,
)
from idemflow.core.policy import DEFAULT_POLICY, RetryPolicy
from idemflow.core.requests import CommitCache, Steps
from idemflow.engine.branches import Branches
from idemflow.engine.coordinator import Coordinator
from idemflow.engine.cursor import Cursor
from idemflow.engine.deferred import DeferredCommit, Restart
from idemflow.engine.given import Given, log
from idemflow.engine.in_place_retry import INFRASTRUCTURE
from idemflow.engine.interpreter import ON_ABORT, Interpreter
from idemflow.engine.journal import Journal
from idemflow.engine.memo_reader import AbortWorkflow, MemoReader
from idemflow.engine.monad import Call, Node, Start
from idemflow.engine.outcome import OutcomeWriter
from idemflow.engine.publisher import Publisher
from idemflow.engine.renewal import Renewal, next_call, next_plan, switch
from idemflow.engine.run_record import RunRecorder
from idemflow.engine.stepper import Stepper
from idemflow.engine.store_calls import StoreCalls
from idemflow.engine.together import Together
from idemflow.engine.tx import Reader
from idemflow.errors import (
    CompensationError,
    LimitReachedError,
    NonDeterminismError,
    RequestCancelledError,
    StepFailedError,
)
from idemflow.keys import memo_prefix
from idemflow.records import RunRecord, RunStatus, run_ref
from idemflow.serialization import JSON
from idemflow.stores.base import Capabilities, Delete, RowRef

__all__ = [
    "DEFAULT_PLAN",
    "DEFAULT_POLICY",
    "Aborting",
    "AtCheckpoint",
    "Cancelled",
    "Checkpointed",
    "Execution",
    "Finished",
    "OtherVersion",
    "Plan",
    "Renewed",
    "RetryPolicy",
    "Submission",
    "Suspended",
    "idempotency_key",
]


class Execution:
    """One execution of one request: interprets nodes, numbers and commits steps.

    Built from one frozen :class:`~idemflow.core.plan.Plan`; ``reader`` is where
    step bodies read: the blocking store itself, or None on an event loop,
    where a body's reads are fetched by the driver and the body runs again.
    Its parts are the only writers of its state; callers read what
    :meth:`run` returns or raises.
    """

    __slots__ = (
        "_calls",
        "_compensator",
        "_cursor",
        "_deferred",
        "_given",
        "_interpreter",
        "_journal",
        "_outcome",
        "_publisher",
        "_recorder",
    )

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
            telemetry.enabled(),
            log.isEnabledFor(logging.DEBUG),
        )
        self._given = given
        self._cursor = cursor = Cursor(plan.resume)
        self._calls = calls = StoreCalls(given, cursor)
        self._recorder = recorder = RunRecorder(given, cursor, calls)
        memos = MemoReader(given, cursor, calls, recorder)
        self._deferred = deferred = DeferredCommit(given, cursor, calls, memos)
        self._journal = journal = Journal(given, cursor)
        stepper = Stepper(given, cursor, calls, memos, recorder, deferred, journal)
        coordinator = Coordinator(given, cursor, calls, memos, recorder, journal, stepper, _run_child)
        self._compensator = compensator = Compensator(
            given, cursor, stepper, deferred, _abort_child, coordinator.hold_until
        )
        self._outcome = OutcomeWriter(given, cursor, calls, recorder, deferred, memos, journal)
        self._publisher = publisher = Publisher(given, cursor, stepper)
        branches = Branches(cursor, stepper, calls)
        together = Together(given, cursor, calls, memos, recorder, journal, stepper, coordinator, branches)
        self._interpreter = Interpreter(
            given, cursor, recorder, deferred, journal, stepper, coordinator, compensator, publisher, together
        )

    @property
    def step(self) -> int:
        """Number of the last step begun."""
        return self._cursor.step

    @property
    def step_name(self) -> str:
        """What the last step begun is (its name or kind), for a note naming it."""
        return self._cursor.identity

    @property
    def record_ref(self) -> RowRef:
        """Where this request's run record lives."""
        return self._given.run_ref

    @property
    def workflow(self) -> str:
        return self._given.workflow

    @property
    def request_id(self) -> str:
        return self._given.request_id

    @property
    def fingerprint(self) -> str:
        return self._given.fingerprint

    @property
    def aliases(self) -> tuple[str, ...]:
        """Other fingerprints of the same input (the call as written, as 0.1.0 fingerprinted it)."""
        return self._given.aliases

    @property
    def capabilities(self) -> Capabilities:
        return self._given.capabilities

    @property
    def policy(self) -> RetryPolicy:
        return self._given.policy

    @property
    def clock(self) -> Callable[[], float]:
        return self._given.clock

    @property
    def plan(self) -> Plan:
        """What this execution was asked to do (read-only: only the engine's parts change its state)."""
        return self._given.plan

    def run(self, node: Node) -> Steps[RunRecord]:
        """Run to the end (completed, or aborted and compensated) and return the outcome.

        Raises :class:`Checkpointed` and :class:`OtherVersion` to the caller,
        and, under ``plan.step_errors``, :class:`StepFailedError` for a step's error. A request an
        operator cancelled raises :class:`Cancelled` where the plan stops for it, else
        :class:`~idemflow.errors.RequestCancelledError`.
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
                yield CommitCache([Delete(self._recorder.outbox_ref())])  # written before the claim
            return finished.record
        except Cancelled as cancelled:
            if given.plan.stop_if_cancelled:  # a worker's: it drops the delivery
                raise
            reason = cancelled.record.cancel_reason
            raise RequestCancelledError(given.workflow, given.request_id, reason) from None
        except (NonDeterminismError, LimitReachedError, *INFRASTRUCTURE):
            raise
        except Exception as exc:
            if not given.plan.step_errors:
                raise
            undone = isinstance(exc, CompensationError) and exc.__cause__ is not None
            error = exc.__cause__ if undone else exc
            cause = f"{type(error).__name__}: {error}"
            identity = cursor.identity
            if isinstance(exc, CompensationError) and exc.name == ON_ABORT:
                identity = f"{ON_ABORT} {identity}"  # a notification's: the worker never fails it
            raise StepFailedError(
                given.workflow, given.request_id, cursor.step, identity, cause, cursor.retry, error
            ) from exc

    def _settled(self, node: Node) -> Steps[RunRecord]:
        """The workflow run to its end, compensated if it aborted, and its outcome recorded."""
        submission = self._given.plan.submission
        if submission is not None and submission.held is not None:
            yield from self._interpreter.checkpoint()  # a delayed submission: claimed, nothing run
        try:
            try:
                value = yield from self._interpreter.evaluate(node)
            except Renewal as renewal:  # continue_as_new: the next incarnation is the caller's to run
                return (
                    yield from switch(self._given, self._cursor, self._calls, self._recorder, renewal.node)
                )
            # An operator's abort met at a timer right before the end aborts here too (or the switch).
            return (yield from self._outcome.finish(RunStatus.COMPLETED, result=value))
        except AbortWorkflow as abort:
            reached = self._cursor.step
            yield from self._compensator.compensate(abort.reason, self._interpreter.workflow_retry)
            yield from self._notified(abort.reason, reached)
            return (yield from self._outcome.finish(RunStatus.ABORTED, reason=abort.reason))

    def _notified(self, reason: JSON, reached: int) -> Steps[None]:
        """The workflow's ``on_abort``, once its compensations ran: a notification, which never
        changes the outcome. A worker's execution raises its failure for the next attempt (a
        delayed continuation) until the worker gives up on it and aborts it again (a plan of its
        own, :func:`~idemflow.async_worklist.aborts.abort_steps`); everywhere else, and then, the
        failure is logged and the request ends ``aborted``: its undo is done, and no caller
        waits on a mail server (an operator's abort tries each of its steps once)."""
        given = self._given
        try:
            yield from self._interpreter.on_abort(reason, reached)
        except CompensationError as failed:
            if failed.name != ON_ABORT or given.plan.step_errors:  # a worker's: its next attempt
                raise
            log.warning(
                "on_abort failed; the request is aborted all the same (its compensations ran): %s",
                failed.cause,
                extra={"workflow": given.workflow, "request_id": given.request_id, "step": failed.step},
            )

    def _restart(self, restart: Restart) -> Steps[None]:
        """Start the workflow over after a deferred commit did not apply: replaying what is
        committed (memos decide), and committing each step at once from now on."""
        if restart.existing is not None:  # another execution claimed the request: check it
            yield from self._recorder.meet(restart.existing)
        self._cursor.restart()
        self._deferred.drop()
        self._journal.restart()
        self._compensator.restart()
        self._publisher.restart()
        self._interpreter.restart()


def _abort_child(given: Given, node: Start, reason: JSON) -> Steps[None]:
    """A child started with ``on_parent_abort="abort"``: abort it as an operator would (its
    memos decide: a child that finished meanwhile is left as it ended)."""
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


def _run_child(given: Given, call: Call, request_id: str, record: RunRecord) -> Steps[None]:
    """Under ``run``, a child nobody finished yet runs here, as its own request."""
    plan = Plan(
        version=record.version,
        resume=True,
        durable_outcome=True,
        incarnation=record.incarnation,
        tags=record.tags,
        stop_if_cancelled=True,  # a child is cancelled as a worker's request is: before an outside call
    )
    while True:
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
        try:
            yield from inner.run(call)
            return
        except Renewed as renewed:  # the child continued as new: its next incarnation runs here too
            record = renewed.record
            call, plan = next_call(call, record), next_plan(plan, record)
