"""The idemflow error tree: one root, one ``code`` on every error, and where a backend said no.

Every error a caller can see derives from :class:`IdemflowError`, so one
``except IdemflowError`` catches them all, and carries an :class:`ErrorCode`
to branch on (never the message). An error a backend caused also names the
``backend`` (``"dynamodb"``, ``"azure_tables"``, ``"sqs"``, ``"azure_queue"``,
``"sqlite"``, ``"memory"``), the ``operation`` (the API call, ``"TransactWriteItems"``)
and the ``service_code`` (the service's own code, or the HTTP status when that
is all it gave). A store and a queue of one cloud classify alike: a refused
credential is a :class:`ConfigurationError` with ``CREDENTIALS_REFUSED`` from
either, so a worker stops on it. Errors are picklable, because workers run in
other processes and ship errors back.

Names: an error ends in ``Error``; :class:`WorkflowAborted` and
:class:`ChildAborted` are outcomes a workflow chose (``tx.abort``), caught as
results, not failures. The names before 1.0 (``StoreError``,
``TransientStoreError``, ``StoreConfigError``, ``CompensationFailed``,
``RequestFailed``, ``MessageNotDelivered``, ``EffectTimeout``,
``MessageRejected``, ``MissingIdempotencyKey``) still resolve here, with a
:class:`DeprecationWarning`.

>>> try:
...     raise InvalidNameError("table", "", "must not be empty")
... except IdemflowError as exc:
...     print(exc, exc.code)
invalid table '': must not be empty invalid_input
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

from idemflow.core.moved import resolve

if TYPE_CHECKING:
    from idemflow.core.step_retry import StepRetry


class ErrorCode(StrEnum):
    """What went wrong, for code to branch on; docs/errors.md says what to do about each."""

    INVALID_INPUT = "invalid_input"
    """Refused before anything was written: fix the call."""
    LIMIT_EXCEEDED = "limit_exceeded"
    """Over a backend's size or count limit: write less per step."""
    KEY_REUSED = "key_reused"
    """A request id met again with another input: use a new request id."""
    NON_DETERMINISM = "non_determinism"
    """Replay met another step than the one recorded: the code changed under a request."""
    CONFLICT = "conflict"
    """Still conflicting with concurrent writers after the retry bound: retry later."""
    TRANSIENT = "transient"
    """Unreachable, timed out or failing (5xx): retry; the outcome of a write may be unknown."""
    THROTTLED = "throttled"
    """The backend asked to slow down: retry after a back-off."""
    CREDENTIALS_REFUSED = "credentials_refused"
    """The backend refused the key, token or signature: fix the credentials; retrying will not help."""
    NOT_FOUND = "not_found"
    """The table or queue does not exist: create it."""
    MISCONFIGURED = "misconfigured"
    """A URL, option, region or missing extra that cannot work: fix the configuration."""
    CLOSED = "closed"
    """The store or queue was closed before this call."""
    BACKEND_FAILED = "backend_failed"
    """The backend refused for a reason idemflow does not classify: read ``service_code``."""
    MESSAGE_LOST = "message_lost"
    """A queue message this holder no longer owns: stop working on it."""
    MESSAGE_REJECTED = "message_rejected"
    """A queue message that must never run (malformed, tampered, unknown): dead-lettered."""
    NOT_DELIVERED = "not_delivered"
    """A workflow message no receiver could ever take: nothing was written."""
    ABORTED = "aborted"
    """The workflow aborted and its compensations ran: an outcome, not a fault."""
    COMPENSATION_FAILED = "compensation_failed"
    """A compensation raised: fix it, then run the request again to resume."""
    STEP_FAILED = "step_failed"
    """A step raised while a worker ran it: retried under its policy."""
    REQUEST_FAILED = "request_failed"
    """A submitted request ended failed: retry it after a fix, or abort it."""
    TIMEOUT = "timeout"
    """An effect's attempt took longer than its timeout: that attempt failed."""
    VERSION_NOT_HELD = "version_not_held"
    """The request started on a workflow version this process does not hold."""
    DELIVERY_RETRY = "delivery_retry"
    """A queue-triggered function asks its host to deliver the message again (it counts)."""
    LIMIT_REACHED = "limit_reached"
    """A concurrency or rate limit is full: try again after ``retry_after`` seconds, or submit."""


