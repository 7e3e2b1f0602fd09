"""What an HTTP answer says for each of the library's errors, without a web framework.

:mod:`idemflow.asgi` answers Starlette responses and :mod:`idemflow.aws_lambda`'s HTTP handlers
answer API Gateway proxy responses; both take the status, code and detail from here, so a
client gets the same answer from either.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from idemflow.errors import (
    ConflictError,
    IdemflowError,
    IdempotencyKeyReuseError,
    InvalidInputError,
    LimitReachedError,
    MessageNotDeliveredError,
    MissingIdempotencyKeyError,
    RequestCancelledError,
    RequestFailedError,
    TransientError,
    VersionNotHeldError,
    WorkflowAborted,
)
from idemflow.keys import check_request_id

KEY_HEADER = "Idempotency-Key"

OUTSIDE_FAILURES = (TimeoutError, ConnectionError)
"""What an outside call raises when its service is slow or unreachable (an effect's
``EffectTimeoutError`` is a ``TimeoutError``): answered 503, as a store outage is, since the call
is keyed and a retry with the same key is safe. Anything else a step raises is the server's fault."""


def one_key(values: Iterable[str], header: str = KEY_HEADER) -> str:
    """The request's key from every value its ``header`` came with, checked, before anything is
    written: none (or only blank ones) is :class:`MissingIdempotencyKeyError`; two different
    ones are :class:`InvalidInputError` (nobody can tell which the client meant); one value sent on
    several header lines is that key. A comma is part of a key (a request id may hold one), so a
    proxy that folds repeated headers into one line makes one key of them.

    >>> one_key(["k-1", " k-1 "])
    'k-1'
    """
    keys = {value.strip() for value in values if value.strip()}
    if not keys:
        raise MissingIdempotencyKeyError(f"send your request id in the {header} header")
    if len(keys) > 1:
        raise InvalidInputError(f"the request has {len(keys)} different {header} values; send one")
    return check_request_id(keys.pop())


class Refusal(NamedTuple):
    """An error answer: ``status`` with ``{"error": code, "detail": detail}`` and ``headers``."""

    status: int
    code: str
    detail: str
    headers: Mapping[str, str] | None = None

    def body(self) -> dict[str, str]:
        """The JSON body. A detail may quote what the client sent, a lone surrogate included
        (JSON can escape one), which no UTF-8 body can carry: it is escaped (``\\udc00``)."""
        detail = self.detail
        shown = detail if detail.isascii() else detail.encode("utf-8", "backslashreplace").decode("utf-8")
        return {"error": self.code, "detail": shown}


def refusal(exc: Exception, refusals: Mapping[str, int] | None = None) -> Refusal | None:
    """The answer for one of the library's errors (or an outside call's :data:`OUTSIDE_FAILURES`),
    or None for one that is the server's fault.

    ``refusals`` maps an abort reason's ``"code"`` (``tx.abort({"code": "sold_out", ...})``)
    to its status; other aborts answer 409.

    >>> refusal(IdempotencyKeyReuseError("order", "k-1", "f1", "f2"))[:2]
    (422, 'idempotency_key_reused')
    """
    match exc:
        case MissingIdempotencyKeyError():
            return Refusal(400, "missing_idempotency_key", str(exc))
        case InvalidInputError():
            return Refusal(400, "invalid_input", str(exc))
        case IdempotencyKeyReuseError():
            return Refusal(422, "idempotency_key_reused", str(exc))
        case WorkflowAborted(reason=reason):
            if isinstance(reason, dict) and isinstance(reason.get("code"), str):
                code = reason["code"]
                return Refusal((refusals or {}).get(code, 409), code, str(reason.get("message", "")))
            return Refusal(409, "aborted", str(reason))
        case RequestFailedError():
            return Refusal(500, "failed", str(exc))
        case RequestCancelledError():
            return Refusal(409, "cancelled", str(exc))
        case LimitReachedError(retry_after=after):
            wait = {"Retry-After": str(max(1, math.ceil(after)))}
            return Refusal(429, "limit_reached", f"{exc}; retry with the same {KEY_HEADER}", wait)
        case MessageNotDeliveredError():
            return Refusal(409, "not_delivered", str(exc))
        case ConflictError() | TransientError() | VersionNotHeldError():
            return Refusal(503, "busy", f"{exc}; retry with the same {KEY_HEADER}", {"Retry-After": "1"})
        case IdemflowError() if not isinstance(exc, OUTSIDE_FAILURES):
            return None
        case TimeoutError() | ConnectionError():  # the service's own words may name its hosts: not quoted
            kind = type(exc).__name__
            detail = f"an outside service did not answer ({kind}); retry with the same {KEY_HEADER}"
            return Refusal(503, "unavailable", detail, {"Retry-After": "1"})
    return None
