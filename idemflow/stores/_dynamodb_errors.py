"""What a DynamoDB error means to idemflow: the AWS table's code (shared with SQS) worded for a
store, its validation refusals as limits, and the ``fine`` predicates of calls that accept one refusal.

Why apart: the same vocabulary serves the blocking and the asyncio store's calls
(:mod:`idemflow.stores._dynamodb_calls`), a transaction's cancellation reasons and its errors, and it
changes with the service, not with how the calls are made.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from botocore.exceptions import ClientError

from idemflow.errors import ErrorCode, InvalidValueError, LimitExceededError, backend_error
from idemflow.stores._aws_errors import RETRYABLE, classify

BACKEND = "dynamodb"


def error_for(
    what: str, code: str, message: str, status: int, *, url: str, tables: Sequence[str], operation: str
) -> Exception:
    """The idemflow error for DynamoDB's ``code`` on ``what`` (a missing table's names the fix)."""
    origin = {"backend": BACKEND, "operation": operation, "service_code": code or str(status)}
    meant = classify(code, status)
    if meant is ErrorCode.NOT_FOUND:
        logical = sorted(set(tables))
        return backend_error(
            f"{what}: table not found or not active; create it with `idemflow tables create --store "
            f"'{url}' {' '.join(logical)}` or store.create_tables({', '.join(map(repr, logical))})",
            meant,
            **origin,
        )
    if meant in RETRYABLE:
        return backend_error(f"{what} failed, worth retrying: {code}: {message}", meant, **origin)
    if meant is ErrorCode.CREDENTIALS_REFUSED:
        fix = "configure AWS credentials (AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
        return backend_error(
            f"{what}: credentials refused ({code}: {message}); {fix} allowed these tables", meant, **origin
        )
    if code.startswith("Validation") and re.search(r"size|length", message, re.IGNORECASE):
        return LimitExceededError(what, f"{code}: {message}", **origin)
    if code.startswith("Validation") and re.search(r"precision|magnitude", message, re.IGNORECASE):
        return InvalidValueError(
            what, f"{code}: {message} (idemflow.number_model)", **origin
        )  # a sum ADD made
    return backend_error(f"{what} failed: {code}: {message}", meant, **origin)


def exists(exc: ClientError) -> bool:
    """A table creation refused because the table exists already."""
    return error_code(exc) == "ResourceInUseException"


def condition_failed(exc: ClientError) -> bool:
    """A conditional update that found the row changed: the writer that changed it came first."""
    return error_code(exc) == "ConditionalCheckFailedException"


def ttl_on(exc: ClientError) -> bool:
    """Enabling TTL refused because it is enabled already."""
    return error_code(exc) == "ValidationException" and "already" in error_message(exc).lower()


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def error_message(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Message", ""))
