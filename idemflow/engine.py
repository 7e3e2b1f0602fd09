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
"""

from __future__ import annotations

import contextlib
import hashlib
import time
import uuid
from collections.abc import Callable, Coroutine, Generator
from typing import Any, assert_never

from idemflow import telemetry
from idemflow._execution import Done, Restart, _log
from idemflow._io import CallOut, CommitCache, Sleep, Steps
from idemflow._stepping import AbortWorkflow
from idemflow._waiting import Waiting
from idemflow.errors import (
    ChildAborted,
    CompensationFailed,
    ConflictError,
    IdemflowError,
    InvalidInputError,
    NonDeterminismError,
    StepFailedError,
    StoreError,
)
from idemflow.keys import RUNS_TABLE, compensation_tag, late_undo_tag
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
from idemflow.records import MEMO_AT, RUN_AT, RunRecord, RunStatus, new_incarnation
from idemflow.serialization import JSON, encode, sorted_keys
from idemflow.step_retry import StepRetry
from idemflow.stores.base import Committed, Delete, Insert, Op, Put
from idemflow.tx import StepAborted, Tx

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

_INFRASTRUCTURE = (StoreError, ConflictError)
"""Errors of the store, not of a step: never a reason to fail a request."""


def idempotency_key(workflow: str, request_id: str, step: int) -> str:
    """The stable key an effect passes to its outside service (hex sha256)."""
    return hashlib.sha256(b"effect\x00" + _digest(workflow, request_id, step)).hexdigest()


def _digest(workflow: str, request_id: str, step: int) -> bytes:
    return hashlib.sha256(f"{workflow}\x00{request_id}\x00{step}".encode()).digest()


_NOT_CALLED = object()
"""No call out was answered in this execution's attempt at the effect."""


def _settle(tx: Tx) -> None:
    tx.settle()  # a duplicate of a finished request stops here, before the call out


