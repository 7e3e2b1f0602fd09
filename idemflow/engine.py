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
import dataclasses
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Generator, Sequence
from dataclasses import dataclass
from typing import Any, assert_never

from idemflow import telemetry
from idemflow._io import (
    CallOut,
    Commit,
    CommitCache,
    NeedRows,
    Prefetched,
    Read,
    ReadMany,
    Steps,
    Turn,
)
from idemflow._lease import acquire
from idemflow._limits import check_commit
from idemflow._waiting import Waiting
from idemflow.errors import (
    ChildAborted,
    CompensationFailed,
    ConflictError,
    IdemflowError,
    IdempotencyKeyReuseError,
    InvalidInputError,
    InvalidValueError,
    LimitExceededError,
    NonDeterminismError,
    StepFailedError,
    StoreError,
    TransientStoreError,
)
from idemflow.keys import (
    RUNS_TABLE,
    compensation_tag,
    lease_tag,
    memo_prefix,
    step_tag,
)
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
    JournalEntry,
    OtherVersion,
    Plan,
    Submission,
    Suspended,
)
from idemflow.policy import DEFAULT_POLICY, DataConflict, RetryPolicy, resent, retried
from idemflow.records import (
    MEMO_AT,
    RUN_AT,
    Memo,
    OutboxEntry,
    RunRecord,
    RunStatus,
    memo_row,
    outbox_ref,
    run_ref,
)
from idemflow.serialization import JSON, encode, sorted_keys
from idemflow.stores.base import (
    Capabilities,
    CommitOutcome,
    Committed,
    Cond,
    Delete,
    Insert,
    Op,
    Put,
    Row,
    RowRef,
)
from idemflow.tx import Reader, StepAborted, Tx

__all__ = [
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
]


class _AbortWorkflow(BaseException):
    """A step aborted (now or in an earlier execution): unwind to compensate."""

    def __init__(self, reason: JSON) -> None:
        super().__init__(reason)
        self.reason = reason


class _RunRecordSeen(BaseException):
    """The run record, read beside a first step's first row, exists: stop the body."""

    def __init__(self, row: Row) -> None:
        super().__init__()
        self.row = row


def _stop_if_present(row: Row | None) -> None:
    if row is not None:
        raise _RunRecordSeen(row)


@dataclass(frozen=True, slots=True)
class _Done:
    """A committed step that registered a compensation."""

    step: int
    node: Atomic
    result: Any


_RETRY = object()

_INFRASTRUCTURE = (StoreError, ConflictError)
"""Errors of the store, not of a step: never a reason to fail a request."""


_log = logging.getLogger("idemflow.engine")
"""Per-run and per-step events at DEBUG; nothing is formatted unless that level is on."""


def idempotency_key(workflow: str, request_id: str, step: int) -> str:
    """The stable key an effect passes to its outside service (hex sha256)."""
    return hashlib.sha256(b"effect\x00" + _digest(workflow, request_id, step)).hexdigest()


def _digest(workflow: str, request_id: str, step: int) -> bytes:
    return hashlib.sha256(f"{workflow}\x00{request_id}\x00{step}".encode()).digest()


def _settle(tx: Tx) -> None:
    tx.settle()  # a duplicate of a finished request stops here, before the call out


