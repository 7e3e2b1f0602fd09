"""What an Azure Storage failure means to idemflow, for the Tables store and the Azure queue alike.

One table from azure-core's exceptions and the storage error codes (and HTTP
statuses) to :class:`~idemflow.errors.ErrorCode`, read by the blocking and the
asyncio Azure Tables store and Azure queue, so a wrong account key is a
:class:`~idemflow.errors.ConfigurationError` with ``CREDENTIALS_REFUSED`` from
each of them. The callers word the message; this module decides the code and
what the service said (``service_code``: its error code, else its HTTP status,
else the SDK exception's name when no answer came). Operations are named as
the SDK's methods (``submit_transaction``, ``send_message``).

>>> classify("AuthenticationFailed", 403)
<ErrorCode.CREDENTIALS_REFUSED: 'credentials_refused'>
>>> classify("QueueNotFound", 404), classify("", 503)
(<ErrorCode.NOT_FOUND: 'not_found'>, <ErrorCode.TRANSIENT: 'transient'>)
"""

from __future__ import annotations

import http.client

from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)

from idemflow.errors import ErrorCode

CODES: dict[str, ErrorCode] = {
    "AuthenticationFailed": ErrorCode.CREDENTIALS_REFUSED,
    "AuthorizationFailure": ErrorCode.CREDENTIALS_REFUSED,
    "AuthorizationPermissionMismatch": ErrorCode.CREDENTIALS_REFUSED,
    "AuthorizationResourceTypeMismatch": ErrorCode.CREDENTIALS_REFUSED,
    "InvalidAuthenticationInfo": ErrorCode.CREDENTIALS_REFUSED,
    "TableNotFound": ErrorCode.NOT_FOUND,
    "QueueNotFound": ErrorCode.NOT_FOUND,
    "ServerBusy": ErrorCode.THROTTLED,
    "OperationTimedOut": ErrorCode.TRANSIENT,
    "InternalError": ErrorCode.TRANSIENT,
}
"""The storage error codes idemflow acts on (Tables' and Queues' share this vocabulary)."""

RETRYABLE = frozenset({ErrorCode.TRANSIENT, ErrorCode.THROTTLED})


def classify(code: str, status: int) -> ErrorCode:
    """The code for an Azure answer: its error code first, else its HTTP status (401 and 403
    refused; 408 and 5xx transient; 429 throttled), else ``BACKEND_FAILED``."""
    found = CODES.get(code)
    if found is not None:
        return found
    if status in (401, 403):
        return ErrorCode.CREDENTIALS_REFUSED
    if status == 429:
        return ErrorCode.THROTTLED
    if status == 408 or status >= 500:
        return ErrorCode.TRANSIENT
    return ErrorCode.BACKEND_FAILED


def classify_exception(exc: BaseException) -> tuple[ErrorCode, str, int]:
    """``(code, service_code, HTTP status)`` of an SDK failure; status 0 when no answer came
    (the connection failed or the answer was lost: transient, its outcome unknown)."""
    if isinstance(exc, HttpResponseError):
        code, status = code_of(exc), int(exc.status_code or 0)
        meant = classify(code, status)
        if isinstance(exc, ClientAuthenticationError) and meant is ErrorCode.BACKEND_FAILED:
            meant = ErrorCode.CREDENTIALS_REFUSED
        return meant, code or str(status), status
    if isinstance(exc, (ServiceRequestError, ServiceResponseError, http.client.HTTPException, OSError)):
        return ErrorCode.TRANSIENT, type(exc).__name__, 0
    return ErrorCode.BACKEND_FAILED, type(exc).__name__, 0


def code_of(exc: HttpResponseError) -> str:
    """The storage error code of an SDK failure (``TableNotFound``, ``ServerBusy``, …), or ''."""
    code = getattr(exc, "error_code", None)
    return str(getattr(code, "value", code) or "")


__all__ = ["CODES", "RETRYABLE", "classify", "classify_exception", "code_of"]
