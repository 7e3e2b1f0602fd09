"""What one execution knows, and how it calls the store: the base of the engine's classes.

:class:`~idemflow.engine.Execution` is built in layers, one module each, so
that each stays small enough to read: this base (its state, set once at
construction from a frozen :class:`~idemflow.plan.Plan`, and its reads and
commits), :mod:`idemflow._run_record` (claiming and adopting the request id),
:mod:`idemflow._stepping` (one step: replay or execute, then commit),
:mod:`idemflow._waiting` (timers, children, messages) and
:mod:`idemflow.engine` (the workflow's interpretation, compensation and
outcome). Each layer calls only the layers below it, so there is no import
cycle, and all of them are the one class: nothing outside it writes its state.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from idemflow import telemetry
from idemflow._io import Commit, Read, Steps
from idemflow.errors import LimitExceededError, TransientStoreError
from idemflow.keys import memo_prefix
from idemflow.monad import Atomic, Call, Effect, Start
from idemflow.plan import DEFAULT_PLAN, AtCheckpoint, JournalEntry, Plan
from idemflow.policy import DEFAULT_POLICY, RetryPolicy, resent
from idemflow.records import run_ref
from idemflow.step_retry import StepRetry
from idemflow.stores.base import Capabilities, CommitOutcome, Op, Row, RowRef
from idemflow.tx import Reader

_log = logging.getLogger("idemflow.engine")
"""Per-run and per-step events at DEBUG; nothing is formatted unless that level is on."""


@dataclass(frozen=True, slots=True)
class Pending:
    """A step executed and not yet committed: its commit waits for the workflow's next move, so
    that the last step's commit can carry the request's outcome too (one call fewer).

    ``ops`` begin with the memo insert (:data:`~idemflow.records.MEMO_AT`) and, where
    ``claims``, the run record's insert (:data:`~idemflow.records.RUN_AT`).
    """

    ops: list[Op]
    memo_ref: RowRef
    claims: bool
    resend: bool
    """An effect's commit: resent as it is on a transient error (a rerun would call out again)."""
    leased: bool = False
    """An effect called under a lease: executions waiting on the lease watch for its memo."""


class Restart(BaseException):
    """A deferred commit did not apply (a racing execution, a data conflict, an unknown outcome):
    the workflow went on from a value that may not stand, so the execution starts over, replaying.

    ``existing`` is the run record the commit met, if it met one."""

    def __init__(self, existing: Row | None = None) -> None:
        super().__init__()
        self.existing = existing


@dataclass(frozen=True, slots=True)
class Done:
    """A committed step that is undone if the request is: a table step or an outside call with a
    compensation, or a child started with ``on_parent_abort="abort"``."""

    step: int
    node: Atomic | Effect | Start
    result: Any
    late: bool = False
    """An effect whose call this execution saw answered after the request was undone at it."""


class ExecutionBase:
    """One execution's state and store calls.

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
        self._incarnation = plan.incarnation
        """The run's incarnation as this execution knows it: drawn by its claim, or read from the
        record it met (None for a record older than format 5: then every memo is trusted)."""
        self._replaying = plan.resume
        self._done: list[Done] = []
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
        self._copy = False
        """A submission met a request another submit claimed: it sends no continuation."""
        self._called: Any = None
        """What the current effect's call answered in this execution, if it was called (an undo
        needs it when the request is undone at that very call)."""
        self._workflow_call: Call | None = None
        """The workflow this execution runs (its policy, its ``on_abort``)."""
        self._cleaning = False
        """Running ``on_abort`` steps: an operator's abort does not replace them."""
        self._outbox_written: float | None = None
        """When this submission inserted its outbox entry before its claim (Azure), if it did."""
        self._adopted = False
        """This submission stored its input in a record ``run`` claimed: it sends the continuation."""
        self._fold = plan.fold and plan.submission is None
        """Steps a workflow yields directly may defer their commit to its next move (a
        submission's claim carries its outbox entry, which its outcome deletes: never folded)."""
        self._defer = False
        """The step about to run may leave its commit :attr:`_pending` (set per step by the
        driver of a generator workflow, taken by the step's first attempt)."""
        self._pending: Pending | None = None
        """A step executed and not yet committed (see :class:`Pending`)."""
        self._workflow_retry: StepRetry | None = None
        """The workflow's own retry policy for its steps (``@workflow(..., retry=)``)."""
        self._step_retry: StepRetry | None = None
        """The policy of the step now running (its own, else the workflow's): a worker's next
        attempt follows it (:class:`~idemflow.errors.StepFailedError` carries it)."""

    @property
    def step(self) -> int:
        """Number of the last step begun."""
        return self._step

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

    def _expiry(self) -> float:
        """When rows written now may expire: from wall time, never from the workflow's clock
        (a test's fixed clock would write rows that are already expired)."""
        return time.time() + self.policy.retention

    # -- store calls ------------------------------------------------------

    def _read(self, ref: RowRef) -> Steps[Row | None]:
        request = Read(ref)
        try:
            row: Row | None = yield request
        except TransientStoreError:
            row = yield from resent(self.policy.resending(self._until), request)
        return row

    def _commit(self, ops: list[Op], where: RowRef, *, resend: bool = True) -> Steps[CommitOutcome]:
        """Send. A step's own commit is not resent (``resend=False``): its transient error reruns
        the body, which re-reads what a concurrent commit (DynamoDB's ``TransactionConflict``) most
        likely changed, and meets the memo if the send did apply. The store checks its limits
        before it writes anything; its refusal is raised naming the step."""
        try:
            if self._traced:
                with telemetry.span(
                    "idemflow.commit", workflow=self.workflow, request_id=self.request_id, ops=len(ops)
                ):
                    return (yield from self._send(Commit(ops), resend))
            return (yield from self._send(Commit(ops), resend))
        except LimitExceededError as refused:
            raise self._named(refused, where) from None

    def _named(self, refused: LimitExceededError, where: RowRef) -> LimitExceededError:
        """A store's limit error, naming the step that made the commit."""
        return LimitExceededError(self._place(where), refused.problem)

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
