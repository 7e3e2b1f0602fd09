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

Data conflicts (a row the body read moved on) rerun the body with jittered
exponential backoff (tenacity), bounded, then :class:`ConflictError`.
Compensation and the asynchronous variant reuse :meth:`Execution.run_step`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, NoReturn

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from idemflow import records
from idemflow.errors import (
    ConflictError,
    IdempotencyKeyReuseError,
    InvalidInputError,
    InvalidValueError,
    LimitExceededError,
    NonDeterminismError,
    TransientStoreError,
)
from idemflow.keys import RUNS_TABLE, memo_prefix, run_key, step_tag
from idemflow.monad import Atomic, Bind, Call, Idem, Node, Pure, Special
from idemflow.serialization import JSON, encode
from idemflow.stores.base import CommitOutcome, Committed, Insert, Op, Put, Row, RowRef, Store
from idemflow.tx import StepAborted, Tx


class _DataConflict(Exception):
    """A body's reads went stale before its commit: run it again."""


def _default_conflict_retrying() -> Retrying:  # copied before every use: never iterated itself
    return Retrying(
        stop=stop_after_attempt(16),
        wait=wait_random_exponential(multiplier=0.002, max=0.5),
        retry=retry_if_exception_type(_DataConflict),
        reraise=True,
    )


def _default_transient_retrying() -> Retrying:
    return Retrying(
        stop=stop_after_attempt(8),
        wait=wait_random_exponential(multiplier=0.02, max=2.0),
        retry=retry_if_exception_type(TransientStoreError),
        reraise=True,
    )


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How an execution retries: data conflicts (the body reruns) and
    transient store errors (the same commit is resent). Pass your own
    tenacity ``Retrying`` objects to change bounds, waits or the sleep."""

    conflicts: Retrying = field(default_factory=_default_conflict_retrying)
    transient: Retrying = field(default_factory=_default_transient_retrying)
    retention: float = 7 * 24 * 3600.0
    """Seconds memo and run rows are kept where the backend expires rows (TTL)."""


DEFAULT_POLICY = RetryPolicy()
"""Shared safely: its ``Retrying`` objects are only ever used through ``.copy()``."""


class _RunRecordSeen(BaseException):
    """The run record, read beside a first step's first row, exists: stop the body."""

    def __init__(self, row: Row) -> None:
        super().__init__()
        self.row = row


def _stop_if_present(row: Row | None) -> None:
    if row is not None:
        raise _RunRecordSeen(row)


class Finished(BaseException):
    """The run record says the request already finished: unwind and return it."""

    def __init__(self, record: records.RunRecord) -> None:
        super().__init__(record.status.value)
        self.record = record


class AbortWorkflow(BaseException):
    """A step aborted (now or in an earlier execution): unwind to compensate."""

    def __init__(self, reason: JSON, step: int) -> None:
        super().__init__(reason, step)
        self.reason = reason
        self.step = step


@dataclass(frozen=True, slots=True)
class CompletedStep:
    """A committed step that registered a compensation."""

    step: int
    node: Atomic
    result: Any


_RETRY = object()