class Execution(Waiting):
    """One execution of one request: interprets nodes, numbers and commits steps.

    Built from one frozen :class:`~idemflow.plan.Plan` (see
    :class:`~idemflow._execution.ExecutionBase` for the arguments); its
    layers (:mod:`idemflow._execution`) are the only writers of its state.
    """

    # -- the whole request ------------------------------------------------

    def run(self, node: Node) -> Steps[RunRecord]:
        """Run to the end (completed, or aborted and compensated) and return the outcome.

        Raises :class:`Checkpointed` and :class:`OtherVersion` to the caller,
        and, under ``plan.step_errors``, :class:`StepFailedError` for a step's error.
        """
        if not self._observed:
            return self._run(node)  # no generator frame of its own
        return self._observed_run(node)

    def _observed_run(self, node: Node) -> Steps[RunRecord]:
        started = time.monotonic()
        with (
            telemetry.span(
                "idemflow.run", workflow=self.workflow, request_id=self.request_id, version=self.plan.version
            )
            if self._traced
            else contextlib.nullcontext()
        ):
            record = yield from self._run(node)
        if self._logged:
            answered = "ran" if self._commits else "answered from earlier executions"
            self._log_event("run", status=record.status.value, outcome=answered, started=started)
        return record

    def _run(self, node: Node) -> Steps[RunRecord]:
        record = yield from self._outcome(node)
        if not self._commits and self.plan.observe_replay is not None:
            self.plan.observe_replay()
        return record

    def _outcome(self, node: Node) -> Steps[RunRecord]:
        try:
            while True:
                try:
                    return (yield from self._settled(node))
                except Restart as restart:
                    yield from self._restart(restart)
        except Finished as finished:
            if self.plan.submission is not None and not self.capabilities.cross_partition_commit:
                yield CommitCache([Delete(self._outbox_ref())])  # written before the claim
            return finished.record
        except (NonDeterminismError, *_INFRASTRUCTURE):
            raise
        except Exception as exc:
            if not self.plan.step_errors:
                raise
            undone = isinstance(exc, CompensationFailed) and exc.__cause__ is not None
            error = exc.__cause__ if undone else exc
            cause = f"{type(error).__name__}: {error}"
            raise StepFailedError(
                self.workflow, self.request_id, self._step, self._identity, cause, self._step_retry, error
            ) from exc

    def _settled(self, node: Node) -> Steps[RunRecord]:
        """The workflow run to its end, compensated if it aborted, and its outcome recorded."""
        try:
            value = yield from self.evaluate(node)
        except AbortWorkflow as abort:
            reached = self._step
            yield from self._compensate(abort.reason)
            yield from self._aborted(abort.reason, reached)
            return (yield from self._finish(RunStatus.ABORTED, reason=abort.reason))
        return (yield from self._finish(RunStatus.COMPLETED, result=value))

    def _restart(self, restart: Restart) -> Steps[None]:
        """Start the workflow over after a deferred commit did not apply: replaying what is
        committed (memos decide), and committing each step at once from now on."""
        self._fold = False
        if restart.existing is not None:  # another execution claimed the request: check it
            yield from self._on_run_record(restart.existing)
        self._replaying = self._replaying or self._run_known
        self._step, self._identity, self._extra = 0, "", None
        self._done, self._pending, self._defer, self._cleaning = [], None, False, False
        self._workflow_call, self._workflow_retry, self._step_retry = None, None, None
        if self._journal is not None:
            self._journal = []

    # -- interpretation -------------------------------------------------

    def evaluate(self, node: Node) -> Steps[Any]:
        """Run a description to its value (an explicit stack keeps long bind chains flat)."""
        stack: list[Callable[[Any], Idem[Any]]] = []
        while True:
            if self._pending is not None and type(node) is not Bind and type(node) is not Pure:
                yield from self._flush()  # what comes next must not run before it is committed
            match node:
                case Bind(source, then):
                    stack.append(then)
                    node = source
                    continue
                case Atomic():
                    self._defer = self._fold  # its commit may wait for the next move (Pending)
                    try:
                        value = yield from self._atomic(node)
                    finally:
                        self._defer = False
                case Pure(value):
                    pass
                case Call():
                    value = yield from self._call(node)
                case Effect(compensate=undo):
                    # Not one with an undo: an execution that sees its call undone must know it
                    # made the call (a late answer is undone again), which a restart would forget.
                    self._defer = self._fold and undo is None
                    try:
                        value = yield from self._table_less(node)
                    finally:
                        self._defer = False
                case Now() | Uuid4() | Random() | Abort() | Checkpoint():
                    value = yield from self._table_less(node)
                case Deadline() | Until() | Start() | WaitFor() | Post() | Receive():
                    value = yield from self._coordinate(node)
                case _:
                    raise InvalidInputError(
                        f"workflow {self.workflow!r} met {node!r}, not an Idem description"
                    )
            if not stack:
                return value
            following = stack.pop()(value)
            if not isinstance(following, Idem):
                raise InvalidInputError(
                    f"workflow {self.workflow!r}: a bind function returned {type(following).__name__}, "
                    "not an Idem"
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
                if self._pending is not None:
                    yield from self._flush()
                if type(node) is Atomic:
                    # Its commit may wait for the workflow's next move (see Pending): the last
                    # step's then carries the outcome.
                    self._defer = self._fold
                    step = self._atomic(node)
                else:
                    step = self.evaluate(node)
                try:
                    value = yield from step
                except ChildAborted as aborted:  # the workflow may catch it where it waited
                    yielded = generator.throw(aborted)
                    continue
                finally:
                    self._defer = False
                try:
                    yielded = generator.send(value)
                except StopIteration:
                    raise
                except Exception:  # the workflow's own error: the step it ran from stands
                    if self._pending is not None:
                        yield from self._flush()
                    raise
        except StopIteration as stop:
            return stop.value
        finally:
            generator.close()

    def _atomic(self, node: Atomic) -> Steps[Any]:
        self._step += 1
        step = self._step
        identity = "atomic " + node.name
        retry = node.retry if node.retry is not None else self._workflow_retry
        self._step_retry = retry
        if retry is None or not self.plan.retry_in_place:  # the hot path: no closure
            value = yield from self._forward(node.table, node.partition, identity, node.body, None)
        else:
            value = yield from self._in_place(
                retry,
                lambda again: self._forward(
                    node.table, node.partition, identity, node.body, None, again=again
                ),
            )
        if node.compensate is not None:
            self._done.append(Done(step, node, value))
        return value

    def _tried(self, retry: StepRetry | None, attempt: Callable[[bool], Steps[Any]]) -> Steps[Any]:
        """``attempt(False)``, or under a policy that retries here, :meth:`_in_place` (a plain
        function: no generator frame of its own)."""
        if retry is None or not self.plan.retry_in_place:
            return attempt(False)
        return self._in_place(retry, attempt)

    def _in_place(self, retry: StepRetry, attempt: Callable[[bool], Steps[Any]]) -> Steps[Any]:
        """``attempt`` until it returns or ``retry`` ends (then its error is raised), waiting the
        policy's backoff between attempts; each attempt is the same step (same number and memo)."""
        step, failures, first = self._step, 0, time.monotonic()
        while True:
            self._step = step
            try:
                return (yield from attempt(failures > 0))
            except (NonDeterminismError, *_INFRASTRUCTURE):
                raise
            except Exception as exc:
                failures += 1
                elapsed = time.monotonic() - first
                wait = retry.next_delay(failures, exc, elapsed=elapsed)
                budget = self.plan.in_place_for
                if wait is None or (budget is not None and elapsed + wait > budget):
                    raise
                yield Sleep(wait, self.policy.conflicts.sleep)

    def _table_less(self, node: TableLess) -> Steps[Any]:
        match node:
            case Now():
                clock = self.clock
                return (yield from self._memoized("now", lambda tx: clock()))
            case Uuid4() | Random():
                self._step += 1
                if self._noting:
                    self._note("", "", type(node).__name__.lower())
                digest = _digest(self.workflow, self.request_id, self._step)
                if isinstance(node, Uuid4):
                    return str(uuid.UUID(bytes=digest[:16], version=4))
                return int.from_bytes(digest[:7], "big") / float(1 << 56)
            case Effect(label, function, lease, compensate, retry, timeout):
                self._step += 1
                step = self._step
                key = idempotency_key(self.workflow, self.request_id, step)
                call = CallOut(function, key, lease, timeout, label)
                identity = "effect " + label
                retry = retry if retry is not None else self._workflow_retry
                self._step_retry = retry
                self._called = _NOT_CALLED
                try:
                    value = yield from self._tried(
                        retry,
                        lambda again: self._forward(
                            RUNS_TABLE, self.request_id, identity, _settle, call, again=again
                        ),
                    )
                except AbortWorkflow:
                    # The request was undone at this very call: it may have been made (in flight
                    # here or elsewhere, or an attempt that timed out). Undo it by its key; with
                    # its answer if this execution has it, else None (the outcome is unknown).
                    if compensate is not None:
                        late = self._called is not _NOT_CALLED
                        self._done.append(Done(step, node, self._called if late else None, late))
                    raise
                if compensate is not None:
                    self._done.append(Done(step, node, value))
                return value
            case Abort(reason):
                return (yield from self._memoized("abort", lambda tx: tx.abort(reason)))
            case Checkpoint():
                yield from self._checkpoint()
                return None
            case _:
                assert_never(node)

    def _checkpoint(self) -> Steps[None]:
        if self.plan.observe_checkpoint is not None:
            self.plan.observe_checkpoint(self._step)
        if self._step < len(self.plan.expected):  # journaled steps the code no longer reaches
            table, partition, identity = self.plan.expected[self._step]
            recorded = f"{identity} on {table}/{partition}"
            raise NonDeterminismError(
                self.workflow, self.request_id, self._step + 1, repr(recorded), "'checkpoint'"
            )
        if self.plan.at_checkpoint is AtCheckpoint.STOP:
            if not self._run_known:
                yield from self._claim()  # a worker accepts only requests that were submitted
            raise Checkpointed(tuple(self._journal or ()), duplicate=self._copy, claimed_at=self._started_at)

    def _compensate(self, reason: JSON = None) -> Steps[None]:
        """Undo the completed steps in reverse order, each an idempotent step of its own."""
        if self._pending is not None:
            yield from self._flush()
        for done in reversed(self._done):
            node, result = done.node, done.result
            if isinstance(node, Effect):
                yield from self._undo_call(done.step, node, result, done.late)
            elif isinstance(node, Start):
                yield from self._abort_child(node, reason)
            else:
                yield from self._undo_atomic(done.step, node, result)

    def _aborted(self, reason: JSON, reached: int) -> Steps[None]:
        """The workflow's ``on_abort`` steps, after its compensations: numbered on from the step
        that aborted, ``reached`` (the same on every replay), never themselves replaced by an abort."""
        call = self._workflow_call
        if call is None or call.on_abort is None:
            return
        self._step, self._cleaning = reached, True
        try:
            produced = call.on_abort(reason, *call.args, **call.kwargs)
            if isinstance(produced, Idem):
                yield from self.evaluate(produced.node)
            elif isinstance(produced, Generator | Coroutine):
                yield from self._drive(call.name + " on_abort", produced)
        except (NonDeterminismError, *_INFRASTRUCTURE):
            raise
        except (Exception, AbortWorkflow) as exc:
            cause = repr(exc) if isinstance(exc, Exception) else f"aborted again: {exc.reason!r}"
            raise CompensationFailed(self.workflow, self.request_id, self._step, "on_abort", cause) from exc
        finally:
            self._cleaning = False

    def _undo_atomic(self, step: int, node: Atomic, result: Any) -> Steps[None]:
        undo = node.compensate
        assert undo is not None
        retry = node.retry if node.retry is not None else self._workflow_retry

        def body(tx: Tx) -> Any:
            return undo(tx, result)

        identity = "compensate " + node.name
        self._step, self._identity, self._extra, self._step_retry = step, identity, None, retry
        tag = compensation_tag(step)

        def attempt(_again: bool) -> Steps[Any]:
            return self._run_step(node.table, node.partition, tag, identity, body, False)

        try:
            yield from self._tried(retry, attempt)
        except IdemflowError:
            raise
        except (Exception, StepAborted) as exc:
            cause = f"aborted: {exc.reason!r}" if isinstance(exc, StepAborted) else repr(exc)
            raise CompensationFailed(self.workflow, self.request_id, step, node.name, cause) from exc

    def _abort_child(self, node: Start, reason: JSON) -> Steps[None]:
        """A child started with ``on_parent_abort="abort"``: abort it as an operator would (its
        memos decide: a child that finished meanwhile is left as it ended)."""
        plan = Plan(
            version=node.version,
            resume=True,
            abort=Aborting({"parent aborted": reason}),
            durable_outcome=True,
            retry_in_place=self.plan.retry_in_place,
        )
        inner = Execution(
            self.capabilities,
            node.call.name,
            node.request_id,
            node.fingerprint,
            self.policy,
            self.clock,
            plan,
            self._reader,
            aliases=node.aliases,
        )
        yield from inner.run(node.call)

    def _undo_call(self, step: int, node: Effect, result: Any, late: bool = False) -> Steps[None]:
        """Undo an outside call: ``undo(key, result)`` as an effect of its own, memoized at the
        call's compensation tag beside the run record (``late``: at a tag of its own, for a call
        answered after the request was undone at it, which the first undo may have missed)."""
        undo = node.compensate
        assert undo is not None
        identity = "compensate effect " + node.label

        def call_undo(key: str) -> Any:
            return undo(key, result)

        key = idempotency_key(self.workflow, self.request_id, step)  # the call's: undo finds it by it
        call = CallOut(call_undo, key, node.lease, node.timeout, "compensate " + node.label)
        tag = late_undo_tag(step) if late else compensation_tag(step)
        retry = node.retry if node.retry is not None else self._workflow_retry
        self._step, self._identity, self._extra, self._step_retry = step, identity, None, retry

        def attempt(_again: bool) -> Steps[Any]:
            return self._run_step(RUNS_TABLE, self.request_id, tag, identity, _settle, False, call)

        try:
            yield from self._tried(retry, attempt)
        except (NonDeterminismError, *_INFRASTRUCTURE):
            raise
        except Exception as exc:
            raise CompensationFailed(self.workflow, self.request_id, step, identity, repr(exc)) from exc

    def _run_child(self, call: Call, request_id: str, record: RunRecord) -> Steps[None]:
        """Under ``run``, a child nobody finished yet runs here, as its own request."""
        plan = Plan(version=record.version, resume=True, durable_outcome=True, incarnation=record.incarnation)
        inner = Execution(
            self.capabilities,
            call.name,
            request_id,
            record.fingerprint,
            self.policy,
            self.clock,
            plan,
            self._reader,
        )
        yield from inner.run(call)

    def _finish(self, status: RunStatus, result: JSON = None, reason: JSON = None) -> Steps[RunRecord]:
        """Record the outcome before the caller has it: in the last step's own commit where that
        step's commit waited for it (:class:`Pending`), else in a commit of its own. Strict
        encoding guarantees the result equals what duplicates read back; a result holding dicts
        is returned as read back (keys sorted), so the first answer and every duplicate's
        serialise to the same bytes."""
        self._until = self.policy.until()
        if type(result) is dict or type(result) is list:
            result = sorted_keys(result)
        incarnation = self._incarnation
        if incarnation is None and not self._run_known:  # a request with no step claims here
            incarnation = new_incarnation()
        record = RunRecord(
            self.fingerprint,
            RunStatus.RUNNING,
            version=self.plan.version,
            started_at=self._claimed_at(),
            incarnation=incarnation,
        ).finished(status, self.clock(), result=result, reason=reason)
        value: JSON = record.to_json()
        text = encode(value, f"result of workflow {self.workflow!r}", envelope=1)
        pending, self._pending = self._pending, None
        if pending is not None and pending.claims:  # the request's only step: its outcome says all
            outcome_insert = Insert(self._run_ref, value, text, self._expiry())
            if pending.leased:  # executions waiting on the lease watch for the memo: keep it
                kept = [pending.ops[MEMO_AT], outcome_insert, *pending.ops[RUN_AT + 1 :]]
                yield from self._commit_deferred(kept, pending, RUN_AT)
            else:
                yield from self._commit_deferred([outcome_insert, *pending.ops[RUN_AT + 1 :]], pending, 0)
            return record
        if not self._run_known:
            insert = Insert(self._run_ref, value, text, self._expiry())
            outcome = yield from self._commit([insert], self._run_ref)
            if isinstance(outcome, Committed):
                self._run_known = True
                return record
            yield from self._on_run_record(outcome.failures[0].existing)
        ops: list[Op] = [Put(self._run_ref, value, text, expires_at=self._expiry())]
        cleanup: list[Op] = []
        cross = self.capabilities.cross_partition_commit
        if self.plan.submission is not None:  # nothing left to relay
            (ops if cross and self.plan.durable_outcome else cleanup).append(Delete(self._outbox_ref()))
        parent = self.plan.parent
        wake = None
        if parent is not None:  # its wait must hear of this outcome, whatever crashes next
            wake = self._wake(parent, f"child {self.workflow}|{self.request_id}")
            if cross:
                ops.append(wake)
            else:
                yield from self._commit([wake], wake.ref)
        if pending is not None:
            if self._foldable(ops) and len(pending.ops) + len(ops) <= self.capabilities.max_ops_per_commit:
                yield from self._commit_deferred([*pending.ops, *ops], pending, None)
                ops = []
            else:
                yield from self._commit_deferred(pending.ops, pending, None)
        if ops:
            yield from self._settle_outcome(ops)
        if cleanup:
            yield CommitCache(cleanup)
        if parent is not None and wake is not None:
            yield from self._announce(parent, wake.ref)
        return record

    def _settle_outcome(self, ops: list[Op]) -> Steps[None]:
        """Write the outcome (Puts and Deletes that expect nothing: applied). Where nothing but
        the caller relies on it (``run``: every step is committed, a duplicate replays them), a
        store that stays unreachable costs the record, not the answer."""
        if self.plan.durable_outcome or self.plan.parent is not None:
            yield from self._commit(ops, self._run_ref)
            return
        try:
            yield from self._commit(ops, self._run_ref)
        except StoreError as lost:
            _log.warning(
                "outcome not recorded (duplicates replay the steps instead): %s",
                lost,
                extra={"workflow": self.workflow, "request_id": self.request_id},
            )