_ORIGIN = ("code", "backend", "operation", "service_code")


class IdemflowError(Exception):
    """Root of every error raised by idemflow."""

    code: ErrorCode = ErrorCode.BACKEND_FAILED
    """What went wrong (each class sets its own; a backend error its classification)."""
    backend: str | None = None
    """The backend that raised it (``"dynamodb"``, ``"sqs"``, ...), None if no backend did."""
    operation: str | None = None
    """The backend API call that failed (``"TransactWriteItems"``, ``"send_message"``)."""
    service_code: str | None = None
    """The backend's own code (``"ConditionalCheckFailedException"``, ``"AuthenticationFailed"``,
    ``"SQLITE_BUSY"``), or its HTTP status when that is all it gave."""

    def _origin(
        self,
        code: ErrorCode | None,
        backend: str | None,
        operation: str | None,
        service_code: str | None,
    ) -> None:
        """Keep what the backend said, on the instance (so pickling carries it)."""
        for name, value in zip(_ORIGIN, (code, backend, operation, service_code), strict=True):
            if value is not None:
                setattr(self, name, value)

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses take positional fields; rebuilding them from ``self.args`` keeps them
        # picklable across worker processes, and the backend's fields travel as state.
        state = {name: self.__dict__[name] for name in _ORIGIN if name in self.__dict__}
        return (type(self), self.args, state or None)


class InvalidInputError(IdemflowError, ValueError):
    """Bad input found before anything was written."""

    code = ErrorCode.INVALID_INPUT


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

    def __init__(
        self,
        where: str,
        problem: str,
        *,
        backend: str | None = None,
        operation: str | None = None,
        service_code: str | None = None,
    ) -> None:
        super().__init__(where, problem)
        self.where = where
        self.problem = problem
        self._origin(None, backend, operation, service_code)

    def __str__(self) -> str:
        return f"{self.where}: {self.problem}"


class LimitExceededError(InvalidValueError):
    """A step's write exceeds a backend limit (size, operations per commit)."""

    code = ErrorCode.LIMIT_EXCEEDED


class MessageRejectedError(InvalidInputError):
    """A queue message that must not be executed (malformed, tampered, unknown, forged)."""

    code = ErrorCode.MESSAGE_REJECTED

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


class MissingIdempotencyKeyError(InvalidInputError):
    """An HTTP request without an ``Idempotency-Key`` header (answered 400)."""


class IdempotencyKeyReuseError(IdemflowError):
    """A request id was reused with a different input.

    The first invocation wins: its input fingerprint is stored with the run
    record, and a later call with another input is refused before it writes.
    """

    code = ErrorCode.KEY_REUSED

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

    code = ErrorCode.NON_DETERMINISM

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

    code = ErrorCode.CONFLICT

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


class BackendError(IdemflowError):
    """A store or queue failure: the subclass says whether to retry or fix the setup.

    >>> error = BackendError("read failed", backend="sqlite", operation="SELECT", service_code="SQLITE_IOERR")
    >>> error.code, error.backend, error.service_code
    (<ErrorCode.BACKEND_FAILED: 'backend_failed'>, 'sqlite', 'SQLITE_IOERR')
    """

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode | None = None,
        backend: str | None = None,
        operation: str | None = None,
        service_code: str | None = None,
    ) -> None:
        super().__init__(message)
        self._origin(code, backend, operation, service_code)


class TransientError(BackendError):
    """A backend failure worth retrying: throttling, 5xx, connection reset, timeout.

    The engine retries the same commit; a commit that was applied but whose
    answer was lost then meets its own memo and resolves to the stored value.
    """

    code = ErrorCode.TRANSIENT


class ConfigurationError(BackendError):
    """A setup that cannot work: refused credentials, a missing table or queue, a bad URL or option.

    Retrying will not help, so a worker stops on it (store and queue alike);
    ``code`` says which: ``CREDENTIALS_REFUSED``, ``NOT_FOUND`` or ``MISCONFIGURED``.
    """

    code = ErrorCode.MISCONFIGURED


