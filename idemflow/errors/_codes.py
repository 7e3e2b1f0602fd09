"""The root of the error tree and the codes every error carries (see :mod:`idemflow.errors`)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any


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
    CANCELLED = "cancelled"
    """An operator cancelled the request: nothing more of it runs until it is retried."""
    TIMEOUT = "timeout"
    """An effect's attempt took longer than its timeout (that attempt failed), or a stream's reader
    waited longer than its own for the next value."""
    VERSION_NOT_HELD = "version_not_held"
    """The request started on a workflow version this process does not hold."""
    DELIVERY_RETRY = "delivery_retry"
    """A queue-triggered function asks its host to deliver the message again (it counts)."""
    STREAM_CLOSED = "stream_closed"
    """A stream written after its ``close_stream``, or read from an offset past its end."""
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
