"""Errors a backend caused: the store or queue said no, for now or for good (see :mod:`idemflow.errors`)."""

from __future__ import annotations

from idemflow.errors._codes import ErrorCode, IdemflowError


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
