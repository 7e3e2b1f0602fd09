"""The idemflow error tree.

Every error a caller can see derives from :class:`IdemflowError`, so one
``except IdemflowError`` catches them all. Errors carry the fields a user needs
to find the failing place (workflow, request id, step, table, partition) and
are picklable, because workers run in other processes and ship errors back.

>>> try:
...     raise InvalidNameError("table", "", "must not be empty")
... except IdemflowError as exc:
...     print(exc)
invalid table '': must not be empty
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from idemflow.step_retry import StepRetry


class IdemflowError(Exception):
    """Root of every error raised by idemflow."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses take keyword-free positional fields; rebuilding them from
        # ``self.args`` keeps them picklable across worker processes.
        return (type(self), self.args)


class InvalidInputError(IdemflowError, ValueError):
    """Bad input found before anything was written."""


class InvalidNameError(InvalidInputError):
    """An empty or illegal table, partition, key, workflow or request id."""

    def __init__(self, what: str, value: object, problem: str) -> None:
        super().__init__(what, value, problem)
        self.what = what
        self.value = value
        self.problem = problem

    def __str__(self) -> str:
        return f"invalid {self.what} {self.value!r}: {self.problem}"


class InvalidValueError(InvalidInputError):
    """A value that is not JSON-compatible or too large for the backend."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(where, problem)
        self.where = where
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.where}: {self.problem}"


class LimitExceededError(InvalidValueError):
    """A step's write exceeds a backend limit (size, operations per commit)."""


class IdempotencyKeyReuseError(IdemflowError):
    """A request id was reused with a different input.

    The first invocation wins: its input fingerprint is stored with the run
    record, and a later call with another input is refused before it writes.
    """

    def __init__(self, workflow: str, request_id: str, stored: str, given: str) -> None:
        super().__init__(workflow, request_id, stored, given)
        self.workflow = workflow
        self.request_id = request_id
        self.stored_fingerprint = stored
        self.given_fingerprint = given

    def __str__(self) -> str:
        return (
            f"request id {self.request_id!r} of workflow {self.workflow!r} was first used "
            f"with another input (stored fingerprint {self.stored_fingerprint[:12]}…, "
            f"this call {self.given_fingerprint[:12]}…); use a new request id"
        )


class NonDeterminismError(IdemflowError):
    """A replayed step met a memo recorded by a different step.

    Usually the workflow code changed under an in-flight request, or control
    flow depends on something other than inputs and step results.
    """

    def __init__(self, workflow: str, request_id: str, step: int, recorded: str, met: str) -> None:
        super().__init__(workflow, request_id, step, recorded, met)
        self.workflow = workflow
        self.request_id = request_id
        self.step = step
        self.recorded = recorded
        self.met = met

    def __str__(self) -> str:
        return (
            f"workflow {self.workflow!r} request {self.request_id!r} step {self.step}: "
            f"recorded {self.recorded} but this run met {self.met}"
        )


class ConflictError(IdemflowError):
    """A step body kept conflicting with concurrent writers past the retry bound."""

    def __init__(
        self, workflow: str, request_id: str, step: int, table: str, partition: str, attempts: int
    ) -> None:
        super().__init__(workflow, request_id, step, table, partition, attempts)
        self.workflow = workflow
        self.request_id = request_id
        self.step = step
        self.table = table
        self.partition = partition
        self.attempts = attempts

    def __str__(self) -> str:
        return (
            f"workflow {self.workflow!r} request {self.request_id!r} step {self.step} on "
            f"{self.table}/{self.partition}: still conflicting after {self.attempts} attempts"
        )


class StoreError(IdemflowError):
    """A backend failure (missing table, bad credentials, unavailable service)."""


class TransientStoreError(StoreError):
    """A backend failure worth retrying: throttling, 5xx, connection reset, timeout.

    The engine retries the same commit; a commit that was applied but whose
    answer was lost then meets its own memo and resolves to the stored value.
    """


class StoreConfigError(StoreError):
    """A store URL or configuration that cannot work (unknown scheme, missing extra)."""


class WorkflowAborted(IdemflowError):
    """The workflow aborted; the compensations of its completed steps have run.

    Every execution of the request (duplicates included) ends with this same
    error and reason.
    """

    def __init__(self, reason: object, workflow: str, request_id: str) -> None:
        super().__init__(reason, workflow, request_id)
        self.reason = reason
        self.workflow = workflow
        self.request_id = request_id

    def __str__(self) -> str:
        return f"workflow {self.workflow!r} request {self.request_id!r} aborted: {self.reason!r}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WorkflowAborted) and self.args == other.args

    def __hash__(self) -> int:
        return hash((type(self), repr(self.args)))