class QueueError(BackendError):
    """A queue operation that cannot succeed as asked (a message this holder no longer owns, ...).

    Transient queue failures are :class:`TransientError` and setup problems
    :class:`ConfigurationError`, so a worker can tell "retry", "fix the setup"
    and "this message is gone" apart.
    """


class MessageLostError(QueueError):
    """``Queue.extend`` on a message this holder no longer owns.

    Its visibility expired and another receiver took it (or it was deleted),
    so the worker must stop working on it: the new holder will finish it.

    >>> str(MessageLostError("message m1 on queue 'jobs' was received again elsewhere"))
    "message m1 on queue 'jobs' was received again elsewhere"
    """

    code = ErrorCode.MESSAGE_LOST


_CLASS_OF: dict[ErrorCode, type[BackendError]] = {
    ErrorCode.TRANSIENT: TransientError,
    ErrorCode.THROTTLED: TransientError,
    ErrorCode.CREDENTIALS_REFUSED: ConfigurationError,
    ErrorCode.NOT_FOUND: ConfigurationError,
    ErrorCode.MISCONFIGURED: ConfigurationError,
}


def backend_error(
    message: str, code: ErrorCode, *, backend: str, operation: str | None, service_code: str | None
) -> BackendError:
    """The error a backend's classified failure raises: the class follows the code, so a store and
    a queue that classify alike raise alike.

    >>> backend_error("no", ErrorCode.CREDENTIALS_REFUSED, backend="sqs", operation="SendMessage",
    ...               service_code="InvalidClientTokenId").__class__.__name__
    'ConfigurationError'
    """
    error_class = _CLASS_OF.get(code, BackendError)
    return error_class(message, code=code, backend=backend, operation=operation, service_code=service_code)


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


RENAMED: dict[str, str] = {
    "StoreError": "BackendError",
    "TransientStoreError": "TransientError",
    "StoreConfigError": "ConfigurationError",
    "CompensationFailed": "CompensationError",
    "RequestFailed": "RequestFailedError",
    "MessageNotDelivered": "MessageNotDeliveredError",
    "EffectTimeout": "EffectTimeoutError",
    "MessageRejected": "MessageRejectedError",
    "MissingIdempotencyKey": "MissingIdempotencyKeyError",
}
"""Names before 1.0 and the class each now is; they resolve until the next minor release."""


def deprecated_error(module: str, name: str, moved: tuple[str, ...] = ()) -> type[IdemflowError]:
    """For the ``__getattr__`` of a module that exported an error before 1.0: the class an old
    name (renamed, or one of ``moved`` here from that module) stands for, with its
    :class:`DeprecationWarning`; :class:`AttributeError` for any other name.

    The warning is the one every moved name gives (:mod:`idemflow.core.moved`), naming the error's
    public home, :mod:`idemflow`.

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     deprecated_error("idemflow", "StoreError").__name__, str(caught[0].message)
    ('BackendError', 'idemflow.StoreError moved: import BackendError from idemflow (renamed from StoreError)')
    """
    new = RENAMED.get(name, name if name in moved else None)
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    found = resolve(module, name, {name: f"idemflow:{new}"}, depth=1)
    assert isinstance(found, type) and issubclass(found, IdemflowError)
    return found


def __getattr__(name: str) -> type[IdemflowError]:
    return deprecated_error(__name__, name)


__all__ = [
    "BackendError",
    "ChildAborted",
    "CompensationError",
    "ConfigurationError",
    "ConflictError",
    "ConsoleExposedError",
    "ConsoleRefusedError",
    "DeliveryRetryError",
    "EffectTimeoutError",
    "ErrorCode",
    "IdemflowError",
    "IdempotencyKeyReuseError",
    "InvalidInputError",
    "InvalidNameError",
    "InvalidValueError",
    "LimitExceededError",
    "LimitReachedError",
    "MessageLostError",
    "MessageNotDeliveredError",
    "MessageRejectedError",
    "MissingIdempotencyKeyError",
    "NonDeterminismError",
    "QueueError",
    "RequestFailedError",
    "RequestNotFoundError",
    "StepFailedError",
    "TransientError",
    "VersionNotHeldError",
    "WorkflowAborted",
    "backend_error",
]
