"""Errors of what a caller gave or a workflow did: refused input, reused keys, other code, conflicts."""

from __future__ import annotations

from idemflow.errors._codes import ErrorCode, IdemflowError


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


class InvalidScheduleError(InvalidInputError):
    """A schedule that cannot fire: a bad cron expression, timezone, catch-up mode, name, input or
    workflow, two schedules of one name, or one an operator named that the code does not define.
    Raised where the schedule is declared or looked up, before any row is written."""

    def __init__(self, schedule: object, problem: str) -> None:
        super().__init__(schedule, problem)
        self.schedule = schedule
        self.problem = problem

    def __str__(self) -> str:
        return f"schedule {self.schedule!r}: {self.problem}"


class ContinueAsNewError(InvalidInputError):
    """``continue_as_new`` where it cannot mean anything: beside other steps (``all_of``,
    ``any_of``), in ``on_abort`` steps, outside a ``@workflow``; raised before the switch writes."""

    def __init__(self, where: str) -> None:
        super().__init__(where)
        self.where = where

    def __str__(self) -> str:
        return f"continue_as_new {self.where}"


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


class StreamClosedError(InvalidInputError):
    """A stream used past its end: a workflow's ``write_stream`` (or ``close_stream``) after its
    ``close_stream``, or a reader's ``offset`` beyond the values of a stream that is over.

    The write is refused before anything of it is written; it raises in the workflow as its own
    error would, on every replay alike. ``offset`` is None for a write.
    """

    code = ErrorCode.STREAM_CLOSED

    def __init__(
        self, workflow: str, request_id: str, key: str, length: int, offset: int | None = None
    ) -> None:
        super().__init__(workflow, request_id, key, length, offset)
        self.workflow = workflow
        self.request_id = request_id
        self.key = key
        self.length = length
        self.offset = offset

    def __str__(self) -> str:
        where = f"stream {self.key!r} of workflow {self.workflow!r} request {self.request_id!r}"
        if self.offset is None:
            return f"{where} was closed after {self.length} value(s): nothing more can be written to it"
        return f"{where} ended after {self.length} value(s): offset {self.offset} is past its end"


class ForkStepError(InvalidInputError):
    """``admin.fork``'s ``from_step`` is not a step the request can be forked from: out of the
    range its recorded steps allow (steps are numbered from 1, as ``idemflow runs show`` lists
    them), inside an ``all_of``/``any_of`` block, or after a step its abort undid. Nothing was
    written.

    >>> str(ForkStepError("wf", "r-1", 9, "the request has 3 steps: from_step is 1 to 4"))
    "cannot fork workflow 'wf' request 'r-1' from step 9: the request has 3 steps: from_step is 1 to 4"
    """

    def __init__(self, workflow: str, request_id: str, from_step: object, why: str) -> None:
        super().__init__(workflow, request_id, from_step, why)
        self.workflow = workflow
        self.request_id = request_id
        self.from_step = from_step
        self.why = why

    def __str__(self) -> str:
        return (
            f"cannot fork workflow {self.workflow!r} request {self.request_id!r} "
            f"from step {self.from_step!r}: {self.why}"
        )


class RequestExistsError(InvalidInputError):
    """A request id that must be new (``admin.fork``'s ``new_request_id``) already names a
    request of the workflow in the store, or another fork to it is under way. Nothing was written.

    >>> str(RequestExistsError("wf", "r-2"))
    "workflow 'wf' already has a request 'r-2' in this store: pick another new id"
    """

    def __init__(self, workflow: str, request_id: str) -> None:
        super().__init__(workflow, request_id)
        self.workflow = workflow
        self.request_id = request_id

    def __str__(self) -> str:
        named = f"workflow {self.workflow!r} already has a request {self.request_id!r}"
        return f"{named} in this store: pick another new id"