class CompensationFailed(IdemflowError):
    """A compensation raised instead of undoing its step.

    The request stays resumable: fix the cause and run it again; completed
    compensations are not repeated.
    """

    def __init__(self, workflow: str, request_id: str, step: int, name: str, cause: str) -> None:
        super().__init__(workflow, request_id, step, name, cause)
        self.workflow = workflow
        self.request_id = request_id
        self.step = step
        self.name = name
        self.cause = cause

    def __str__(self) -> str:
        return (
            f"workflow {self.workflow!r} request {self.request_id!r}: compensation of step {self.step} "
            f"({self.name}) failed: {self.cause}; the request can be run again to resume"
        )


class MessageNotDelivered(IdemflowError):
    """``send_message`` refused a message no ``receive`` could ever take; nothing was written.

    ``reason`` says why: ``"request already finished: completed"`` (or ``aborted``), or, when
    the sender asked for a started receiver (``require_started=True``), ``"unknown request"``.
    A message to a request that has not started yet is otherwise kept until it starts.
    """

    def __init__(self, workflow: str, request_id: str, topic: str, reason: str) -> None:
        super().__init__(workflow, request_id, topic, reason)
        self.workflow = workflow
        self.request_id = request_id
        self.topic = topic
        self.reason = reason

    def __str__(self) -> str:
        return (
            f"message on {self.topic!r} to workflow {self.workflow!r} request {self.request_id!r} "
            f"not delivered: {self.reason}"
        )


class QueueError(StoreError):
    """A queue operation that cannot succeed as asked (a message this holder no longer owns, ...).

    Raised by the work queues of :mod:`idemflow.async_worklist`; transient queue
    failures are :class:`TransientStoreError` and configuration problems
    :class:`StoreConfigError`, so a worker can tell "retry", "fix the setup" and
    "this message is gone" apart.
    """


class StepFailedError(IdemflowError):
    """A step raised while a worker ran it (the cause is chained as ``__cause__``).

    A worker retries the request; once its retry budget is spent the request
    ends ``failed`` with this step and reason (or is compensated, for a
    workflow declared with ``on_failure="compensate"``).
    """

    def __init__(
        self,
        workflow: str,
        request_id: str,
        step: int,
        identity: str,
        cause: str,
        retry: StepRetry | None = None,
        error: BaseException | None = None,
    ) -> None:
        super().__init__(workflow, request_id, step, identity, cause)
        self.workflow = workflow
        self.request_id = request_id
        self.step = step
        self.identity = identity
        self.cause = cause
        self.retry = retry
        """The step's own or its workflow's retry policy (None: the worker's default)."""
        self.error = error
        """What the step raised (a failed compensation: what the compensation raised), which the
        policy judges (non-retryable types)."""

    def __str__(self) -> str:
        return (
            f"workflow {self.workflow!r} request {self.request_id!r} step {self.step} "
            f"({self.identity}) failed: {self.cause}"
        )


class EffectTimeout(IdemflowError, TimeoutError):
    """An effect's attempt ran longer than its ``timeout``: that attempt failed (and may be retried).

    The call itself may still finish in the background; its answer is dropped, and the next
    attempt passes the same idempotency key, so the outside service can tell it is a repeat.
    """

    def __init__(self, name: str, seconds: float) -> None:
        super().__init__(name, seconds)
        self.name = name
        self.seconds = seconds

    def __str__(self) -> str:
        return f"effect {self.name!r} did not answer within {self.seconds:g} s"


class VersionNotHeldError(IdemflowError):
    """A request started on a workflow version the caller does not hold.

    Requests finish on the version they started with: pass that version's
    ``@workflow`` to ``run(..., versions=[...])``, or let a worker holding it
    finish the request.
    """

    def __init__(self, workflow: str, request_id: str, version: int, held: tuple[int, ...]) -> None:
        super().__init__(workflow, request_id, version, held)
        self.workflow = workflow
        self.request_id = request_id
        self.version = version
        self.held = held

    def __str__(self) -> str:
        return (
            f"workflow {self.workflow!r} request {self.request_id!r} started on version {self.version}, "
            f"but only version(s) {', '.join(map(str, self.held))} are held here"
        )


class ChildAborted(WorkflowAborted):
    """The child a workflow waited for (``yield wait(child)``) aborted: thrown where it waited.

    ``workflow`` and ``request_id`` name the child; ``reason`` is its abort reason. Every
    execution of the parent meets it at the same step (the outcome is memoized).
    """


class RequestFailed(IdemflowError):
    """A submitted request ended ``failed``: a step kept raising after its retries.

    Its committed steps stay; ``idemflow retry`` resumes it after a fix,
    ``idemflow abort`` compensates it.
    """

    def __init__(self, workflow: str, request_id: str, step: int, reason: str, attempts: int) -> None:
        super().__init__(workflow, request_id, step, reason, attempts)
        self.workflow = workflow
        self.request_id = request_id
        self.step = step
        self.reason = reason
        self.attempts = attempts

    def __str__(self) -> str:
        return (
            f"workflow {self.workflow!r} request {self.request_id!r} failed at step {self.step} "
            f"after {self.attempts} attempt(s): {self.reason}"
        )
