"""What an AWS failure means to idemflow, for the DynamoDB store and the SQS queue alike.

One table from botocore error codes (and HTTP statuses) to :class:`~idemflow.errors.ErrorCode`,
read by the blocking and the asyncio DynamoDB store and SQS queue, so a refused
key is a :class:`~idemflow.errors.ConfigurationError` with ``CREDENTIALS_REFUSED``
from each of them and one ``except ConfigurationError`` in a worker stops on
it. The callers word the message (a store names its tables and the ``idemflow
tables create`` fix, a queue its name); this module decides only the class
and the code. Operations are named as the AWS API names them
(``TransactWriteItems``, ``SendMessage``).

>>> classify("UnrecognizedClientException", 400)
<ErrorCode.CREDENTIALS_REFUSED: 'credentials_refused'>
>>> classify("Whatever", 503)
<ErrorCode.TRANSIENT: 'transient'>
>>> api_name("transact_write_items")
'TransactWriteItems'
"""

from __future__ import annotations

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError

from idemflow.errors import ErrorCode

_THROTTLED = (
    "ProvisionedThroughputExceededException",
    "ProvisionedThroughputExceeded",
    "ThrottlingException",
    "Throttling",
    "ThrottlingError",
    "RequestThrottled",
    "RequestLimitExceeded",
    "KmsThrottled",
)
_TRANSIENT = (
    "InternalServerError",
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "RequestTimeout",
    "TransactionConflict",
    "TransactionConflictException",
    "TransactionInProgressException",
)
_REFUSED = (
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "InvalidSignatureException",
    "SignatureDoesNotMatch",
    "IncompleteSignature",
    "InvalidAccessKeyId",
    "InvalidSecurity",
    "AccessDeniedException",
    "AccessDenied",
    "MissingAuthenticationToken",
    "MissingAuthenticationTokenException",
    "ExpiredToken",
    "ExpiredTokenException",
)
_MISSING = ("ResourceNotFoundException", "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist")

CODES: dict[str, ErrorCode] = {
    **dict.fromkeys(_THROTTLED, ErrorCode.THROTTLED),
    **dict.fromkeys(_TRANSIENT, ErrorCode.TRANSIENT),
    **dict.fromkeys(_REFUSED, ErrorCode.CREDENTIALS_REFUSED),
    **dict.fromkeys(_MISSING, ErrorCode.NOT_FOUND),
}
"""The AWS error codes idemflow acts on (DynamoDB's and SQS's; a code may be either's)."""

RETRYABLE = frozenset({ErrorCode.TRANSIENT, ErrorCode.THROTTLED})


def classify(code: str, status: int) -> ErrorCode:
    """The code for an AWS answer: its error code first, else its HTTP status (403 refused;
    408 and 5xx transient; 429 throttled), else ``BACKEND_FAILED``."""
    found = CODES.get(code)
    if found is not None:
        return found
    if status == 403:
        return ErrorCode.CREDENTIALS_REFUSED
    if status == 429:
        return ErrorCode.THROTTLED
    if status == 408 or status >= 500:
        return ErrorCode.TRANSIENT
    return ErrorCode.BACKEND_FAILED


def classify_sdk(exc: BotoCoreError) -> ErrorCode:
    """The code for a failure before any answer: unreachable is transient, no credentials or
    region is the setup's, the rest is unclassified."""
    if isinstance(exc, (BotoConnectionError, HTTPClientError)):
        return ErrorCode.TRANSIENT
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError, NoRegionError)):
        return ErrorCode.MISCONFIGURED
    return ErrorCode.BACKEND_FAILED


def answer_of(exc: ClientError) -> tuple[str, str, int]:
    """``(error code, message, HTTP status)`` of an AWS answer."""
    error = exc.response.get("Error", {})
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return str(error.get("Code", "")), str(error.get("Message", "")), int(status or 0)


def api_name(method: str) -> str:
    """The AWS API name of a botocore client method: ``send_message`` -> ``SendMessage``."""
    return "".join(part[:1].upper() + part[1:] for part in method.split("_"))


__all__ = ["CODES", "RETRYABLE", "answer_of", "api_name", "classify", "classify_sdk"]