class Execution(Waiting):
    """One execution of one request: interprets nodes, numbers and commits steps.

    ``reader`` is where step bodies read: the blocking store itself, or None
    on an event loop, where a body's reads are fetched by the driver
    (:class:`~idemflow._io.Prefetched`) and the body runs again.
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
        """Other fingerprints of the same input (the call as written, as 0.1.0 fingerprinted it)."""
        self.policy = policy
        self.clock = clock
        self.plan = plan
        self._reader = reader
        self._step = 0
        self._identity = ""
        self._until = policy.until()
        """When the current step (or the outcome's write) stops retrying: ``time.monotonic()``."""
        self._run_known = plan.resume
        self._replaying = plan.resume
        self._done: list[_Done] = []
        self._journal: list[JournalEntry] | None = [] if plan.at_checkpoint is AtCheckpoint.STOP else None
        self._noting = self._journal is not None or bool(plan.expected)
        self._traced = telemetry.enabled()
        self._logged = _log.isEnabledFor(logging.DEBUG)
        self._observed = self._traced or self._logged
        """Decided once per execution: the hot path then pays one attribute check."""
        self._attempts = 0
        """Attempts of the current step beyond its first (conflicts, transient reads): for its log."""
        self._commits = 0
        """Steps this execution committed: none means the outcome is an earlier execution's."""
        self._run_ref = run_ref(workflow, request_id)
        self._memo_prefix = memo_prefix(workflow, request_id)
        self._extra: Callable[[], Steps[list[Op]]] | None = None
        """Operations beyond the step's partition that commit with the current step (a child's
        claim, a message), recomputed on every attempt."""

    @property
    def step(self) -> int:
        """Number of the last step begun."""
        return self._step

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

    def _log_event(self, event: str, *, started: float, **fields: Any) -> None:
        """One structured engine log line (DEBUG): JSON text, and the same fields on the record."""
        extra = {
            "workflow": self.workflow,
            "version": self.plan.version,
            "request_id": self.request_id,
            **fields,
            "seconds": round(time.monotonic() - started, 6),
        }
        _log.debug(json.dumps({"event": event, **extra}, default=str), extra=extra)

    def _run(self, node: Node) -> Steps[RunRecord]:
        record = yield from self._outcome(node)
        if not self._commits and self.plan.observe_replay is not None:
            self.plan.observe_replay()
        return record

    def _outcome(self, node: Node) -> Steps[RunRecord]:
        try:
            try:
                value = yield from self.evaluate(node)
            except _AbortWorkflow as abort:
                yield from self._compensate()
                return (yield from self._finish(RunStatus.ABORTED, reason=abort.reason))
            return (yield from self._finish(RunStatus.COMPLETED, result=value))
        except Finished as finished:
            if self.plan.submission is not None and not self.capabilities.cross_partition_commit:
                yield CommitCache([Delete(self._outbox_ref())])  # written before the claim
            return finished.record
        except (NonDeterminismError, *_INFRASTRUCTURE):
            raise
        except Exception as exc:
            if not self.plan.step_errors:
                raise
            cause = f"{type(exc).__name__}: {exc}"
            raise StepFailedError(self.workflow, self.request_id, self._step, self._identity, cause) from exc

    # -- interpretation -------------------------------------------------

    def evaluate(self, node: Node) -> Steps[Any]:
        """Run a description to its value (an explicit stack keeps long bind chains flat)."""
        stack: list[Callable[[Any], Idem[Any]]] = []
        while True:
            match node:
                case Bind(source, then):
                    stack.append(then)
                    node = source
                    continue
                case Atomic():
                    value = yield from self._atomic(node)
                case Pure(value):
                    pass
                case Call():
                    value = yield from self._call(node)
                case Now() | Uuid4() | Random() | Effect() | Abort() | Checkpoint():
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
                step = self._atomic(node) if type(node) is Atomic else self.evaluate(node)
                try:
                    value = yield from step
                except ChildAborted as aborted:  # the workflow may catch it where it waited
                    yielded = generator.throw(aborted)
                    continue
                yielded = generator.send(value)
        except StopIteration as stop:
            return stop.value
        finally:
            generator.close()

    def _atomic(self, node: Atomic) -> Steps[Any]:
        self._step += 1
        step = self._step
        value = yield from self._forward(node.table, node.partition, "atomic " + node.name, node.body, None)
        if node.compensate is not None:
            self._done.append(_Done(step, node, value))
        return value

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
            case Effect(label, function, lease):
                key = idempotency_key(self.workflow, self.request_id, self._step + 1)
                return (yield from self._memoized("effect " + label, _settle, CallOut(function, key, lease)))
            case Abort(reason):
                return (yield from self._memoized("abort", lambda tx: tx.abort(reason)))
            case Checkpoint():
                yield from self._checkpoint()
                return None
            case _:
                assert_never(node)

    def _memoized(
        self, identity: str, body: Callable[[Tx], Any], call_out: CallOut | None = None
    ) -> Steps[Any]:
        """A step with no table of its own: its memo sits beside the run record."""
        self._step += 1
        return self._forward(RUNS_TABLE, self.request_id, identity, body, call_out)

    def _forward(
        self,
        table: str,
        partition: str,
        identity: str,
        body: Callable[[Tx], Any],
        call_out: CallOut | None,
        extra: Callable[[], Steps[list[Op]]] | None = None,
    ) -> Steps[Any]:
        """The step's computation (a plain function: no generator frame of its own)."""
        if self.plan.abort is not None:  # memos still win: only a step never committed aborts
            reason = self.plan.abort.reason
            body, call_out, extra = (lambda tx: tx.abort(reason)), None, None
        self._identity, self._extra = identity, extra
        if self._noting:
            self._note(table, partition, identity)
        return self._run_step(table, partition, step_tag(self._step), identity, body, True, call_out)

    def _note(self, table: str, partition: str, identity: str) -> None:
        """Journal a forward step for the continuation, or check it against a resumed one's."""
        if self._journal is not None:
            self._journal.append((table, partition, identity))
        expected = self.plan.expected
        if self._step <= len(expected) and expected[self._step - 1] != (table, partition, identity):
            recorded = "{2} on {0}/{1}".format(*expected[self._step - 1])
            met = f"{identity} on {table}/{partition}"
            raise NonDeterminismError(self.workflow, self.request_id, self._step, repr(recorded), repr(met))

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
            raise Checkpointed(tuple(self._journal or ()))

    def _compensate(self) -> Steps[None]:
        """Undo the completed steps in reverse order, each an idempotent step of its own."""
        for done in reversed(self._done):
            node, result = done.node, done.result
            undo = node.compensate
            assert undo is not None

            def body(tx: Tx, undo: Any = undo, result: Any = result) -> Any:
                return undo(tx, result)

            self._step, self._identity, self._extra = done.step, "compensate " + node.name, None
            try:
                tag = compensation_tag(done.step)
                yield from self._run_step(node.table, node.partition, tag, self._identity, body, False)
            except IdemflowError:
                raise
            except (Exception, StepAborted) as exc:
                cause = f"aborted: {exc.reason!r}" if isinstance(exc, StepAborted) else repr(exc)
                raise CompensationFailed(self.workflow, self.request_id, done.step, node.name, cause) from exc

    # -- one step -------------------------------------------------------

    def _run_step(
        self,
        table: str,
        partition: str,
        tag: str,
        identity: str,
        body: Callable[[Tx], Any],
        abortable: bool,
        call_out: CallOut | None = None,
    ) -> Steps[Any]:
        """The computation that replays the step from its memo, or executes and commits it
        exactly once (a plain function: no generator frame of its own). A step whose
        body calls out (an effect) resends its commit on a transient error instead of rerunning:
        a rerun would call the outside service again."""
        memo_ref = RowRef(table, partition, self._memo_prefix + tag)
        self._until = self.policy.until()
        if not self._observed:
            return self._step_once(memo_ref, identity, body, abortable, call_out)
        return self._observed_step(memo_ref, identity, body, abortable, call_out)

    def _observed_step(
        self,
        memo_ref: RowRef,
        identity: str,
        body: Callable[[Tx], Any],
        abortable: bool,
        call_out: CallOut | None,
    ) -> Steps[Any]:
        """A step with its span (OpenTelemetry) and its DEBUG log line: committed, replayed or
        raised, with its attempts and duration."""
        fields = {
            "workflow": self.workflow,
            "request_id": self.request_id,
            "step": self._step,
            "identity": identity,
        }
        started, commits, self._attempts = time.monotonic(), self._commits, 0
        outcome = "raised"
        try:
            with telemetry.span("idemflow.step", **fields) if self._traced else contextlib.nullcontext():
                value = yield from self._step_once(memo_ref, identity, body, abortable, call_out)
            outcome = "committed" if self._commits > commits else "replayed"
            return value
        except _AbortWorkflow:
            outcome = "aborted"
            raise
        finally:
            if self._logged:
                self._log_event(
                    "step",
                    step=fields["step"],
                    identity=identity,
                    outcome=outcome,
                    attempt=self._attempts + 1,
                    started=started,
                )

    def _step_once(
        self,
        memo_ref: RowRef,
        identity: str,
        body: Callable[[Tx], Any],
        abortable: bool,
        call_out: CallOut | None,
    ) -> Steps[Any]:
        try:
            outcome = yield from self._attempt(memo_ref, identity, body, abortable, call_out)
        except TransientStoreError:  # the commit's send failed: rerun (the loop re-raises it last)
            if call_out is not None:  # resent until the deadline already; a rerun would call out again
                raise
            outcome = _RETRY
        if outcome is not _RETRY:
            return outcome
        retrying = self.policy.rerunning(self._until)
        try:
            return (
                yield from retried(
                    retrying, lambda: self._retry(memo_ref, identity, body, abortable, call_out)
                )
            )
        except DataConflict:
            attempts = retrying.statistics.get("attempt_number", 0) + 1
            raise ConflictError(
                self.workflow, self.request_id, self._step, memo_ref.table, memo_ref.partition, attempts
            ) from None

    def _retry(
        self,
        memo_ref: RowRef,
        identity: str,
        body: Callable[[Tx], Any],
        abortable: bool,
        call_out: CallOut | None,
    ) -> Steps[Any]:
        """One more attempt, in this process's turn on the partition (see :mod:`idemflow._gates`)."""
        self._attempts += 1
        if self._traced:
            telemetry.count(telemetry.CONFLICTS_RETRIED, self.workflow)
        give_back = yield Turn(memo_ref.table, memo_ref.partition, self._until)
        try:
            outcome = yield from self._attempt(memo_ref, identity, body, abortable, call_out)
        finally:
            give_back()
        if outcome is _RETRY:
            raise DataConflict
        return outcome

    def _attempt(
        self,
        memo_ref: RowRef,
        identity: str,
        body: Callable[[Tx], Any],
        abortable: bool,
        call_out: CallOut | None,
    ) -> Steps[Any]:
        while True:  # loops only when the commit revealed an existing run record
            if self._replaying:
                row = yield from self._read(memo_ref)
                if row is not None:
                    return self._memo_result(row, identity)
                self._replaying = False
            peek = None
            if not self._run_known:
                if not self.capabilities.cross_partition_commit:
                    yield from self._claim()
                    continue
                peek = (self._run_ref, _stop_if_present)
            reader = self._reader if self._reader is not None else Prefetched()
            tx = Tx(reader, memo_ref.table, memo_ref.partition, peek)
            try:
                while True:  # more than once only where reads are prefetched
                    try:
                        result = body(tx)
                        break
                    except NeedRows as need:
                        wanted: Sequence[RowRef] = need.refs
                    assert isinstance(reader, Prefetched)
                    reader.add(wanted, (yield ReadMany(wanted)))
                    tx = Tx(reader, memo_ref.table, memo_ref.partition, peek)
                if call_out is not None:
                    if call_out.lease is None:
                        result = yield call_out
                    else:
                        recorded = yield from self._leased(memo_ref, call_out.lease)
                        if recorded is not None:  # another execution made the call
                            return self._memo_result(recorded, identity)
                        try:
                            result = yield call_out
                        except Exception:  # a call that failed gives the lease up: a retry need not wait
                            with contextlib.suppress(TransientStoreError):  # else it ends by itself
                                yield from self._commit([Delete(self._lease_ref(memo_ref))], memo_ref)
                            raise
            except _RunRecordSeen as seen:
                yield from self._on_run_record(seen.row)  # returns only to replay
                continue
            except StepAborted as abort:
                if not abortable:
                    raise
                aborted, value = True, abort.reason
                data_ops: list[Op] = [*tx.read_checks()]
            except TransientStoreError:  # a read met a concurrent transaction, or was throttled
                return _RETRY
            except Exception:
                # A replay whose data moved on may fail where the first run
                # succeeded: the memo, if any, is the answer.
                row = yield from self._read(memo_ref)
                if row is not None:
                    return self._memo_result(row, identity)
                if (yield from self._stale(tx)):  # reads that were never one snapshot: run it again
                    return _RETRY
                raise
            else:
                aborted, value = False, result
                data_ops = tx.ops()
            memo_value = memo_row(identity, value, aborted=aborted)
            try:
                memo_text = encode(memo_value, "", envelope=1)
            except InvalidValueError as bad:  # the place is named only when needed: it costs a format
                where = f"result of step {self._step} ({identity}) of workflow {self.workflow!r}"
                raise InvalidValueError(where, bad.problem) from None
            expires = self._expiry()
            ops: list[Op] = [Insert(memo_ref, memo_value, memo_text, expires)]
            run_included = not self._run_known
            if run_included:
                ops.extend(self._claim_ops(expires, with_outbox=True))
            ops.extend(data_ops)
            if self._extra is not None and not aborted:
                ops.extend((yield from self._extra()))
            if call_out is not None and call_out.lease is not None:
                ops.append(Delete(self._lease_ref(memo_ref)))  # ended with the call it guarded
            if call_out is not None or self._traced:  # an effect's commit is resent as it is
                outcome = yield from self._commit(ops, memo_ref, resend=call_out is not None)
            else:  # any other's failed send reruns the body
                check_commit(ops, self.capabilities, lambda: self._place(memo_ref))
                outcome = yield Commit(ops)
            if isinstance(outcome, Committed):
                self._run_known = True
                self._commits += 1
                if self._traced:
                    telemetry.count(telemetry.STEPS_COMMITTED, self.workflow)
                if aborted:
                    raise _AbortWorkflow(value)
                # Strict encoding guarantees decode(encode(x)) == x: no need to parse it back.
                return value
            by_index = {failure.index: failure for failure in outcome.failures}
            if run_included and RUN_AT in by_index:
                yield from self._on_run_record(by_index[RUN_AT].existing)
            existing_memo = by_index[MEMO_AT].existing if MEMO_AT in by_index else None
            if existing_memo is not None:
                return self._memo_result(existing_memo, identity)
            if run_included and RUN_AT in by_index:
                continue  # replaying now: read the memo first
            return _RETRY

    def _lease_ref(self, memo_ref: RowRef) -> RowRef:
        return RowRef(memo_ref.table, memo_ref.partition, self._memo_prefix + lease_tag(self._step))

    def _leased(self, memo_ref: RowRef, seconds: float) -> Steps[Row | None]:
        """Hold the effect's lease (None), or the memo of the execution that held it."""
        return acquire(
            memo_ref,
            self._lease_ref(memo_ref),
            seconds,
            commit=lambda ops: self._commit(ops, memo_ref),
            read=self._read,
            sleep=self.policy.conflicts.sleep,
            expires=self._expiry(),
        )

    def _stale(self, tx: Tx) -> Steps[bool]:
        """Did a row the body read change before it raised? Then it saw no consistent state.

        Reads inside a body are each strongly consistent but not one snapshot
        (DynamoDB's are never cancelled by a concurrent commit, Azure's are
        separate calls); the commit's conditions make a *committed* body
        serializable, and this check gives the same to a body that raised.
        """
        checks = tx.read_checks()
        if not checks:
            return False
        rows = yield ReadMany([check.ref for check in checks])
        return any(
            (Cond.ABSENT if row is None else row.version) != check.expect
            for check, row in zip(checks, rows, strict=True)
        )

    def _memo_result(self, row: Row, identity: str) -> Any:
        if self._traced:
            telemetry.count(telemetry.DUPLICATES_ANSWERED, self.workflow)
        memo = Memo.from_json(row.value)
        if memo is None or memo.identity != identity:
            recorded = row.value if memo is None else memo.identity
            raise NonDeterminismError(
                self.workflow, self.request_id, self._step, repr(recorded), repr(identity)
            )
        if memo.aborted:
            raise _AbortWorkflow(memo.value)
        return memo.value

    # -- the run record ---------------------------------------------------

    def _claim_ops(self, expires: float, *, with_outbox: bool) -> list[Op]:
        submission = self.plan.submission
        record = RunRecord(
            self.fingerprint,
            RunStatus.RUNNING,
            version=self.plan.version,
            input=None if submission is None else submission.input,
            started_at=self.clock(),
        )
        value: JSON = record.to_json()
        where = f"input of workflow {self.workflow!r} request {self.request_id!r}"
        text = encode(value, where, envelope=3)
        if submission is not None:  # the input is stored: name it, not the step, when it is too big
            size, allowed = len(text.encode("utf-8")), self.capabilities.max_value_bytes
            if size > allowed:
                raise LimitExceededError(
                    where, f"{size} bytes stored with the request; the backend allows {allowed}"
                )
        ops: list[Op] = [Insert(self._run_ref, value, text, expires)]
        if submission is not None and with_outbox:
            ops.append(self._outbox_put(submission.outbox, expires))
        return ops

    def _outbox_ref(self) -> RowRef:
        return outbox_ref(self.workflow, self.request_id)

    def _outbox_put(self, entry: OutboxEntry, expires: float) -> Put:
        value: JSON = entry.to_json()
        return Put(self._outbox_ref(), value, encode(value), expires_at=expires)

    def _claim(self) -> Steps[None]:
        """Claim the request id (fingerprint, version, a submission's input) with its own commit.

        Where one commit cannot span partitions, a submission's outbox entry
        is committed first: a crash before the claim leaves only an entry
        the relay drops (no run record: nothing to finish).
        """
        expires = self._expiry()
        cross = self.capabilities.cross_partition_commit
        claim = self._claim_ops(expires, with_outbox=cross)
        if self.plan.submission is not None and not cross:
            check_commit(claim, self.capabilities, lambda: self._place(self._run_ref))  # before any write
            yield from self._commit([self._outbox_put(self.plan.submission.outbox, expires)], self._run_ref)
        outcome = yield from self._commit(claim, self._run_ref)
        if not isinstance(outcome, Committed):
            yield from self._on_run_record(outcome.failures[0].existing)
            return
        self._run_known = True

    def _on_run_record(self, existing: Row | None) -> Steps[None]:
        """Another execution of this request id came first: check, then replay or return."""
        if existing is None:
            return
        record = RunRecord.from_json(existing.value)
        if record.fingerprint != self.fingerprint and record.fingerprint not in self.aliases:
            raise IdempotencyKeyReuseError(
                self.workflow, self.request_id, record.fingerprint, self.fingerprint
            )
        if record.status.final:
            raise Finished(record)
        if self.plan.submission is not None and record.input is None:
            yield from self._adopt(existing, record)
            return
        if record.version != self.plan.version:
            raise OtherVersion(record)
        self._run_known = True
        self._replaying = True

    def _adopt(self, existing: Row, record: RunRecord) -> Steps[None]:
        """A submission meets a request that ``run`` claimed: store its input and outbox entry
        in that record, so workers can finish it (conditional: a racing outcome wins)."""
        assert self.plan.submission is not None
        expires = self._expiry()
        value: JSON = dataclasses.replace(record, input=self.plan.submission.input).to_json()
        ops: list[Op] = [Put(self._run_ref, value, encode(value, envelope=3), existing.version, expires)]
        cross = self.capabilities.cross_partition_commit
        outbox = self._outbox_put(self.plan.submission.outbox, expires)
        if cross:
            ops.append(outbox)
        else:  # first, as in a claim
            yield from self._commit([outbox], self._run_ref)
        yield from self._commit(ops, self._run_ref)
        # adopted, or what came first: check again
        yield from self._on_run_record((yield from self._read(self._run_ref)))

    def _expiry(self) -> float:
        """When rows written now may expire: from wall time, never from the workflow's clock
        (a test's fixed clock would write rows that are already expired)."""
        return time.time() + self.policy.retention

    def _finish(self, status: RunStatus, result: JSON = None, reason: JSON = None) -> Steps[RunRecord]:
        """Record the outcome: durably if no step claimed the request or if ``durable_outcome``,
        else as a cache. Strict encoding guarantees the result equals what duplicates read back;
        a result holding dicts is returned as read back (keys sorted), so the first answer and
        every duplicate's serialise to the same bytes."""
        self._until = self.policy.until()
        if type(result) is dict or type(result) is list:
            result = sorted_keys(result)
        record = RunRecord(self.fingerprint, RunStatus.RUNNING, version=self.plan.version).finished(
            status, self.clock(), result=result, reason=reason
        )
        value: JSON = record.to_json()
        text = encode(value, f"result of workflow {self.workflow!r}", envelope=1)
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
        if self.plan.durable_outcome or parent is not None:
            yield from self._commit(ops, self._run_ref)  # Puts and Deletes that expect nothing: applied
        else:
            yield CommitCache(ops)
        if cleanup:
            yield CommitCache(cleanup)
        if parent is not None and wake is not None:
            yield from self._announce(parent, wake.ref)
        return record

    # -- store calls ------------------------------------------------------

    def _read(self, ref: RowRef) -> Steps[Row | None]:
        request = Read(ref)
        try:
            row: Row | None = yield request
        except TransientStoreError:
            row = yield from resent(self.policy.resending(self._until), request)
        return row

    def _commit(self, ops: list[Op], where: RowRef, *, resend: bool = True) -> Steps[CommitOutcome]:
        """Check the limits, then send. A step's own commit is not resent (``resend=False``): its
        transient error reruns the body, which re-reads what a concurrent commit (DynamoDB's
        ``TransactionConflict``) most likely changed, and meets the memo if the send did apply."""
        check_commit(ops, self.capabilities, lambda: self._place(where))
        if self._traced:
            with telemetry.span(
                "idemflow.commit", workflow=self.workflow, request_id=self.request_id, ops=len(ops)
            ):
                return (yield from self._send(Commit(ops), resend))
        return (yield from self._send(Commit(ops), resend))

    def _send(self, request: Commit, resend: bool) -> Steps[CommitOutcome]:
        if not resend:
            first: CommitOutcome = yield request
            return first
        try:
            outcome: CommitOutcome = yield request
        except TransientStoreError:
            # The commit may have been applied with its answer lost: resending
            # the same operations meets the memo and resolves to it.
            outcome = yield from resent(self.policy.resending(self._until), request)
        return outcome

    def _place(self, where: RowRef) -> str:
        return (
            f"step {self._step} of workflow {self.workflow!r} request {self.request_id!r} on "
            f"{where.table}/{where.partition}"
        )
