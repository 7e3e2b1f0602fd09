"""Errors that are a request's outcome or a host's answer: aborted, failed, timed out, refused."""

from __future__ import annotations

from typing import Any

from idemflow.errors._codes import ErrorCode, IdemflowError
from idemflow.errors._input import InvalidInputError


class WorkflowAborted(IdemflowError):
    """The workflow aborted; the compensations of its completed steps have run.

    An outcome the workflow chose (``tx.abort``), not a fault, hence no ``Error``
    suffix. Every execution of the request (duplicates included) ends with this
    same error and reason.
    """

    code = ErrorCode.ABORTED

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


class ChildAborted(WorkflowAborted):
    """The child a workflow waited for (``yield wait(child)``) aborted: thrown where it waited.

    ``workflow`` and ``request_id`` name the child; ``reason`` is its abort reason. Every
    execution of the parent meets it at the same step (the outcome is memoized).
    """


class CompensationError(IdemflowError):
    """A compensation raised instead of undoing its step.

    The request stays resumable: fix the cause and run it again; completed
    compensations are not repeated.
    """

    code = ErrorCode.COMPENSATION_FAILED

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


class MessageNotDeliveredError(IdemflowError):
    """``send_message`` refused a message no ``receive`` could ever take; nothing was written.

    ``reason`` says why: ``"request already finished: completed"`` (or ``aborted``), or, when
    the sender asked for a started receiver (``require_started=True``), ``"unknown request"``.
    A message to a request that has not started yet is otherwise kept until it starts.
    """

    code = ErrorCode.NOT_DELIVERED

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


class StepFailedError(IdemflowError):
    """A step raised while a worker ran it (the cause is chained as ``__cause__``).

    A worker retries the request; once its retry budget is spent the request
    ends ``failed`` with this step and reason (or is compensated, for a
    workflow declared with ``on_failure="compensate"``).
    """

    code = ErrorCode.STEP_FAILED

    def __init__(
        self,
        workflow: str,
        request_id: str,
        step: int,
        identity: str,
        cause: str,
        retry: object = None,
        error: BaseException | None = None,
    ) -> None:
        super().__init__(workflow, request_id, step, identity, cause)
        self.workflow = workflow
        self.request_id = request_id
        self.step = step
        self.identity = identity
        self.cause = cause
        self.retry = retry
        """The step's own or its workflow's retry policy, an :class:`idemflow.StepRetry` (None: the
        worker's default). Typed ``object`` here: the errors sit below the policies they carry."""
        self.error = error
        """What the step raised (a failed compensation: what the compensation raised), which the
        policy judges (non-retryable types)."""

    def __str__(self) -> str:
        return (
            f"workflow {self.workflow!r} request {self.request_id!r} step {self.step} "
            f"({self.identity}) failed: {self.cause}"
        )


class RequestFailedError(IdemflowError):
    """A submitted request ended ``failed``: a step kept raising after its retries.

    Its committed steps stay; ``idemflow retry`` resumes it after a fix,
    ``idemflow abort`` compensates it.
    """

    code = ErrorCode.REQUEST_FAILED

    def __init__(
        self,
        workflow: str,
        request_id: str,
        step: int,
        reason: str,
        attempts: int,
        identity: str | None = None,
    ) -> None:
        super().__init__(workflow, request_id, step, reason, attempts)
        self.workflow = workflow
        self.request_id = request_id
        self.step = step
        self.reason = reason
        self.attempts = attempts
        self.identity = identity
        """The failed step's kind and name (``atomic reserve``), where the record kept them."""

    def __str__(self) -> str:
        where = f"step {self.step}" if self.identity is None else f"step {self.step} ({self.identity})"
        return (
            f"workflow {self.workflow!r} request {self.request_id!r} failed at {where} "
            f"after {self.attempts} attempt(s): {self.reason}"
        )


class RequestCancelledError(IdemflowError):
    """The request was cancelled (``idemflow cancel``, :func:`idemflow.admin.cancel`): none of its
    steps runs until an operator retries it, and nothing it committed was undone.

    A handle's ``result()`` raises it as soon as the run record says ``cancelled`` (not after its
    timeout), and ``run`` raises it for a request id that was cancelled; ``reason`` is the one the
    operator gave.

    >>> str(RequestCancelledError("checkout", "o-1", "customer called"))
    "workflow 'checkout' request 'o-1' cancelled: 'customer called'"
    """

    code = ErrorCode.CANCELLED

    def __init__(self, workflow: str, request_id: str, reason: object) -> None:
        super().__init__(workflow, request_id, reason)
        self.workflow = workflow
        self.request_id = request_id
        self.reason = reason

    def __str__(self) -> str:
        return f"workflow {self.workflow!r} request {self.request_id!r} cancelled: {self.reason!r}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RequestCancelledError) and self.args == other.args

    def __hash__(self) -> int:
        return hash((type(self), repr(self.args)))