class Execution:
    """One execution of one request: interprets nodes, numbers and commits steps."""

    def __init__(
        self,
        store: Store,
        workflow: str,
        request_id: str,
        fingerprint: str,
        policy: RetryPolicy,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.workflow = workflow
        self.request_id = request_id
        self.fingerprint = fingerprint
        self.policy = policy
        self.clock = clock
        self.step = 0
        self.run_known = False
        self.replaying = False
        self.completed: list[CompletedStep] = []
        self.run_ref = RowRef(RUNS_TABLE, request_id, run_key(workflow))
        self.memo_prefix = memo_prefix(workflow, request_id)
        self.on_checkpoint: Callable[[Execution], None] | None = None
        self.recorded: dict[str, tuple[str, JSON]] | None = None
        """Step values carried by an async continuation: ``tag -> (identity, value)``."""
        self.journal: list[tuple[str, str, JSON]] | None = None
        """Where forward steps are noted ``(tag, identity, value)`` for a continuation."""
        self.durable_outcome = False
        """Write the completion record with a durable commit, not ``commit_cache``: for callers
        that report the outcome elsewhere (a worker's ack, ``submit``'s handle) right after."""

    # -- interpretation -------------------------------------------------

    def evaluate(self, node: Node) -> Any:
        """Run a description to its value (an explicit stack keeps long bind chains flat)."""
        stack: list[Callable[[Any], Idem[Any]]] = []
        while True:
            kind = type(node)
            if kind is Bind:
                stack.append(node.then)  # type: ignore[union-attr]
                node = node.source  # type: ignore[union-attr]
                continue
            if kind is Atomic:
                value = self.atomic(node)  # type: ignore[arg-type]
            elif kind is Pure:
                value = node.value  # type: ignore[union-attr]
            elif kind is Call:
                value = self.call(node)  # type: ignore[arg-type]
            elif kind is Special:
                value = self.special(node)  # type: ignore[arg-type]
            else:
                raise InvalidInputError(f"workflow {self.workflow!r} met {node!r}, not an Idem description")
            if not stack:
                return value
            following = stack.pop()(value)
            if not isinstance(following, Idem):
                raise InvalidInputError(
                    f"workflow {self.workflow!r}: a bind function returned {type(following).__name__}, "
                    "not an Idem"
                )
            node = following.node

    def call(self, node: Call) -> Any:
        produced = node.function(*node.args, **node.kwargs)
        if isinstance(produced, Idem):
            return self.evaluate(produced.node)
        if not isinstance(produced, Generator):
            raise InvalidInputError(
                f"workflow {node.name!r} returned {type(produced).__name__}; "
                "a workflow is a generator function or returns an Idem"
            )
        return self.drive(node.name, produced)

    def drive(self, name: str, generator: Generator[Any, Any, Any]) -> Any:
        """Feed each yielded computation's value back into the workflow generator."""
        try:
            yielded = next(generator)
            while True:
                if not isinstance(yielded, Idem):
                    raise InvalidInputError(
                        f"workflow {name!r} yielded {type(yielded).__name__}; yield atomic(...), "
                        "now(), effect(...) or another Idem"
                    )
                yielded = generator.send(self.evaluate(yielded.node))
        except StopIteration as stop:
            return stop.value
        finally:
            generator.close()

    def atomic(self, node: Atomic) -> Any:
        self.step += 1
        step = self.step
        value = self.run_step(
            node.table, node.partition, step_tag(step), "atomic " + node.name, node.body, step
        )
        if node.compensate is not None:
            self.completed.append(CompletedStep(step, node, value))
        return value

    def special(self, node: Special) -> Any:
        from idemflow.helpers import evaluate_special

        return evaluate_special(self, node)

    def table_less_step(self, identity: str, body: Callable[[Tx], Any]) -> Any:
        """A step with no table of its own: its memo sits beside the run record."""
        self.step += 1
        return self.run_step(RUNS_TABLE, self.request_id, step_tag(self.step), identity, body, self.step)

    # -- one step -------------------------------------------------------

    def run_step(
        self,
        table: str,
        partition: str,
        tag: str,
        identity: str,
        body: Callable[[Tx], Any],
        step: int,
        *,
        abortable: bool = True,
    ) -> Any:
        """Replay the step from its memo, or execute and commit it exactly once."""
        if self.recorded is not None and tag in self.recorded:
            recorded_identity, value = self.recorded.pop(tag)
            if recorded_identity != identity:
                raise NonDeterminismError(
                    self.workflow, self.request_id, step, repr(recorded_identity), repr(identity)
                )
        else:
            value = self._execute_step(table, partition, tag, identity, body, step, abortable)
        if self.journal is not None and tag[0] == "s":
            self.journal.append((tag, identity, value))
        return value

    def _execute_step(
        self,
        table: str,
        partition: str,
        tag: str,
        identity: str,
        body: Callable[[Tx], Any],
        step: int,
        abortable: bool,
    ) -> Any:
        memo_ref = RowRef(table, partition, self.memo_prefix + tag)
        outcome = self._attempt(memo_ref, identity, body, step, abortable)
        if outcome is not _RETRY:
            return outcome
        retrying = self.policy.conflicts.copy()
        try:
            for attempt in retrying:
                with attempt:
                    outcome = self._attempt(memo_ref, identity, body, step, abortable)
                    if outcome is _RETRY:
                        raise _DataConflict
        except _DataConflict:
            attempts = retrying.statistics.get("attempt_number", 0) + 1
            raise ConflictError(self.workflow, self.request_id, step, table, partition, attempts) from None
        return outcome

    def _attempt(
        self, memo_ref: RowRef, identity: str, body: Callable[[Tx], Any], step: int, abortable: bool
    ) -> Any:
        while True:  # loops only when the commit revealed an existing run record
            if self.replaying:
                row = self.read(memo_ref)
                if row is not None:
                    return self.memo_result(row, identity, step)
                self.replaying = False
            peek = None
            if not self.run_known:
                if not self.store.capabilities.cross_partition_commit:
                    self.ensure_run_record()
                    continue
                peek = (self.run_ref, _stop_if_present)
            tx = Tx(self.store, memo_ref.table, memo_ref.partition, peek)
            try:
                result = body(tx)
            except _RunRecordSeen as seen:
                self.on_run_record(seen.row)  # returns only to replay
                continue
            except StepAborted as abort:
                if not abortable:
                    raise
                memo_value: dict[str, JSON] = records.abort_memo(identity, abort.reason)
                data_ops = tx.read_checks()
            except Exception:
                # A replay whose data moved on may fail where the first run
                # succeeded: the memo, if any, is the answer.
                row = self.read(memo_ref)
                if row is not None:
                    return self.memo_result(row, identity, step)
                raise
            else:
                memo_value = records.memo(identity, result)
                data_ops = tx.ops()
            try:
                memo_text = encode(memo_value, "", envelope=1)
            except InvalidValueError as bad:  # the place is named only when needed: it costs a format
                where = f"result of step {step} ({identity}) of workflow {self.workflow!r}"
                raise InvalidValueError(where, bad.problem) from None
            expires = self.clock() + self.policy.retention
            ops: list[Op] = [Insert(memo_ref, memo_value, memo_text, expires)]
            run_included = self._add_run_record(ops, memo_ref, expires)
            ops.extend(data_ops)
            outcome = self.commit(ops, step, memo_ref)
            if isinstance(outcome, Committed):
                self.run_known = True
                if "abort" in memo_value:
                    raise AbortWorkflow(memo_value["abort"], step)
                # Strict encoding guarantees decode(encode(x)) == x: no need to parse it back.
                return memo_value["v"]
            by_index = {failure.index: failure for failure in outcome.failures}
            if run_included and 1 in by_index:
                existing = by_index[1].existing
                self.on_run_record(existing)
            if 0 in by_index and by_index[0].existing is not None:
                return self.memo_result(by_index[0].existing, identity, step)
            if run_included and 1 in by_index:
                continue  # replaying now: read the memo first
            return _RETRY

    def memo_result(self, row: Row, identity: str, step: int) -> Any:
        memo = row.value
        if not isinstance(memo, dict) or memo.get("id") != identity:
            recorded = memo.get("id") if isinstance(memo, dict) else memo
            raise NonDeterminismError(self.workflow, self.request_id, step, repr(recorded), repr(identity))
        if "abort" in memo:
            raise AbortWorkflow(memo["abort"], step)
        return memo.get("v")

    # -- the run record ---------------------------------------------------

    def _add_run_record(self, ops: list[Op], memo_ref: RowRef, expires: float) -> bool:
        """Let the run-record insert ride in this commit where the backend allows it."""
        if self.run_known:
            return False
        same_partition = memo_ref.table == RUNS_TABLE and memo_ref.partition == self.request_id
        if self.store.capabilities.cross_partition_commit or same_partition:
            ops.append(self._run_insert(records.RunStatus.RUNNING, expires))
            return True
        self.ensure_run_record()
        return False

    def _run_insert(self, status: records.RunStatus, expires: float, result: JSON = None) -> Insert:
        value: JSON = records.RunRecord(self.fingerprint, status, result=result).to_json()
        return Insert(self.run_ref, value, encode(value, "workflow result", envelope=1), expires)

    def ensure_run_record(self) -> None:
        """Claim the request id (fingerprint) with its own commit."""
        outcome = self.commit([self._run_insert(records.RunStatus.RUNNING, self.expiry())], 0, self.run_ref)
        if isinstance(outcome, Committed):
            self.run_known = True
        else:
            self.on_run_record(outcome.failures[0].existing)

    def on_run_record(self, existing: Row | None) -> None:
        """Another execution of this request id came first: check, then replay or return."""
        if existing is None:
            return
        record = records.RunRecord.from_json(existing.value)
        if record.fingerprint != self.fingerprint:
            raise IdempotencyKeyReuseError(
                self.workflow, self.request_id, record.fingerprint, self.fingerprint
            )
        if record.status in (records.RunStatus.COMPLETED, records.RunStatus.ABORTED):
            raise Finished(record)
        self.run_known = True
        self.replaying = True

    def expiry(self) -> float:
        return self.clock() + self.policy.retention

    def finish(self, status: records.RunStatus, result: JSON = None, reason: JSON = None) -> JSON:
        """Record the outcome: durably if no step claimed the request or if ``durable_outcome``,
        else as a cache.

        Returns the result, which strict encoding guarantees equal to what duplicates read back.
        """
        record = records.RunRecord(
            self.fingerprint, status, result=result, reason=reason, finished_at=self.clock()
        )
        value: JSON = record.to_json()
        text = encode(value, f"result of workflow {self.workflow!r}", envelope=1)
        if not self.run_known:
            insert = Insert(self.run_ref, value, text, self.expiry())
            outcome = self.commit([insert], self.step, self.run_ref)
            if not isinstance(outcome, Committed):
                self.on_run_record(outcome.failures[0].existing)
            else:
                self.run_known = True
                return result
        completion = Put(self.run_ref, value, text, expires_at=self.expiry())
        if self.durable_outcome:
            self.commit([completion], self.step, self.run_ref)  # a Put that expects nothing: applied
        else:
            self.store.commit_cache([completion])
        return result

    # -- store calls ------------------------------------------------------

    def read(self, ref: RowRef) -> Row | None:
        try:
            return self.store.read(ref)
        except TransientStoreError:
            row: Row | None = self.policy.transient.copy()(self.store.read, ref)
            return row

    def commit(self, ops: list[Op], step: int, where: RowRef) -> CommitOutcome:
        self.check_limits(ops, step, where)
        try:
            return self.store.commit(ops)
        except TransientStoreError:
            # The commit may have been applied with its answer lost: resending
            # the same operations meets the memo and resolves to it.
            outcome: CommitOutcome = self.policy.transient.copy()(self.store.commit, ops)
            return outcome

    def check_limits(self, ops: list[Op], step: int, where: RowRef) -> None:
        caps = self.store.capabilities
        if len(ops) > caps.max_ops_per_commit:
            self._limit(
                step,
                where,
                f"{len(ops)} operations in one commit; the backend allows {caps.max_ops_per_commit}",
            )
        total = 0
        for op in ops:
            text: str | None = getattr(op, "text", None)
            if text is not None:
                size = len(text) if text.isascii() else len(text.encode("utf-8"))
                if size > caps.max_value_bytes:
                    self._limit(
                        step,
                        where,
                        f"a value of {size} bytes; the backend allows {caps.max_value_bytes} per row",
                    )
                total += size
            ref = op.ref
            if len(ref.key) * 4 > caps.max_key_bytes or len(ref.partition) * 4 > caps.max_key_bytes:
                for part in (ref.key, ref.partition):
                    if len(part.encode("utf-8")) > caps.max_key_bytes:
                        self._limit(step, where, f"a key or partition over {caps.max_key_bytes} bytes")
        if total > caps.max_commit_bytes:
            self._limit(
                step, where, f"{total} bytes in one commit; the backend allows {caps.max_commit_bytes}"
            )

    def _limit(self, step: int, where: RowRef, problem: str) -> NoReturn:
        raise LimitExceededError(
            f"step {step} of workflow {self.workflow!r} request {self.request_id!r} on "
            f"{where.table}/{where.partition}",
            problem,
        )