class ChildCancelledError(RequestCancelledError):
    """The child a workflow waited for (``yield wait(child)``) was cancelled: thrown where it
    waited, as :class:`ChildAborted` is for a child that aborted.

    ``workflow`` and ``request_id`` name the child; ``reason`` is the operator's. The outcome is
    memoized, so every execution of the parent meets it at the same step, even once the child is
    retried; a parent that does not catch it fails there like any step that raises.
    """


class EffectTimeoutError(IdemflowError, TimeoutError):
    """An effect's attempt ran longer than its ``timeout``: that attempt failed (and may be retried).

    The call itself may still finish in the background; its answer is dropped, and the next
    attempt passes the same idempotency key, so the outside service can tell it is a repeat.
    """

    code = ErrorCode.TIMEOUT

    def __init__(self, name: str, seconds: float) -> None:
        super().__init__(name, seconds)
        self.name = name
        self.seconds = seconds

    def __str__(self) -> str:
        return f"effect {self.name!r} did not answer within {self.seconds:g} s"


class StreamTimeoutError(IdemflowError, TimeoutError):
    """A stream's reader waited ``seconds`` for its next value (or its end) and none came.

    Nothing is lost: read again from ``offset``, the first value not yet read.
    """

    code = ErrorCode.TIMEOUT

    def __init__(self, workflow: str, request_id: str, key: str, offset: int, seconds: float) -> None:
        super().__init__(workflow, request_id, key, offset, seconds)
        self.workflow = workflow
        self.request_id = request_id
        self.key = key
        self.offset = offset
        self.seconds = seconds

    def __reduce__(self) -> tuple[Any, ...]:
        # OSError (TimeoutError's base) keeps only two of five arguments in ``args``.
        fields = (self.workflow, self.request_id, self.key, self.offset, self.seconds)
        return (type(self), fields, super().__reduce__()[2])

    def __str__(self) -> str:
        return (
            f"no value at offset {self.offset} of stream {self.key!r} of workflow {self.workflow!r} "
            f"request {self.request_id!r} within {self.seconds:g} s"
        )


class VersionNotHeldError(IdemflowError):
    """A request started on a workflow version the caller does not hold.

    Requests finish on the version they started with: pass that version's
    ``@workflow`` to ``run(..., versions=[...])``, or let a worker holding it
    finish the request.
    """

    code = ErrorCode.VERSION_NOT_HELD

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


class DeliveryRetryError(IdemflowError):
    """A queue-triggered function (Azure Functions) could not settle its message now: the host must
    deliver it again after its ``visibilityTimeout``, counting the delivery toward ``maxDequeueCount``.

    Raised for a store or queue error (the cause is chained when the worker kept one) or a
    workflow no function of the app holds; the worker's log says which.

    >>> str(DeliveryRetryError("m1", 2, "the store is down"))
    'message m1 (delivery 2) goes back to the queue: the store is down'
    """

    code = ErrorCode.DELIVERY_RETRY

    def __init__(self, message_id: str, deliveries: int, why: str) -> None:
        super().__init__(message_id, deliveries, why)
        self.message_id = message_id
        self.deliveries = deliveries
        self.why = why

    def __str__(self) -> str:
        return f"message {self.message_id} (delivery {self.deliveries}) goes back to the queue: {self.why}"


class ConsoleExposedError(InvalidInputError):
    """``idemflow console`` was asked to listen beyond loopback without authentication.

    Its pages retry, cancel and abort requests, so anyone who can reach it must prove who they
    are: pass ``--token`` or ``--basic-auth``, or listen on ``127.0.0.1``. Nothing listened.
    """

    def __init__(self, host: str) -> None:
        super().__init__(host)
        self.host = host

    def __str__(self) -> str:
        return (
            f"the console would listen on {self.host!r} without authentication: pass --token T or "
            "--basic-auth USER:PASS, or listen on 127.0.0.1"
        )


class ConsoleRefusedError(InvalidInputError):
    """A console action this console does not carry out: it is read-only, or the action needs the
    queue (``--queue``) or the workflow's code (``--workflows``) it was not given. Nothing was done."""


class RequestNotFoundError(InvalidInputError):
    """No run record of this request id (and workflow, if named) in the store: never submitted,
    collected, or a typo."""


class LimitReachedError(IdemflowError):
    """A request met a full concurrency or rate limit under ``run``/``arun``: nothing of it ran.

    ``run`` answers at once rather than hold an API caller for an unknown time; ``retry_after``
    is when a slot or token is likely free (``idemflow.asgi`` sends it as ``Retry-After``).
    Under workers the same limit makes the request wait as a delayed continuation instead.
    """

    code = ErrorCode.LIMIT_REACHED

    def __init__(self, workflow: str, request_id: str, why: str, retry_after: float) -> None:
        super().__init__(workflow, request_id, why, retry_after)
        self.workflow = workflow
        self.request_id = request_id
        self.why = why
        self.retry_after = retry_after

    def __str__(self) -> str:
        return (
            f"workflow {self.workflow!r} request {self.request_id!r} waits for the {self.why}; "
            f"retry after {self.retry_after:.2f} s"
        )
